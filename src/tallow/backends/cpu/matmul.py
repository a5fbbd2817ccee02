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
from .storage import wrap
from .threads import CONFIG

METHODS = ("matmul",)

_HALF = (dt.f16, dt.bf16)


def _blas_ready(x: np.ndarray) -> np.ndarray:
    if x.ndim < 2:
        return x
    item = x.itemsize
    s_row, s_col = x.strides[-2], x.strides[-1]
    if s_col == item or s_row == item or x.shape[-1] == 1 or x.shape[-2] == 1:
        return x
    return np.ascontiguousarray(x)


def matmul(s, lhs_layout, rhs, rhs_layout):
    CONFIG.apply()
    a = s.view(lhs_layout)
    b = rhs.view(rhs_layout)
    dtype = s.dtype
    if dtype in _HALF:
        # f16/bf16 save memory, not time, on a CPU: widen to f32 for BLAS.
        out = np.matmul(a.astype(np.float32), b.astype(np.float32))
        return wrap(out.astype(dtype.np), dtype)
    if dtype.is_float:
        return wrap(np.matmul(_blas_ready(a), _blas_ready(b)), dtype)
    return wrap(np.matmul(a, b), dtype)
