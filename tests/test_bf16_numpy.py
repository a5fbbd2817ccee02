"""bfloat16 on the CPU gives the same results whatever ml_dtypes' release.

Releases 0.5 and 0.6 of ml_dtypes convert float64 to bfloat16 through float32,
rounding twice, and sort NaN among the numbers; tallow rounds once (as the GPU, and
candle's ``half``) and orders NaN as NumPy does for float32.
"""

import numpy as np
import pytest

import tallow as tl
from support.exact_bf16 import bf16_bits
from tallow import bf16_numpy

# Just past a tie of bfloat16 (through float32 they land on the tie and round to
# even, the wrong way), the same below the smallest subnormal, near the overflow
# threshold (2 - 2^-8) 2^127, exact ties, signed zeros, infinities and NaN.
EDGES = [1 + 2**-8 + 2**-30, 1 + 3 * 2**-8 - 2**-30, -(1 + 2**-8 + 2**-30), 2**-134 + 2**-160,
         2**-134, 2**-134 - 2**-170, 3 * 2**-134, 1 + 2**-8, 1 + 3 * 2**-8,
         (2 - 2**-8) * 2.0**127, (2 - 2**-8) * 2.0**127 * (1 - 2**-40), 3.4e38, 1e300, -1e300,
         5e-324, 2**-133, 0.0, -0.0, np.inf, -np.inf, np.nan]


def _values():
    rng = np.random.default_rng(5)
    bits = np.sort(rng.integers(1, 0x7F7F, 2000)).astype(np.uint16)
    lo = bits.view(tl.bf16.np).astype(np.float64)
    hi = (bits + 1).view(tl.bf16.np).astype(np.float64)
    mids = (lo + hi) / 2  # exact ties
    spread = rng.standard_normal(3000) * 10.0 ** rng.integers(-45, 39, 3000)
    return np.concatenate([EDGES, lo, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), -mids, spread])


def _bits(arr):
    return np.asarray(arr).view(np.uint16)


def test_f64_to_bf16_rounds_once():
    x = _values()
    want = bf16_bits(x)
    got = tl.tensor(x).to_dtype(tl.bf16).numpy()
    nan = np.isnan(x)
    np.testing.assert_array_equal(_bits(got)[~nan], want[~nan])
    assert np.isnan(got[nan].astype(np.float32)).all()
    # Made from a float64 array, the same rounding.
    np.testing.assert_array_equal(_bits(tl.tensor(x, dtype=tl.bf16).numpy())[~nan], want[~nan])
    np.testing.assert_array_equal(_bits(bf16_numpy.from_f64(x))[~nan], want[~nan])


def test_views_round_the_same():
    x = _values()[:4000].reshape(40, 100)
    want = bf16_bits(x)
    t = tl.tensor(x)
    for view, ref in ((t.t(), want.T), (t[::3, 1::2], want[::3, 1::2]), (t.narrow(1, 7, 50), want[:, 7:57])):
        got = view.to_dtype(tl.bf16)
        nan = np.isnan(view.numpy())
        np.testing.assert_array_equal(_bits(got.numpy())[~nan], ref[~nan])
    np.testing.assert_array_equal(_bits(tl.tensor(np.asfortranarray(x), dtype=tl.bf16).numpy()), want)


def test_the_edges_by_hand():
    # 1 + 2^-8 + 2^-30 is past the tie between 1 and 1 + 2^-7: up; through f32 it is
    # the tie itself and goes to 1 (even).
    got = _bits(tl.tensor([1 + 2**-8 + 2**-30, 1 + 2**-8, 2**-134 + 2**-160, 3.4e38], dtype=tl.f64)
                .to_dtype(tl.bf16).numpy())
    assert got.tolist() == [0x3F81, 0x3F80, 0x0001, 0x7F80]


@pytest.mark.parametrize("ascending", [True, False])
def test_bf16_sorts_nan_as_f32(ascending):
    rng = np.random.default_rng(16)
    x = rng.standard_normal((3, 9))
    x[0, [1, 4]] = np.nan
    x[1, [0, 8]] = [np.inf, -np.inf]
    x[2, ::3] = x[2, 0]  # ties: stable
    b = tl.tensor(x).to_dtype(tl.bf16)
    exact = tl.tensor(b.numpy().astype(np.float32))  # the same values in f32
    np.testing.assert_array_equal(b.arg_sort_last_dim(ascending).numpy(), exact.arg_sort_last_dim(ascending).numpy())
    if ascending:
        np.testing.assert_array_equal(b.arg_sort_last_dim(True).numpy()[0, -2:], [1, 4])  # NaN last


def test_bf16_extremes_propagate_nan_as_f32():
    x = np.array([[0.5, np.nan, 2.0, -1.0], [3.0, -2.0, 1.0, 0.25]])
    b = tl.tensor(x).to_dtype(tl.bf16)
    f = tl.tensor(b.numpy().astype(np.float32))
    for op in ("max_keepdim", "min_keepdim", "argmax_keepdim", "argmin_keepdim"):
        got, want = getattr(b, op)(1).numpy(), getattr(f, op)(1).numpy()
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32), err_msg=op)
    assert np.isnan(b.max_keepdim(1).numpy()[0, 0].astype(np.float32))
