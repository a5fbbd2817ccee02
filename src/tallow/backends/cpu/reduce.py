"""Reductions, cumulative sums and sorting."""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...errors import TallowError


_HALF = (dt.f16, dt.bf16)


class CpuReduce:
    """Reductions of ``CpuStorage``: sums/extremes over dims, cumsum, argsort."""

    __slots__ = ()

    def reduce(self, op, layout, dims):
        x = self.view(layout)
        dtype = self.dtype
        if op == "sum":
            # f16/bf16 accumulate in f32; integers wrap in their own dtype, as candle.
            acc = np.float32 if dtype in _HALF else dtype.np
            out = np.sum(x, axis=dims, dtype=acc, keepdims=True)
            return self._wrap(np.asarray(out).astype(dtype.np, copy=False), dtype)
        for d in dims:
            if x.shape[d] == 0:
                raise TallowError(f"{op}: cannot reduce over dim {d} of size 0 (shape {x.shape})")
        if op == "max":
            return self._wrap(np.max(x, axis=dims, keepdims=True), dtype)
        if op == "min":
            return self._wrap(np.min(x, axis=dims, keepdims=True), dtype)
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
        if ascending:
            idx = np.argsort(x, axis=-1, kind="stable")
        else:
            # Stable descending: sort the reversed rows ascending, then reverse back, so
            # equal values keep their original order.
            n = x.shape[-1]
            idx = (n - 1) - np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]
        return self._wrap(idx.astype(np.uint32), dt.u32)
