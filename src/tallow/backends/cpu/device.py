"""The CPU device: creation of storages, the seeded generator, device info."""

from __future__ import annotations

import platform
import threading

import numpy as np

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from ..base import BackendDevice
from .storage import CpuStorage, wrap
from .threads import CONFIG


def _float_compute_dtype(dtype):
    # f16/bf16 random numbers are drawn in f32 and rounded, as candle does.
    return np.float64 if dtype is dt.f64 else np.float32


class CpuDeviceState(BackendDevice):
    kind = "cpu"
    ordinal = 0
    id = 0

    def __init__(self):
        self.handle = None  # the canonical Device handle, set by tallow.device
        self._lock = threading.Lock()
        self._rng = np.random.default_rng()

    # -- creation ------------------------------------------------------------------
    def zeros(self, count, dtype):
        return wrap(np.zeros(count, dtype.np), dtype)

    def full(self, count, dtype, value):
        return wrap(np.full(count, value, dtype.np), dtype)

    def arange(self, start, step, count, dtype):
        if dtype.is_int:
            vals = np.arange(count, dtype=np.int64) * int(step) + int(start)
            return wrap(vals.astype(dtype.np), dtype)
        vals = np.arange(count, dtype=np.float64) * float(step) + float(start)
        return wrap(vals.astype(dtype.np), dtype)

    def _check_float(self, op, dtype):
        if not dtype.is_float:
            raise UnsupportedDTypeError(f"{op}: random tensors must have a float dtype, got {dtype}")

    def rand_uniform(self, count, dtype, low, high):
        self._check_float("rand", dtype)
        with self._lock:
            vals = self._rng.random(count, dtype=_float_compute_dtype(dtype))
        vals *= high - low
        vals += low
        return wrap(vals.astype(dtype.np, copy=False), dtype)

    def rand_normal(self, count, dtype, mean, std):
        self._check_float("randn", dtype)
        with self._lock:
            vals = self._rng.standard_normal(count, dtype=_float_compute_dtype(dtype))
        vals *= std
        vals += mean
        return wrap(vals.astype(dtype.np, copy=False), dtype)

    def from_numpy(self, array, dtype, copy=True):
        """``copy=False`` keeps a C-contiguous array of the dtype as the buffer itself:
        its owner may still write it, so the storage is marked shared."""
        if not copy and array.dtype == dtype.np and array.flags.c_contiguous:
            return CpuStorage.from_flat(array.reshape(-1), dtype, shared=True)
        flat = np.array(array, dtype=dtype.np, order="C", copy=True).reshape(-1)
        return CpuStorage.from_flat(flat, dtype)

    def adopt_numpy(self, array, dtype):
        """A storage taking over a private, freshly made array (nobody else writes it)."""
        flat = np.asarray(array, dtype=dtype.np, order="C").reshape(-1)
        return CpuStorage.from_flat(flat, dtype)

    # -- control -------------------------------------------------------------------
    def set_seed(self, seed):
        with self._lock:
            self._rng = np.random.default_rng(seed)

    def synchronize(self):
        pass

    def supports_dtype(self, dtype):
        return True

    def info(self):
        try:
            from numpy._core._multiarray_umath import __cpu_features__ as feats

            simd = sorted(k for k, v in feats.items() if v)
        except Exception:
            simd = []
        name = _cpu_model()
        return {
            "backend": "cpu",
            # The keys every device's info has (the GPU's meaning: what runs the ops,
            # what it can do, and its limits: none beyond memory on the CPU).
            "adapter": name,
            "features": simd,
            "limits": {},
            "name": name,
            "machine": platform.machine(),
            "threads": CONFIG.get(),
            "threads_rule": CONFIG.rule(),
            "threads_details": CONFIG.details(),
            "blas": CONFIG.blas_info(),
            "numpy": np.__version__,
            "simd": simd,
        }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


CPU_STATE = CpuDeviceState()

CpuStorage.bdev = CPU_STATE
