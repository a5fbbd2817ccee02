"""The one-pass kernels of a training step (``native/_step.c`` through
``backends/cpu/onepass.py``) give the bits of the NumPy expressions they replace,
``dst + src * alpha`` (the product rounded, then the sum) and ``grad * (x > 0)``,
in both builds, with NaN, infinities and signed zeros (a NaN's sign and payload may
differ), and refuse what they cannot take."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tallow.backends.cpu import onepass

kernels = onepass.module()
pytestmark = pytest.mark.skipif(kernels is None, reason="the compiled kernels are not built")

_special = st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 1e-30, 3e38])


def _arrays(dtype, n):
    return hnp.arrays(dtype, n, elements=st.one_of(_special, st.floats(-1e3, 1e3, width=32)))


BUILDS = pytest.mark.parametrize("avx2", [True, False], ids=["avx2", "baseline"])


@contextlib.contextmanager
def build(avx2):
    """The AVX2 or the baseline loops for the length of the block."""
    before = kernels.simd()
    if avx2 and not before:
        pytest.skip("no AVX2 build on this CPU")
    kernels.set_simd(avx2)
    try:
        yield
    finally:
        kernels.set_simd(before)


def _same_bits(a, b):
    """Bit for bit, signed zeros included; a NaN only needs to be a NaN (which of two
    NaN operands x86 returns depends on the compiler's operand order)."""
    nan = np.isnan(b)
    np.testing.assert_array_equal(np.isnan(a), nan)
    np.testing.assert_array_equal(a[~nan].view(np.uint8), b[~nan].view(np.uint8))


@BUILDS
@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), n=st.integers(0, 70),
       alpha=st.one_of(st.floats(-10, 10), st.sampled_from([0.0, -0.01, 1e-8, 0.1])))
def test_add_scaled_equals_numpy_s_two_passes(avx2, data, dtype, n, alpha):
    dst = data.draw(_arrays(dtype, n))
    src = data.draw(_arrays(dtype, n))
    with np.errstate(all="ignore"):
        want = dst + src * dtype(alpha)
    got = dst.copy()
    with build(avx2):
        kernels.add_scaled(got, src, alpha)
    _same_bits(got, want)


@BUILDS
@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), n=st.integers(0, 70))
def test_relu_grad_equals_the_masked_product(avx2, data, dtype, n):
    x = data.draw(_arrays(dtype, n))
    g = data.draw(_arrays(dtype, n))
    with np.errstate(all="ignore"):
        want = g * (x > 0)
    got = np.empty_like(x)
    with build(avx2):
        kernels.relu_grad(x, g, got)
    _same_bits(got, want)


def test_refuses_buffers_it_cannot_take():
    f = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match="float32 or float64"):
        kernels.add_scaled(np.zeros(8, np.int32), np.zeros(8, np.int32), 1.0)
    with pytest.raises(TypeError, match="dtypes differ"):
        kernels.add_scaled(f, np.zeros(8, np.float64), 1.0)
    with pytest.raises(ValueError, match="sizes differ"):
        kernels.relu_grad(f, np.zeros(7, np.float32), np.zeros(8, np.float32))
    with pytest.raises(ValueError):  # not contiguous
        kernels.add_scaled(np.zeros(16, np.float32)[::2], f, 1.0)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        kernels.add_scaled(ro, f, 1.0)
    with pytest.raises(TypeError):
        kernels.add_scaled(f, f, "one")


def test_takes_only_contiguous_arrays_of_one_float_dtype_and_size():
    a = np.zeros((4, 4), np.float32)
    assert onepass.takes(a, a.copy())
    assert not onepass.takes(a, a.T)
    assert not onepass.takes(a, a.astype(np.float64))
    assert not onepass.takes(a.astype(np.int32), a.astype(np.int32))
    assert not onepass.takes(a, np.zeros(15, np.float32))


def test_environment_switches():
    """TALLOW_NO_NATIVE leaves the NumPy expressions; TALLOW_NATIVE_ISA=scalar the
    baseline loops."""
    code = ("from tallow.backends.cpu import onepass; m = onepass.module(); "
            "print(m is not None, m is not None and m.simd())")
    run = lambda **env: subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                                       capture_output=True, text=True, check=True).stdout.split()
    assert run(TALLOW_NO_NATIVE="1") == ["False", "False"]
    assert run(TALLOW_NATIVE_ISA="scalar") == ["True", "False"]


def test_the_numpy_fallback_gives_the_same_training_step(monkeypatch):
    """An SGD step through ReLU with the kernels and with NumPy's two passes: the same bits."""
    import tallow as tl

    def step():
        rng = np.random.default_rng(1)
        w = tl.Var(rng.standard_normal((6, 5)).astype(np.float32))
        x = tl.Tensor(rng.standard_normal((4, 5)).astype(np.float32))
        opt = tl.nn.optim.SGD([w], lr=0.3)
        for _ in range(3):
            opt.backward_step(tl.nn.linear(x, w).relu().sum())
        return w.numpy()

    with_kernels = step()
    monkeypatch.setattr(onepass, "module", lambda: None)
    np.testing.assert_array_equal(step(), with_kernels)
