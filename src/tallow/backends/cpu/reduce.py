"""Reductions, cumulative sums and sorting."""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...errors import TallowError
from .native_module import NativeModule


# Float dtypes summed in f32 (the small float formats too, as on the GPU).
_HALF = (dt.f16, dt.bf16) + dt.SMALL_FLOATS
# Float dtypes compared through their exact f32 values (NumPy's NaN rules, not the
# ml_dtypes release's).
_VIA_F32 = (dt.bf16,) + dt.SMALL_FLOATS

# native/_reduce: the sum of a contiguous f32 array in a fixed order (the same bits on
# any instruction set and thread count), vectorised, on the calling thread: 256K
# elements 18 us against NumPy's 101 (its pairwise sum runs eight scalar accumulators),
# 1M 147 against 420. From this many elements; below, NumPy's sum, whose bits the
# small sums keep.
_REDUCE = NativeModule("_reduce")
NATIVE_SUM_MIN = 1 << 15


def collapse_broadcast_dims(x, dims):
    """``x`` with every reduced dim of stride 0 (a broadcast dim, all of whose
    elements are one memory location) narrowed to size 1, and the number of
    copies that dropped out of each reduced slice.

    A reduction over such a dim needs one element of it: the max, min, argmax and
    argmin are those of the single element (index 0 for the arg-extremes, NumPy's
    first occurrence), and the sum is ``copies`` times its sum. So the work, and
    memory, is that of the elements in storage, not of the view's shape:
    ``ones(1).broadcast_as((2**25, 2**25)).sum_all()`` is one multiplication, where
    a loop over the view would run 2^50 additions."""
    if 0 not in x.strides:  # no broadcast dim at all (the common case)
        return x, 1
    copies = 1
    index = []
    for d, (n, stride) in enumerate(zip(x.shape, x.strides)):
        if d in dims and stride == 0 and n > 1:
            copies *= n
            index.append(slice(0, 1))
        else:
            index.append(slice(None))
    return (x[tuple(index)] if copies > 1 else x), copies


def _times_copies(total, copies, dtype):
    """``total * copies`` in the sum's accumulation dtype: floats rounded once from
    float64, integers wrapping in their own width as the repeated addition would."""
    if copies == 1:
        return total
    if np.issubdtype(dtype, np.floating):
        return (total.astype(np.float64) * float(copies)).astype(dtype)
    bits = np.dtype(dtype).itemsize * 8
    wrapped = copies % (1 << bits)
    if np.issubdtype(dtype, np.signedinteger) and wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return total * np.array(wrapped, dtype=dtype)  # array arithmetic wraps, unchecked


class CpuReduce:
    """Reductions of ``CpuStorage``: sums/extremes over dims, cumsum, argsort."""

    __slots__ = ()

    def reduce(self, op, layout, dims):
        x = self.view(layout)
        dtype = self.dtype
        if op == "sum":
            # f16/bf16 accumulate in f32; integers wrap in their own dtype, as candle.
            acc = np.float32 if dtype in _HALF else dtype.np
            x, copies = collapse_broadcast_dims(x, dims)
            if dtype is dt.f32 and x.size >= NATIVE_SUM_MIN and len(dims) == x.ndim and x.flags.c_contiguous:
                native = _REDUCE()
                if native is not None:
                    total = native.sum_f32(x)
                    out = _times_copies(np.full((1,) * x.ndim, total, np.float32), copies, acc)
                    return self._wrap(out, dtype)
            # (the ufunc called from here, so that its floating-point warnings come from
            # tallow's module: float_warnings; np.sum's own result, the same bits)
            out = np.asarray(np.add.reduce(x, axis=dims, dtype=acc, keepdims=True))
            out = _times_copies(out, copies, acc)
            return self._wrap(out.astype(dtype.np, copy=False), dtype)
        for d in dims:
            if x.shape[d] == 0:
                raise TallowError(f"{op}: cannot reduce over dim {d} of size 0 (shape {x.shape})")
        x, _ = collapse_broadcast_dims(x, dims)
        if dtype in _VIA_F32:
            x = x.astype(np.float32)  # exact; NumPy's NaN rules, not ml_dtypes' release's
        if op == "max":
            return self._wrap(np.max(x, axis=dims, keepdims=True).astype(dtype.np, copy=False), dtype)
        if op == "min":
            return self._wrap(np.min(x, axis=dims, keepdims=True).astype(dtype.np, copy=False), dtype)
        if op in ("argmax", "argmin"):
            (d,) = dims
            f = np.argmax if op == "argmax" else np.argmin
            return self._wrap(f(x, axis=d, keepdims=True).astype(np.uint32), dt.u32)
        raise ValueError(f"unknown reduce op {op!r}")

    def cumsum(self, layout, dim):
        dtype = self.dtype
        acc = np.float32 if dtype in _HALF else dtype.np
        out = np.cumsum(self.view(layout), axis=dim, dtype=acc)
        return self._wrap(out.astype(dtype.np, copy=False), dtype)

    def arg_sort_last_dim(self, layout, ascending):
        x = self.view(layout)
        if self.dtype in _VIA_F32:
            x = x.astype(np.float32)  # exact; NaN last, whatever ml_dtypes' release
        if ascending:
            idx = np.argsort(x, axis=-1, kind="stable")
        else:
            # Stable descending: sort the reversed rows ascending, then reverse back, so
            # equal values keep their original order.
            n = x.shape[-1]
            idx = (n - 1) - np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]
        return self._wrap(idx.astype(np.uint32), dt.u32)
