"""Copies and fills: compact copies of views, writes into regions, constants, ranges."""

from __future__ import annotations

import numpy as np

from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .launch import map_inplace, map_new
from .kernel_args import pad_scalars, scalar_words
from .storage import wrap

METHODS = ("copy_strided", "copy_into_inplace", "fill_inplace")

COPY = family("copy", [("a", "in", 0), ("y", "out", 0)], flags=("HAS_SRC",), includes=("map.wgsl",))
COPY_INTO = family("copy_into", [("a", "in", 0), ("y", "atomic", 0)], file="copy.wgsl",
                   flags=("INPLACE", "HAS_SRC"))
FILL_INTO = family("fill_into", [("y", "atomic", 0)], file="copy.wgsl", flags=("INPLACE",))
FILL = family("fill", [("y", "out", 0)], file="copy.wgsl", includes=("map.wgsl",))

_EMPTY = ()


def copy_strided(s, layout):
    """A new compact buffer with the elements of ``layout`` (always a new buffer)."""
    state = s.bdev
    key = (s.dtype.name,)
    pipe = state.kernels.ref(COPY, key)
    n = layout.count
    buf = map_new(state, pipe, ((s, layout),), s.dtype, n)
    return wrap(state, buf, s.dtype, n)


def copy_into_inplace(s, dst_layout, src, src_layout):
    state = s.bdev
    if src.buf is s.buf:
        # A buffer cannot be bound for reading and writing in one dispatch.
        src = src.copy_strided(src_layout)
        src_layout = Layout.contiguous_of(src_layout.shape)
    pipe = state.kernels.ref(COPY_INTO, (s.dtype.name,))
    map_inplace(state, pipe, ((src, src_layout),), s, dst_layout)


def fill_inplace(s, layout, value):
    state = s.bdev
    pipe = state.kernels.ref(FILL_INTO, (s.dtype.name,))
    map_inplace(state, pipe, (), s, layout, pad_scalars(scalar_words(s.dtype, value)))


def fill(state, count, dtype, value):
    state.check_dtype(dtype, "full")
    pipe = state.kernels.ref(FILL, (dtype.name,))
    buf = map_new(state, pipe, (), dtype, count, pad_scalars(scalar_words(dtype, value)))
    return wrap(state, buf, dtype, count)


def arange(state, start, step, count, dtype):
    state.check_dtype(dtype, "arange")
    if dtype.is_int:
        pipe = state.kernels.ref(FILL, (dtype.name,), constants=(("MODE", 1),))
        words = pad_scalars(scalar_words(dtype, int(start)) + scalar_words(dtype, int(step)))
        buf = map_new(state, pipe, (), dtype, count, words)
        return wrap(state, buf, dtype, count)
    # Floats: computed in f64 and rounded once, exactly as the CPU backend does.
    vals = (np.arange(count, dtype=np.float64) * float(step) + float(start)).astype(dtype.np)
    return state.from_numpy(vals, dtype)


def new_empty(state, count, dtype):
    """An uninitialised storage (its contents are whatever the pool buffer holds)."""
    with state.commands.lock:
        buf = state.pool.alloc(count * dtype.size_in_bytes)
    return wrap(state, buf, dtype, count)


def check_window(state, storage, what):
    if storage.buf.size > state.max_binding:
        raise TallowError(
            f"{what}: a {storage.buf.size}-byte buffer exceeds the adapter's max storage "
            f"binding size ({state.max_binding} bytes); this op does not split its work")
