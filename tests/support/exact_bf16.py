"""bfloat16 rounding worked out exactly, not by ml_dtypes (whose older releases round
float64 through float32, twice)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

# Every finite non-negative bfloat16 (bits 0 ... 0x7f7f), in order, then 2^128: the
# next step of the ladder, which rounds to infinity.
_LADDER = np.append(np.arange(0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64), 2.0**128)


def bf16_bits(x) -> np.ndarray:
    """The bfloat16 bits of float64 ``x`` rounded once to nearest-even (NaN -> 0x7fc0)."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    finite = np.isfinite(a)
    i = np.searchsorted(_LADDER, np.where(finite, a, 0.0), side="right") - 1
    i = np.minimum(i, 0x7F7F)
    lo, hi = _LADDER[i], _LADDER[i + 1]
    # Both differences are exact (Sterbenz: lo <= a <= hi <= 2 lo, or lo = 0).
    below, above = a - lo, hi - a
    up = (above < below) | ((above == below) & (i % 2 == 1))
    bits = (i + up).astype(np.uint32)
    bits = np.where(np.isinf(a), 0x7F80, bits)
    bits = np.where(np.signbit(x), bits | 0x8000, bits)
    return np.where(np.isnan(x), 0x7FC0, bits).astype(np.uint16)
