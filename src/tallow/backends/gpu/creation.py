"""Creation of GPU storages: uninitialised, constants, ranges, seeded random
numbers (Philox4x32-10, counter based), NumPy data. A mixin of the GPU device state.

The device holds a 64-bit seed and a counter; each call takes the next
``count`` counter values, so a sequence of calls after ``set_seed(n)`` gives the
same tensors every run, on every adapter.
"""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from .kernel_args import pad_scalars, scalar_words
from .kernels import family
from .launch import map_new
from .storage import new_storage

RANDOM = family("random", [("y", "out", 0)], math=True, includes=("map.wgsl",))
FILL = family("fill", [("y", "out", 0)], file="copy.wgsl", includes=("map.wgsl",))


class GpuCreation:
    """Creation methods of ``GpuDeviceState``."""

    def full(self, count, dtype, value):
        self.check_dtype(dtype, "full")
        pipe = self.kernels.ref(FILL, (dtype.name,))
        buf = map_new(self, pipe, (), dtype, count, pad_scalars(scalar_words(dtype, value)))
        return self.storage(buf, dtype, count)


    def arange(self, start, step, count, dtype):
        self.check_dtype(dtype, "arange")
        if dtype.is_int:
            pipe = self.kernels.ref(FILL, (dtype.name,), constants=(("MODE", 1),))
            words = pad_scalars(scalar_words(dtype, int(start)) + scalar_words(dtype, int(step)))
            buf = map_new(self, pipe, (), dtype, count, words)
            return self.storage(buf, dtype, count)
        # Floats: computed in f64 and rounded once, exactly as the CPU backend does.
        vals = (np.arange(count, dtype=np.float64) * float(step) + float(start)).astype(dtype.np)
        return self.from_numpy(vals, dtype)


    def empty(self, count, dtype):
        """An uninitialised storage (its contents are whatever the pool buffer holds)."""
        with self.commands.lock:
            buf = self.pool.alloc(count * dtype.size_in_bytes)
        return self.storage(buf, dtype, count)


    def _rand(self, count, dtype, kind, a, b):
        if not dtype.is_float:
            op = "rand" if kind == "uniform" else "randn"
            raise UnsupportedDTypeError(f"{op}: random tensors must have a float dtype, got {dtype}")
        self.check_dtype(dtype, "rand")
        seed, offset = self.next_rng_block(count)
        pipe = self.kernels.ref(RANDOM, (dtype.name,), "main", (("OP", 0 if kind == "uniform" else 1),))
        words = pad_scalars(scalar_words(dtype, a, False) + scalar_words(dtype, b, False)) + (
            seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)
        return self.storage(map_new(self, pipe, (), dtype, count, words), dtype, count)


    def zeros(self, count, dtype):
        # All-zero bytes, as the CPU's: f8e8m0 has no zero, its code 0 is 2^-127.
        return self.full(count, dtype, 2.0**-127 if dtype is dt.f8e8m0 else 0)


    def rand_uniform(self, count, dtype, low, high):
        return self._rand(count, dtype, "uniform", low, high)


    def rand_normal(self, count, dtype, mean, std):
        return self._rand(count, dtype, "normal", mean, std)


    def from_numpy(self, array, dtype, copy=True):
        self.check_dtype(dtype, "to_device")
        arr = np.ascontiguousarray(array, dtype=dtype.np)
        return self.storage(self.commands.upload(arr), dtype, arr.size)


    def storage(self, buf, dtype, count):
        """A storage of this device over a pool buffer."""
        return new_storage(self, buf, dtype, count)
