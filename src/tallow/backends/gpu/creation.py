"""Seeded random tensors on the GPU (Philox4x32-10, counter based).

The device holds a 64-bit seed and a counter; each call takes the next
``count`` counter values, so a sequence of calls after ``set_seed(n)`` gives the
same tensors every run, on every adapter.
"""

from __future__ import annotations

from ...errors import UnsupportedDTypeError
from .kernels import family
from .launch import map_new
from .kernel_args import pad_scalars, scalar_words
from .storage import wrap

RANDOM = family("random", [("y", "out", 0)], math=True, includes=("map.wgsl",))


def rand(state, count, dtype, kind, a, b):
    if not dtype.is_float:
        op = "rand" if kind == "uniform" else "randn"
        raise UnsupportedDTypeError(f"{op}: random tensors must have a float dtype, got {dtype}")
    state.check_dtype(dtype, "rand")
    seed, offset = state.next_rng_block(count)
    pipe = state.kernels.ref(RANDOM, (dtype.name,), "main", (("OP", 0 if kind == "uniform" else 1),))
    words = pad_scalars(scalar_words(dtype, a, False) + scalar_words(dtype, b, False)) + (
        seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF)
    return wrap(state, map_new(state, pipe, (), dtype, count, words), dtype, count)
