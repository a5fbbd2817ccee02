"""Creation of CPU storages: constants, ranges, seeded random numbers, NumPy data.

A mixin of the CPU device state (which holds the generator ``_rng`` and its lock).
"""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from .storage import CpuStorage


def _float_compute_dtype(dtype):
    # f16/bf16 random numbers are drawn in f32 and rounded, as candle does.
    return np.float64 if dtype is dt.f64 else np.float32


class CpuCreation:
    """Creation methods of ``CpuDeviceState``."""

    def zeros(self, count, dtype):
        return CpuStorage.adopt(np.zeros(count, dtype.np), dtype)

    def full(self, count, dtype, value):
        return CpuStorage.adopt(np.full(count, value, dtype.np), dtype)

    def arange(self, start, step, count, dtype):
        if dtype.is_int:
            vals = np.arange(count, dtype=np.int64) * int(step) + int(start)
            return CpuStorage.adopt(vals.astype(dtype.np), dtype)
        vals = np.arange(count, dtype=np.float64) * float(step) + float(start)
        return CpuStorage.adopt(vals.astype(dtype.np), dtype)

    def _check_float(self, op, dtype):
        if not dtype.is_float:
            raise UnsupportedDTypeError(f"{op}: random tensors must have a float dtype, got {dtype}")

    def rand_uniform(self, count, dtype, low, high):
        self._check_float("rand", dtype)
        with self._lock:
            vals = self._rng.random(count, dtype=_float_compute_dtype(dtype))
        vals *= high - low
        vals += low
        return CpuStorage.adopt(vals.astype(dtype.np, copy=False), dtype)

    def rand_normal(self, count, dtype, mean, std):
        self._check_float("randn", dtype)
        with self._lock:
            vals = self._rng.standard_normal(count, dtype=_float_compute_dtype(dtype))
        vals *= std
        vals += mean
        return CpuStorage.adopt(vals.astype(dtype.np, copy=False), dtype)

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
