"""The vectorised scale searches against candle's scalar code, float bit for float bit.

The encoded bytes hide most rounding differences (a scale off by one ulp
usually rounds to the same 6-bit level), so the searches' float results are
compared directly: summation order, association and iteration counts all
show up here.
"""

import numpy as np
import pytest

from support import candle_ref
from tallow.quantized import ksearch

F = np.float32


def sub_blocks(n_rows, width, seed):
    rng = np.random.default_rng(seed)
    kinds = [
        rng.standard_normal((n_rows, width)),
        rng.uniform(-1, 1, (n_rows, width)),
        rng.standard_normal((n_rows, width)) ** 3,  # heavy tails: the refits run longer
        np.abs(rng.standard_normal((n_rows, width))) + 0.5,  # positive: min clamps to 0
        rng.integers(-3, 4, (n_rows, width)) * 0.25,  # exact ties for the rounding
    ]
    x = np.concatenate(kinds).astype(F) * F(rng.uniform(0.01, 10))
    x[0] = 0.0
    x[1] = 2.5
    x[2, ::3] = 1e-30
    return x


def bits(v):
    return np.asarray(v, F).view(np.uint32)


@pytest.mark.parametrize("nmax,width", [(3, 16), (15, 32), (31, 32)])
def test_make_qkx1_quants_bitwise(nmax, width):
    x = sub_blocks(60, width, nmax)
    scale, the_min = ksearch.make_qkx1_quants(nmax, 5, x)
    with np.errstate(all="ignore"):
        ref = [candle_ref.make_qkx1_quants(nmax, 5, [F(v) for v in row]) for row in x]
    np.testing.assert_array_equal(bits(scale), bits([r[0] for r in ref]))
    np.testing.assert_array_equal(bits(the_min), bits([r[1] for r in ref]))


def test_make_q3_quants_bitwise():
    x = sub_blocks(300, 16, 7)
    got = ksearch.make_q3_quants(x, 4)
    with np.errstate(all="ignore"):
        ref = [candle_ref.make_q3_quants([F(v) for v in row], 4) for row in x]
    np.testing.assert_array_equal(bits(got), bits(ref))


def test_make_qx_quants_bitwise():
    x = sub_blocks(300, 16, 8)
    scale, levels = ksearch.make_qx_quants(x, 32)
    with np.errstate(all="ignore"):
        ref = [candle_ref.make_qx_quants([F(v) for v in row], 32) for row in x]
    np.testing.assert_array_equal(bits(scale), bits([r[0] for r in ref]))
    np.testing.assert_array_equal(levels, np.array([r[1] for r in ref]))
