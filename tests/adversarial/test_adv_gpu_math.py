"""GPU math against the CPU: integer powers, logs of subnormals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import tallow as tl
from support.adversarial import gpu_or_skip

BASES = [0.5, 1.5, 2.0, 3.0, 6.0, 7.0, 10.0, 0.1, 1.1, 12.25, 100.0, -2.0, -3.0, -6.0, -0.75]
EXPONENTS = list(range(-8, 17))


def ulps(a, b, dtype):
    """Distance in units in the last place (same sign assumed)."""
    ai = np.asarray(a, dtype).view(np.int32 if dtype == np.float32 else np.int64).astype(np.int64)
    bi = np.asarray(b, dtype).view(np.int32 if dtype == np.float32 else np.int64).astype(np.int64)
    return np.abs(ai - bi)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [tl.f32, tl.f64])
def test_gpu_pow_of_integer_exponents_matches_cpu(dtype):
    gpu = gpu_or_skip()
    if not gpu.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {gpu}")
    npd = dtype.np
    xs, ys = np.meshgrid(np.array(BASES, npd), np.array(EXPONENTS, npd))
    x, y = xs.ravel(), ys.ravel()
    cpu = tl.tensor(x).pow(tl.tensor(y)).numpy()
    got = tl.tensor(x, device=gpu).pow(tl.tensor(y, device=gpu)).numpy()
    finite = np.isfinite(cpu) & (cpu != 0)
    assert np.all(np.sign(got[finite]) == np.sign(cpu[finite]))
    # Results that are not representable: a few roundings of repeated squaring (the
    # driver's pow was 55 ulp off).
    far = ulps(got[finite], cpu[finite], npd) > 8
    assert not far.any(), list(zip(x[finite][far], y[finite][far], got[finite][far], cpu[finite][far]))
    # Where the exact power is representable, both give it exactly (so within 1 ulp).
    for xi, yi, g in zip(x, y, got):
        exact = Fraction(float(xi)) ** int(yi)
        as_float = npd.type(float(exact)) if abs(exact) < 1e300 else None
        if as_float is not None and np.isfinite(as_float) and Fraction(float(as_float)) == exact:
            assert g == as_float, (xi, yi, g, as_float)


@pytest.mark.gpu
def test_gpu_pow_reported_case():
    gpu = gpu_or_skip()
    out = tl.tensor([6.0], device=gpu).pow(tl.tensor([4.0], device=gpu)).numpy()
    assert out[0] == np.float32(1296.0)
    assert tl.tensor([6.0], device=gpu).powf(4.0).numpy()[0] == np.float32(1296.0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [tl.f32, tl.f64])
def test_gpu_log_of_subnormals(dtype):
    gpu = gpu_or_skip()
    if not gpu.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {gpu}")
    tiny = np.finfo(dtype.np).smallest_subnormal
    x = np.array([1e-40, 1e-45, 1e-39, 1.17e-38, tiny, tiny * 3, 0.0, -0.0, 1.0], dtype.np)
    if dtype is tl.f64:
        x = np.array([1e-310, 4e-320, 2e-308, tiny, tiny * 3, 0.0, -0.0, 1.0], dtype.np)
    got = tl.tensor(x, device=gpu).log().numpy()
    with np.errstate(divide="ignore"):
        want = np.log(x)
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype.np).eps)
