"""Matrix products through NumPy's BLAS, for every layout.

NumPy's matmul reads strided operands directly and hands each matrix to BLAS
with the right transposition flag when one of its two inner strides is 1; a
matrix with neither (a stepped slice, say) would fall to NumPy's slow loop, so
only such an operand is compacted first. Batch dims may have any strides,
including 0 and strides that no single stride could merge (candle's CPU backend
refuses those).
"""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from . import gemm
from .threads import CONFIG


_HALF = (dt.f16, dt.bf16) + dt.SMALL_FLOATS  # multiplied in f32, rounded once


def blas_ready(x: np.ndarray) -> np.ndarray:
    if x.ndim < 2:
        return x
    item = x.itemsize
    s_row, s_col = x.strides[-2], x.strides[-1]
    if s_col == item or s_row == item or x.shape[-1] == 1 or x.shape[-2] == 1:
        return x
    return np.ascontiguousarray(x)


# OpenBLAS re-packs a transposed rhs (``x @ w.t()``) at a fixed cost per product that
# dominates when the lhs has few rows. So for its products a transposed 2-D rhs that
# tallow owns (no outside writer) is kept, once, as a row-major copy, valid until the
# buffer is written; larger products gain nothing. Products the native f32 kernel
# takes need no copy: it packs its B panels from any strides (the same bits either
# way), and the copy would be made again after every optimiser step
# (docs/decisions.md has the figures).
_CACHE_MAX_ROWS = 256


def _rhs_operand(rhs, rhs_layout, b, lhs):
    st = b.strides
    item = b.itemsize
    if len(st) != 2 or st[0] != item or lhs.ndim < 2:
        return b  # not a transposed 2-D matrix
    n0, n1 = b.shape  # (k, n)
    lhs_rows = lhs.size // n0 if n0 else 0
    if lhs_rows > _CACHE_MAX_ROWS or n0 < 2 or n1 < 2 or st[1] != item * n0:
        return b  # too many rows to gain, or a stepped view
    m = lhs.shape[-2]
    if b.dtype == np.float32 and lhs.dtype == np.float32 and m \
            and gemm.native_takes(m, n1, n0, lhs_rows // m):
        return b
    ws = rhs.write_state()
    if ws.shared:
        return b
    cached = ws.cache
    if cached is not None and cached[0] == ws.version and (
            cached[1] is rhs_layout or cached[1] == rhs_layout):
        return cached[2]
    copy = np.ascontiguousarray(b)
    ws.cache = (ws.version, rhs_layout, copy)
    return copy


class CpuMatmul:
    """Batched matmul of ``CpuStorage`` (NumPy's BLAS, large float products split over
    tallow's threads by :mod:`.gemm`)."""

    __slots__ = ()

    def matmul(self, lhs_layout, rhs, rhs_layout):
        if CONFIG._applied is None:
            CONFIG.apply()
        a = self.view(lhs_layout)
        b = rhs.view(rhs_layout)
        dtype = self.dtype
        if dtype in _HALF:
            # f16/bf16 save memory, not time, on a CPU: widen to f32 for BLAS.
            out = gemm.matmul(a.astype(np.float32), b.astype(np.float32))
            return self._wrap(out.astype(dtype.np), dtype)
        if dtype.is_float:
            return self._wrap(gemm.matmul(*float_operands(a, rhs, rhs_layout, b)), dtype)
        return self._wrap(np.matmul(a, b), dtype)


def float_operands(a, rhs, rhs_layout, b):
    """The arrays a float product ``a @ b`` hands to ``gemm.matmul`` (``b`` the view of
    ``rhs`` at ``rhs_layout``): each as BLAS takes it, a transposed rhs maybe its cached
    row-major copy. Every f32/f64 product of the backend goes through here, so one
    product gives the same bits on every path that makes it."""
    b = _rhs_operand(rhs, rhs_layout, b, a)
    if a.strides[-1] != a.itemsize:
        a = blas_ready(a)
    if b.strides[-1] != b.itemsize:
        b = blas_ready(b)
    return a, b
