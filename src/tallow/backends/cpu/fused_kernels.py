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


# exp(x) = 2^k e^r, k = round(x log2 e), r = x - k ln 2 in [-ln2/2, ln2/2] (ln 2 split in
# two for an exact reduction), e^r by Cephes' expf polynomial (~1 ulp). 2^k is built
# from its bits in an int32 row viewed as float32, which keeps every loop vectorisable
# (numba has no vectorised exp without Intel's SVML).
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_E1, _E2, _E3, _E4, _E5, _E6 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_EXP_LOW = -87.0  # below this exp(x) is left as 0 (2^k would leave the normal range)


@numba.njit(**_ROWS)
def softmax_rows(s, scale, mask, rows_per_mask, has_mask, bits):
    """In place, each row r of ``s`` (rows, n): softmax(s[r] * scale + mask[r // rows_per_mask]).

    ``bits``: an int32 scratch row of n elements. The row maximum is exact, so no
    term overflows and the largest is 1; a row whose entries are all -inf gives
    NaN, as the exp-normalise definition does."""
    rows, n = s.shape
    dt = s.dtype.type
    sc = dt(scale)
    fbits = bits.view(np.float32)
    log2e, hi, lo = dt(_LOG2E), dt(_LN2_HI), dt(_LN2_LO)
    e1, e2, e3, e4, e5, e6 = dt(_E1), dt(_E2), dt(_E3), dt(_E4), dt(_E5), dt(_E6)
    low, half, one = dt(_EXP_LOW), dt(0.5), dt(1.0)
    for r in range(rows):
        row = s[r]
        top = -np.inf
        if has_mask:
            mr = mask[r // rows_per_mask]
            for j in range(n):
                v = row[j] * sc + mr[j]
                row[j] = v
                top = v if v > top else top
        else:
            for j in range(n):
                v = row[j] * sc
                row[j] = v
                top = v if v > top else top
        m = dt(top)
        for j in range(n):
            x = row[j] - m
            x = low if x < low else x
            k = np.floor(x * log2e + half)
            r_ = x - k * hi
            r_ = r_ - k * lo
            p = e1 * r_ + e2
            p = p * r_ + e3
            p = p * r_ + e4
            p = p * r_ + e5
            p = p * r_ + e6
            p = p * (r_ * r_) + r_ + one
            row[j] = p
            bits[j] = (np.int32(k) + np.int32(127)) << np.int32(23)
        total = 0.0
        for j in range(n):
            e = row[j] * fbits[j]
            row[j] = e
            total += np.float64(e)
        inv = dt(1.0 / total)
        for j in range(n):
            row[j] *= inv
