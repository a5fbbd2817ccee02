"""Splitting large element-wise work over the CPU threads.

NumPy's loops release the GIL, so rows of one op can run on several threads at
once. Measured on a 2-core machine, a 2048x2048 f32 add drops from ~1.8 ms to
~1.1 ms on two threads; below a few hundred thousand elements the hand-off costs
more than it saves, so small ops stay on the calling thread (that keeps the
per-op fast path short).
"""

from __future__ import annotations

import numpy as np

from .native.pool import in_serial, run_pieces, serial, sync_threads  # noqa: F401  (serial: re-exported)
from .threads import CONFIG

MIN_ELEMENTS = 1 << 18  # 262,144 elements: below this one thread is faster


def worth_splitting(shape) -> bool:
    if not shape or shape[0] < 2 or in_serial():
        return False
    n = 1
    for d in shape:
        n *= d
    return n >= MIN_ELEMENTS and CONFIG.get() > 1


def _bounds(rows: int, parts: int):
    step, extra = divmod(rows, parts)
    start = 0
    for i in range(parts):
        stop = start + step + (1 if i < extra else 0)
        if stop > start:
            yield start, stop
        start = stop


PIECES_PER_THREAD = 2  # a core taken by another process then delays half a thread's share


def run_rows(kernel, out: np.ndarray, *inputs) -> np.ndarray:
    """``kernel(out[a:b], *[x[a:b] for x in inputs])`` over row blocks, on the pool.

    Inputs that are not arrays (scalars) are passed whole; arrays must have the
    output's leading dim (stride-0 broadcasts are fine). The blocks go to
    whichever thread is free first, the calling thread included
    (:func:`native.pool.run_pieces`).
    """
    threads = CONFIG.get()
    blocks = list(_bounds(out.shape[0], min(threads * PIECES_PER_THREAD, out.shape[0])))

    def piece(a, b):
        kernel(out[a:b], *[x[a:b] if isinstance(x, np.ndarray) and x.ndim else x for x in inputs])

    run_pieces(piece, blocks, threads)
    return out


def ufunc(f, out_dtype, *inputs) -> np.ndarray:
    """``f(*inputs)`` for a NumPy ufunc, split over threads when large.

    Transposed inputs are not split by rows: NumPy computes them fastest in their
    own memory order, and the result's tiled copy to row-major is split instead.
    """
    shape = np.broadcast_shapes(*[np.shape(x) for x in inputs])
    if not worth_splitting(shape) or any(
        isinstance(x, np.ndarray) and _transposed_axis(x) is not None for x in inputs
    ):
        return f(*inputs)
    out = np.empty(shape, out_dtype)
    return run_rows(lambda o, *xs: f(*xs, out=o), out, *inputs)


def mapped(fn, out_dtype, x: np.ndarray) -> np.ndarray:
    """``fn(x)`` for any element-wise function returning an array, split when large.

    ``out_dtype`` None: the function's result dtype (found on the first block).
    """
    if not worth_splitting(x.shape):
        return fn(x)
    if out_dtype is None:
        out_dtype = fn(x[:1]).dtype
    out = np.empty(x.shape, out_dtype)

    def kernel(o, xs):
        o[...] = fn(xs)

    return run_rows(kernel, out, x)


TILE = 64  # 64x64 f32 tiles: both the rows read and the rows written stay in cache


def _transposed_axis(x: np.ndarray):
    """The dim whose stride is the element size when it is not the last one, else None.

    Copying such an array row by row reads one element per cache line; copying it
    in square tiles reads and writes whole lines (NumPy's own copy of a 2048x2048
    transpose takes ~30-40 ms, tiled ~17 ms with NumPy slices, ~5 ms in C).
    """
    if x.ndim < 2 or x.size < 4 * TILE * TILE:
        return None
    item = x.itemsize
    if x.strides[-1] == item or x.shape[-1] == 1:
        return None
    for d in range(x.ndim - 2, -1, -1):
        if x.strides[d] == item and x.shape[d] > 1:
            return d
    return None


def _tiled(out: np.ndarray, src: np.ndarray, axis: int) -> None:
    o = np.moveaxis(out, axis, -2)
    v = np.moveaxis(src, axis, -2)
    rows, cols = v.shape[-2], v.shape[-1]
    for i in range(0, rows, TILE):
        for j in range(0, cols, TILE):
            o[..., i:i + TILE, j:j + TILE] = v[..., i:i + TILE, j:j + TILE]


def _transpose_module():
    """``native/_transpose`` (tiled transposing copies in C) when it is built and the
    compiled kernels are on, else None."""
    from .native import loader  # (imported here: the native package imports this module)

    return loader.load("_transpose")


def transpose_into(out: np.ndarray, x: np.ndarray) -> None:
    """``out[...] = x`` for an ``out`` whose last dim has unit stride (a C-contiguous
    array) and an ``x`` whose second-to-last dim has (a transposed matrix, or a batch
    of them): tiled in C and split over the threads when the extension is built, else
    NumPy's copy."""
    kernel = _transpose_module()
    if kernel is None or x.dtype.itemsize not in (1, 2, 4, 8):
        np.copyto(out, x)
        return
    kernel.transpose_copy(x, out, not in_serial() and sync_threads() > 1)


def copy(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of a (strided) array: tiled for transposed layouts (in C
    when the extension is built: 2048x2048 f32 in ~5 ms against ~17 ms for NumPy's
    slices tile by tile), split over the threads when large."""
    out = np.empty(x.shape, x.dtype)
    if _broadcast_fill(x):
        np.copyto(out, x)
        return out
    axis = _transposed_axis(x)
    if axis is not None:
        if _transpose_module() is not None and x.dtype.itemsize in (1, 2, 4, 8):
            transpose_into(np.moveaxis(out, axis, -2), np.moveaxis(x, axis, -2))
            return out
        if worth_splitting(x.shape) and axis != 0:
            run_rows(lambda o, v: _tiled(o, v, axis), out, x)
        else:
            _tiled(out, x, axis)
        return out
    if not worth_splitting(x.shape):
        np.copyto(out, x)
        return out
    return run_rows(np.copyto, out, x)


# A broadcast source is mostly a fill: NumPy's single pass writes at memory speed,
# where split over the threads (or tiled as a transpose, when a stride-0 last dim
# made it look like one) it took 1.4-4x as long (a sum's gradient, 2 MB of ones:
# 0.22 -> 0.07 ms; (64, 256, 1, 1) to (64, 256, 8, 8): 0.90 -> 0.21 ms). Its values
# are few (at most FILL_SOURCE_BYTES, read from the cache); rows of LONG_ROW values or
# more (a bias over a batch) still split, faster so.
FILL_SOURCE_BYTES = 1 << 18
LONG_ROW = 256


def _broadcast_fill(x: np.ndarray) -> bool:
    """Whether a copy of ``x`` is a broadcast fill best left to one NumPy pass."""
    if 0 not in x.strides or (x.strides[-1] != 0 and x.shape[-1] >= LONG_ROW):
        return False
    distinct = x.itemsize
    for n, stride in zip(x.shape, x.strides):
        if stride:
            distinct *= n
    return distinct <= FILL_SOURCE_BYTES
