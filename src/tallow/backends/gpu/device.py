"""The GPU device state: one per adapter, shared by every ``Device`` handle.

It owns the wgpu device and queue, the command stream, the buffer pool, the
kernel cache and the random seed; ``id`` (an in-process counter, never 0, which
is the CPU's) decides "same device". Adapters are ordered discrete GPUs first,
then integrated, virtual and CPU (lavapipe) ones; native APIs (Vulkan, Metal,
D3D12) before OpenGL. ``gpu:N`` is the N-th.
"""

from __future__ import annotations

import itertools
import os
import threading

from ... import dtype as dt
from ...errors import TallowError, UnsupportedDTypeError
from ..base import BackendDevice
from .commands import Commands
from .kernels import Kernels
from .pool import BufferPool
from . import quantized
from .creation import GpuCreation
from .wgsl_types import TYPES

_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 1}
# Features tallow uses when the adapter has them.
WANTED_FEATURES = ("shader-f16", "shader-f64", "shader-int64", "subgroup", "timestamp-query")

_ids = itertools.count(1)
_lock = threading.Lock()
_states: dict = {}
_adapters = None


def _quiet_env():
    # Mesa's Vulkan loader complains on stderr when XDG_RUNTIME_DIR is unset.
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def adapters() -> list:
    """The WebGPU adapters of this machine, in ``gpu:N`` order."""
    global _adapters
    if _adapters is None:
        _quiet_env()
        import wgpu

        found = list(wgpu.gpu.enumerate_adapters_sync())

        def rank(a):
            info = a.info
            return (_TYPE_RANK.get(info.get("adapter_type"), 4),
                    _BACKEND_RANK.get(info.get("backend_type"), 2))

        _adapters = sorted(found, key=rank)
    return _adapters


def adapter_available() -> bool:
    try:
        return bool(adapters())
    except Exception:
        return False


def gpu_device_state(ordinal: int = 0) -> "GpuDeviceState":
    ordinal = int(ordinal)
    state = _states.get(ordinal)
    if state is not None:
        return state
    with _lock:
        state = _states.get(ordinal)
        if state is None:
            state = _states[ordinal] = new_device_state(ordinal)
    return state


def new_device_state(ordinal: int = 0, disable_features=(), max_binding=None) -> "GpuDeviceState":
    """A fresh, independent device on adapter ``ordinal`` (its own queue, pool and
    kernel cache, and its own id). ``Device.gpu(n)`` shares one per ordinal; this is
    for tests and benchmarks: a second device, one with features masked, or one that
    pretends its max storage binding size is ``max_binding`` bytes (to exercise the
    split of large tensors without allocating gigabytes)."""
    try:
        found = adapters()
    except Exception as e:
        raise TallowError(f"no WebGPU adapter could be enumerated ({e})") from None
    if not 0 <= ordinal < len(found):
        raise TallowError(
            f"gpu:{ordinal}: no such adapter ({len(found)} WebGPU adapter(s) found"
            + (": " + ", ".join(_describe(a.info) for a in found) if found else "") + ")")
    state = GpuDeviceState(found[ordinal], ordinal, disable_features)
    if max_binding is not None:
        state.max_binding = state.commands.max_binding = min(int(max_binding), state.max_binding)
    return state


def _describe(info) -> str:
    return f"{info.get('device') or info.get('description')} ({info.get('backend_type')})"


class GpuDeviceState(GpuCreation, BackendDevice):
    kind = "gpu"

    def __init__(self, adapter, ordinal, disable_features=()):
        self.ordinal = ordinal
        self.id = next(_ids)
        self.adapter = adapter
        self.adapter_info = dict(adapter.info)
        self.adapter_name = _describe(self.adapter_info)
        available = set(adapter.features) - set(disable_features)
        want = [f for f in WANTED_FEATURES if f in available]
        self.device = adapter.request_device_sync(
            label=f"tallow gpu:{ordinal}", required_features=want,
            required_limits=dict(adapter.limits))
        self.features = set(self.device.features) - set(disable_features)
        self.limits = dict(self.device.limits)
        self.max_binding = self.limits["max-storage-buffer-binding-size"]
        self.max_groups = self.limits["max-compute-workgroups-per-dimension"]
        self.commands = Commands(self)
        self.pool = BufferPool(self)
        self.kernels = Kernels(self)
        self._seed_lock = threading.Lock()
        self._seed = int.from_bytes(os.urandom(8), "little")
        self._rng_offset = 0
        self.handle = None  # the canonical Device handle, made by tallow.device (Device.of)

    def __repr__(self):
        return f"GpuDeviceState(gpu:{self.ordinal}, id={self.id}, {self.adapter_name})"

    # -- dtypes -----------------------------------------------------------------------
    def supports_dtype(self, dtype) -> bool:
        feature = TYPES[dtype.name].feature
        return feature is None or feature in self.features

    def check_dtype(self, dtype, op: str) -> None:
        feature = TYPES[dtype.name].feature
        if feature is not None and feature not in self.features:
            raise UnsupportedDTypeError(
                f"{op}: dtype {dtype} needs the WebGPU feature '{feature}', which adapter "
                f"{self.adapter_name} (gpu:{self.ordinal}) does not offer")

    def qmatmul_path(self, ggml_type):
        """"gpu" for the GGML types with kernels here, else None."""
        return "gpu" if quantized.supported(ggml_type.name) else None

    # -- control --------------------------------------------------------------------------
    def set_seed(self, seed: int) -> None:
        with self._seed_lock:
            self._seed = int(seed) & ((1 << 64) - 1)
            self._rng_offset = 0

    def next_rng_block(self, n: int):
        """(seed, counter offset) for ``n`` random values; advances the counter."""
        with self._seed_lock:
            off = self._rng_offset
            self._rng_offset += n
            return self._seed, off

    def synchronize(self) -> None:
        self.commands.synchronize()

    def memory_stats(self) -> dict:
        with self.commands.lock:
            return self.pool.stats()

    def set_cache_limit(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"set_cache_limit: a limit in bytes must be >= 0, got {nbytes}")
        cmd = self.commands
        with cmd.lock:
            self.pool.cache_limit = int(nbytes)
            idx = cmd.flush_locked()
            cmd._release_unused()
        cmd.wait(idx)

    def kernel_stats(self) -> dict:
        return self.kernels.stats()

    def info(self) -> dict:
        info = {
            "backend": f"WebGPU on {self.adapter_info.get('backend_type')} (wgpu-native)",
            "adapter": self.adapter_name,
            "adapter_name": self.adapter_info.get("device"),
            "adapter_type": self.adapter_info.get("adapter_type"),
            "backend_type": self.adapter_info.get("backend_type"),
            "vendor": self.adapter_info.get("vendor"),
            "driver": self.adapter_info.get("description"),
            "ordinal": self.ordinal,
            "id": self.id,
            "features": sorted(self.features),
            "adapter_features": sorted(self.adapter.features),
            "limits": dict(self.limits),
            "dtypes": [d.name for d in dt.ALL if self.supports_dtype(d)],
            "pipeline_cache": "in-process (the wgpu package exposes no persistent pipeline cache)",
        }
        info.update(self.commands.counters())
        return info
