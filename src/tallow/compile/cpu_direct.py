"""CPU kernels a replay calls instead of the recorded one, where the replay knows
something the eager kernel cannot.

A matmul whose right operand is a transposed 2-D matrix keeps, in eager mode, a
row-major copy of it until its buffer is written (``backends/cpu/matmul.py``): a
Linear layer's weight is copied once and reused by every later forward pass. In a
captured training step the step itself writes the weight (``Var.set``), so each
replay would make that copy again and use it once; the replay calls the BLAS on the
transposed view directly instead (the same product: the BLAS is told the operand is
transposed rather than given it transposed).
"""

from __future__ import annotations

import numpy as np

from ..backends.cpu.matmul import blas_ready


def matmul_uncached(self, lhs_layout, rhs, rhs_layout):
    """``CpuStorage.matmul`` for f32/f64 without the transposed-operand cache."""
    a = self.view(lhs_layout)
    if a.ndim < 2 or a.shape[-2] == 1:
        # A matrix-vector product: BLAS sums it in another order for a transposed rhs
        # than for the row-major copy eager mode multiplies, so do as eager does.
        return self.matmul(lhs_layout, rhs, rhs_layout)
    b = rhs.view(rhs_layout)
    if a.strides[-1] != a.itemsize:
        a = blas_ready(a)
    if b.strides[-1] != b.itemsize:
        b = blas_ready(b)
    return self._wrap(np.matmul(a, b), self.dtype)
