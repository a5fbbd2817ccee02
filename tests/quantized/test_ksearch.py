"""The vectorised scale searches against a scalar port of ggml's, float bit for float bit.

The encoded bytes hide most rounding differences (a scale off by one ulp
usually rounds to the same 6-bit level), so the searches' float results are
compared directly: summation order, association and iteration counts all
show up here.
"""

import numpy as np
import pytest

from support import ggml_ref
from tallow.ggml import ksearch

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


# (nmax, width, rmin, rdelta, nstep, use_mad) as quantize_row_q2_K/q4_K/q5_K_ref call it.
QKX2_CALLS = [(3, 16, -0.5, 0.1, 15, True), (15, 32, -1.0, 0.1, 20, False), (31, 32, -0.5, 0.1, 15, False)]


@pytest.mark.parametrize("nmax,width,rmin,rdelta,nstep,use_mad", QKX2_CALLS)
def test_make_qkx2_quants_bitwise(nmax, width, rmin, rdelta, nstep, use_mad):
    x = sub_blocks(40, width, nmax)
    rms = np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True)).astype(F)
    weights = np.abs(x) if use_mad else (rms + np.abs(x)).astype(F)
    scale, the_min, levels = ksearch.make_qkx2_quants(x, weights, nmax, rmin, rdelta, nstep, use_mad)
    with np.errstate(all="ignore"):
        ref = [ggml_ref.make_qkx2_quants(width, nmax, row, w, rmin, rdelta, nstep, use_mad)
               for row, w in zip(x, weights)]
    np.testing.assert_array_equal(bits(scale), bits([r[0] for r in ref]))
    np.testing.assert_array_equal(bits(the_min), bits([r[1] for r in ref]))
    np.testing.assert_array_equal(levels, np.array([r[2] for r in ref]))


def test_make_q3_quants_bitwise():
    x = sub_blocks(200, 16, 7)
    scale, levels = ksearch.make_q3_quants(x, 4)
    with np.errstate(all="ignore"):
        ref = [ggml_ref.make_q3_quants(16, 4, row) for row in x]
    np.testing.assert_array_equal(bits(scale), bits([r[0] for r in ref]))
    np.testing.assert_array_equal(levels, np.array([r[1] for r in ref]))


def test_make_qx_quants_bitwise():
    x = sub_blocks(200, 16, 8)
    scale, levels = ksearch.make_qx_quants(x, 32)
    with np.errstate(all="ignore"):
        ref = [ggml_ref.make_qx_quants(16, 32, row) for row in x]
    np.testing.assert_array_equal(bits(scale), bits([r[0] for r in ref]))
    np.testing.assert_array_equal(levels, np.array([r[1] for r in ref]))


def test_nearest_int_is_ggmls():
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999998, 3.5000002, 4194303.0, -4194303.0, 0.0, -0.0], F)
    assert ksearch.nearest_int(v).tolist() == [ggml_ref.nearest_int(a) for a in v]
    assert ksearch.nearest_int(v[:5]).tolist() == [0, 2, 2, 0, -2]  # half to even, unlike roundf
