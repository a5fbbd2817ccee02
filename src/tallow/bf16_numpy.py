"""float64 -> bfloat16 in NumPy, rounded once whatever ml_dtypes' release.

ml_dtypes supplies the bfloat16 NumPy type, but some of its releases convert float64
through float32 (rounding twice: 1 + 2^-8 + 2^-30 became 1, not 1 + 2^-7) and order
NaN among the numbers when sorting. tallow's results must not depend on that:
``from_f64`` rounds once, to float32 with round-to-odd (24 bits, far more than the
8 + 2 that bfloat16's single rounding needs), then float32 -> bfloat16, which every
release rounds to nearest-even. (Sorts and extremes of bfloat16 run on the exact
float32 values, in the CPU backend's reductions.)
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt


def from_f64(x: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 (a new C-contiguous array), rounded once to nearest-even."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32, order="C")
        x = np.ascontiguousarray(x)
        back = r.astype(np.float64)
        inexact = (back != x) & ~np.isnan(x)
    if inexact.any():
        bits = r.view(np.uint32).copy()
        # Truncate toward zero (the magnitude's bits one lower where float32 rounded
        # away, inf included: it becomes float32's max), then set the sticky bit.
        bits -= (inexact & (np.abs(back) > np.abs(x))).astype(np.uint32)
        bits |= inexact.astype(np.uint32)
        r = bits.view(np.float32)
    return r.astype(dt.bf16.np)
