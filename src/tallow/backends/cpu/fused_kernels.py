"""The numba kernels of :mod:`tallow.backends.cpu.fused` (imported on first use).

Module-level functions, so that numba's on-disk cache (``cache=True``) finds them
again in the next process. Each one makes a single pass over its rows, where the
NumPy forms take one pass per operation (18 for the erf GELU, 8 for a residual
LayerNorm). They release the GIL, so rows split over threads run in parallel.
"""

from __future__ import annotations

import numba
import numpy as np

# "contract" lets LLVM use fused multiply-adds; with NumPy's error model (no
# ZeroDivisionError check on each division) element-wise loops vectorise without
# more. The row sums also need "reassoc" (partial sums in SIMD lanes); they are
# accumulated in f64, so the reordering changes nothing that f32 results can show.
_ELEMENTWISE = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy",
                    fastmath={"contract"})
_ROWS = dict(nogil=True, cache=True, boundscheck=False, error_model="numpy",
             fastmath={"contract", "reassoc"})

# erf(z) = z P(z^2) / Q(z^2) on [-4, 4], +-1 outside (Eigen's and XLA's f32 erf:
# a few ulp, no exp, so the whole GELU vectorises). The 1/sqrt 2 of GELU's
# argument is applied to z first.
_A1, _A3, _A5, _A7 = -1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05
_A9, _A11, _A13 = -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10
_B0, _B2, _B4, _B6, _B8 = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
                           -2.13374055278905e-04, -1.45660718464996e-05)
_RSQRT2 = 0.7071067811865476


@numba.njit(**_ELEMENTWISE)
def bias_gelu_rows(out, x, bias, has_bias):
    """out[i, j] = GELU(x[i, j] + bias[j]) (exact erf form); ``out`` may be ``x``."""
    rows, n = x.shape
    dt = x.dtype.type
    a1, a3, a5, a7, a9, a11, a13 = dt(_A1), dt(_A3), dt(_A5), dt(_A7), dt(_A9), dt(_A11), dt(_A13)
    b0, b2, b4, b6, b8 = dt(_B0), dt(_B2), dt(_B4), dt(_B6), dt(_B8)
    r2, half, four, one = dt(_RSQRT2), dt(0.5), dt(4.0), dt(1.0)
    for i in range(rows):
        for j in range(n):
            v = x[i, j] + bias[j] if has_bias else x[i, j]
            z = v * r2
            z = four if z > four else z
            z = -four if z < -four else z
            z2 = z * z
            p = z2 * a13 + a11
            p = z2 * p + a9
            p = z2 * p + a7
            p = z2 * p + a5
            p = z2 * p + a3
            p = z2 * p + a1
            q = z2 * b8 + b6
            q = z2 * q + b4
            q = z2 * q + b2
            q = z2 * q + b0
            out[i, j] = half * v * (one + z * p / q)


@numba.njit(**_ROWS)
def add_layer_norm_rows(out, x, residual, bias, has_bias, weight, beta, has_beta, eps):
    """out[i] = LayerNorm(x[i] + bias + residual[i]) * weight + beta.

    Mean and variance in f64, the variance from the centred values (two passes
    over a row that stays in L1)."""
    rows, n = x.shape
    dt = x.dtype.type
    inv_n = 1.0 / n
    for i in range(rows):
        xi = x[i]
        ri = residual[i]
        oi = out[i]
        total = 0.0
        for j in range(n):
            v = xi[j] + ri[j]
            if has_bias:
                v += bias[j]
            oi[j] = v
            total += np.float64(v)
        mean = total * inv_n
        ss = 0.0
        for j in range(n):
            d = np.float64(oi[j]) - mean
            ss += d * d
        rstd = 1.0 / np.sqrt(ss * inv_n + eps)
        m32 = dt(mean)
        s32 = dt(rstd)
        for j in range(n):
            v = (oi[j] - m32) * s32 * weight[j]
            oi[j] = v + beta[j] if has_beta else v
