"""Devices: cheap handles over one shared state per physical device.

``Device.cpu()`` and ``Device.gpu(ordinal)`` return handles; every handle of the
same device shares its backend state (queue, pools, kernel cache, seed), and
sameness is decided by the in-process device id. A handle compares equal to its
string form ("cpu", "gpu" for ordinal 0, "gpu:1").
"""

from __future__ import annotations

from .backends.cpu.device import CPU_STATE
from .dtype import DType
from .errors import InvalidArgumentError, TallowError


class Device:
    """Where a tensor's storage lives: ``tl.cpu`` (``Device.cpu()``) or a WebGPU adapter (``Device.gpu(ordinal)``).

    Devices compare equal when they are the same backend and ordinal; operands of one op
    must be on the same device (``DeviceMismatchError`` otherwise).
    """
    __slots__ = ("_state",)

    def __init__(self, state):
        self._state = state

    # -- constructors ------------------------------------------------------------
    @staticmethod
    def cpu() -> "Device":
        return cpu

    @staticmethod
    def gpu(ordinal: int = 0) -> "Device":
        # The GPU backend (wgpu) loads only when a GPU is asked for.
        from .backends.gpu import gpu_device_state

        state = gpu_device_state(ordinal)
        if _manual_seed is not None and state.id not in _manually_seeded:
            # A device first used after tl.manual_seed gets that seed too.
            _manually_seeded.add(state.id)
            state.set_seed(_manual_seed)
        return Device.of(state)

    @staticmethod
    def of(state) -> "Device":
        """The canonical handle of a backend device state (made on first request:
        backends create device states but never handles)."""
        handle = state.handle
        if handle is None:
            handle = state.handle = Device(state)
        return handle

    @staticmethod
    def parse(value) -> "Device":
        if isinstance(value, Device):
            return value
        kind, ordinal = _parse_name(value)
        return Device.cpu() if kind == "cpu" else Device.gpu(ordinal)

    # -- identity ----------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self._state.kind

    @property
    def type(self) -> str:
        """PyTorch's name for ``kind``: ``"cpu"`` or ``"gpu"``."""
        return self._state.kind

    @property
    def ordinal(self) -> int:
        return self._state.ordinal

    @property
    def id(self) -> int:
        return self._state.id

    @property
    def is_cpu(self) -> bool:
        return self._state.kind == "cpu"

    @property
    def is_gpu(self) -> bool:
        return self._state.kind == "gpu"

    def same_device(self, other) -> bool:
        return isinstance(other, Device) and other._state is self._state

    def __eq__(self, other):
        if isinstance(other, Device):
            return other._state is self._state
        if isinstance(other, str):
            try:
                return _parse_name(other) == (self.kind, self.ordinal)
            except TallowError:
                return False
        return NotImplemented

    def __hash__(self):
        return hash(("tallow.Device", self._state.id))

    def __copy__(self):
        return Device(self._state)

    def __deepcopy__(self, memo):
        return Device(self._state)

    def __reduce__(self):
        return (Device.parse, (str(self),))

    def __str__(self):
        if self.kind == "cpu":
            return "cpu"
        return f"gpu:{self.ordinal}"

    def __repr__(self):
        return f"Device({str(self)!r})"

    # -- control -----------------------------------------------------------------
    def synchronize(self) -> None:
        self._state.synchronize()

    def set_seed(self, seed: int) -> None:
        self._state.set_seed(int(seed))

    def supports_dtype(self, dtype) -> bool:
        return self._state.supports_dtype(DType.parse(dtype))

    def info(self) -> dict:
        return self._state.info()

    def _gpu_only(self, what: str):
        if self.kind != "gpu":
            raise TallowError(f"{what} is only available on a GPU device, not on {self}")
        return self._state

    def memory_stats(self) -> dict:
        return self._gpu_only("memory_stats").memory_stats()

    def set_cache_limit(self, nbytes: int) -> None:
        """Keep at most ``nbytes`` of unused buffers cached for reuse (GPU only)."""
        import numbers

        if (isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral)
                or nbytes < 0):
            raise InvalidArgumentError(
                f"set_cache_limit: the limit is a byte count, an integer >= 0, got {nbytes!r}")
        self._gpu_only("set_cache_limit").set_cache_limit(int(nbytes))

    def kernel_stats(self) -> dict:
        return self._gpu_only("kernel_stats").kernel_stats()


_manual_seed = None
_manually_seeded: set = set()


def manual_seed(seed: int) -> None:
    """PyTorch's ``manual_seed``: seed every device's generator (the CPU, the GPUs in
    use, and GPUs first used later), so ``rand``/``randn``/``randint``/... repeat."""
    global _manual_seed
    seed = int(seed)
    _manual_seed = seed
    _manually_seeded.clear()
    cpu.set_seed(seed)
    import sys

    # GPU states exist only once the GPU backend was imported (it is not imported here).
    gpu_states = getattr(sys.modules.get(__package__ + ".backends.gpu.device"), "_states", {})
    for state in list(gpu_states.values()):
        _manually_seeded.add(state.id)
        state.set_seed(seed)


def _parse_name(value) -> tuple:
    if not isinstance(value, str):
        raise TypeError(f"a device is a Device or a string, got {type(value).__name__}")
    name = value.strip().lower()
    if name == "cpu":
        return "cpu", 0
    kind, _, ordinal = name.partition(":")
    if kind in ("gpu", "wgpu", "webgpu"):
        if not ordinal:
            return "gpu", 0
        if ordinal.isdigit():
            return "gpu", int(ordinal)
    if kind in ("cuda", "metal", "mps"):
        raise TallowError(
            f"device {value!r}: tallow has no {kind} backend; its GPU backend is 'gpu' "
            "(WebGPU: Metal, Vulkan or D3D12 underneath): write x.to('gpu') / "
            "model.to('gpu'), or 'cpu'"
        )
    raise TallowError(f"unknown device {value!r}; expected 'cpu', 'gpu' or 'gpu:N'")


def _make_cpu() -> Device:
    return Device.of(CPU_STATE)


cpu = _make_cpu()
