"""tallow.testing, as candle.testing: the assertions must fail when they should."""

import pytest

import tallow as tl
from tallow.testing import assert_almost_equal, assert_equal


def test_assert_equal():
    a = tl.Tensor([1.0, 2.0, 3.0])
    assert_equal(a, tl.Tensor([1.0, 2.0, 3.0]))
    with pytest.raises(AssertionError):
        assert_equal(a, tl.Tensor([1.0, 2.0, 3.5]))
    with pytest.raises(AssertionError):
        assert_equal(a, a.to_dtype(tl.f64))
    assert_equal(a, a.to_dtype(tl.f64), check_dtype=False)
    with pytest.raises(AssertionError):
        assert_equal(a, tl.Tensor([[1.0, 2.0, 3.0]]))
    with pytest.raises(AssertionError):
        assert_equal(a.reshape((3, 1)).t(), tl.Tensor([[1.0, 2.0, 3.0]]), check_stride=True)
    big = tl.ones(1000, dtype=tl.u8)
    assert_equal(big, big.copy())  # more than 255 elements: no u8 wrap-around


def test_assert_almost_equal():
    a = tl.Tensor([1.0, 2.0, 3.0])
    assert_almost_equal(a, a + 1e-7)
    with pytest.raises(AssertionError):
        assert_almost_equal(a, a + 1e-3)
    assert_almost_equal(a, a + 1e-3, atol=1e-2)
    assert_almost_equal(a, a * 1.001, rtol=1e-2)
    u = tl.Tensor([1, 5])
    assert_almost_equal(u, tl.Tensor([2, 4]), atol=1)
    with pytest.raises(AssertionError):
        assert_almost_equal(u, tl.Tensor([3, 4]), atol=1)
