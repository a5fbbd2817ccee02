"""The CPU device state: the seeded generator, device info; creation comes from
``CpuCreation`` (creation.py)."""

from __future__ import annotations

import platform
import threading

import numpy as np

from ..base import BackendDevice
from . import heap
from .creation import CpuCreation
from .quantized import qmatmul_path
from .storage import CpuStorage
from .threads import CONFIG


class CpuDeviceState(CpuCreation, BackendDevice):
    kind = "cpu"
    ordinal = 0
    id = 0

    def __init__(self):
        self.handle = None  # the canonical Device handle, set by tallow.device
        self._lock = threading.Lock()
        self._rng = np.random.default_rng()
        heap.keep_slack()  # a training step's memory reused step after step (heap.py)

    def qmatmul_path(self, ggml_type):
        """"native", "numba" or "numpy": the CPU multiplies every GGML type."""
        return qmatmul_path(ggml_type)

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
