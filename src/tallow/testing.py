"""Assertions for tests, with candle-pyo3's semantics (``candle.testing``)."""

from __future__ import annotations

from . import dtype as dt


def _comparable(actual, expected, check_device, check_dtype):
    """``expected`` moved to ``actual``'s device / dtype where those are not checked."""
    if not check_device:
        expected = expected.to_device(actual.device)
    if not check_dtype:
        expected = expected.to_dtype(actual.dtype)
    return expected


def _check_meta(actual, expected, check_device, check_dtype, check_layout, check_stride):
    if check_device:
        assert actual.device == expected.device, f"device {actual.device} != {expected.device}"
    if check_dtype:
        assert str(actual.dtype) == str(expected.dtype), f"dtype {actual.dtype} != {expected.dtype}"
    if check_layout:
        assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if check_stride:
        assert actual.stride == expected.stride, f"stride {actual.stride} != {expected.stride}"


def assert_equal(actual, expected, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False):
    """Every element equal (and, by default, the same device, dtype and shape)."""
    _check_meta(actual, expected, check_device, check_dtype, check_layout, check_stride)
    expected = _comparable(actual, expected, check_device, check_dtype)
    same = (actual == expected).to_dtype(dt.i64).sum_all().values()
    assert same == actual.nelement, (
        f"tensors differ in {actual.nelement - same} of {actual.nelement} elements"
    )


def assert_almost_equal(actual, expected, rtol=1e-05, atol=1e-08, check_device=True,
                        check_dtype=True, check_layout=True, check_stride=False):
    """``|actual - expected| <= atol + rtol * |expected|`` everywhere."""
    _check_meta(actual, expected, check_device, check_dtype, check_layout, check_stride)
    expected = _comparable(actual, expected, check_device, check_dtype)
    if not actual.dtype.is_float or not expected.dtype.is_float:
        # Unsigned differences would wrap around: compare in i64.
        actual, expected = actual.to_dtype(dt.i64), expected.to_dtype(dt.i64)
    diff = (actual - expected).abs()
    threshold = (expected.abs().to_dtype(dt.f64) * rtol + atol).to(expected)
    close = (diff <= threshold).to_dtype(dt.i64).sum_all().values()
    assert close == actual.nelement, (
        f"{actual.nelement - close} of {actual.nelement} elements differ by more than "
        f"atol={atol} + rtol={rtol} * |expected|"
    )
