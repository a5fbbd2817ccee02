"""Stride-2 3x3 convolutions under padding 1 (the middle kernel column's product and
Winograd F(4, 2) for the outer two) and their kernel gradient against PyTorch in
float64.

Drawn over odd and even image sizes (a part-tile last in a row, a padding row at the
bottom, rows of 1 to 41 pixels), batches, channel counts and blocks of output
channels, with the rule's thresholds lowered so that small shapes take the path; the
baseline, AVX2 and AVX-512 builds at one and two threads and any blocks give the same
bits, as the kernel gradient does for a count of parts; a non-finite input or kernel
takes the im2col path (PyTorch's infinities and NaNs); the rule sends only what it
names.
"""

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import conv as cpu_conv
from tallow.backends.cpu import native, winograd_s2

from support.native_builds import each_build_and_thread_count

S2 = winograd_s2._module()
pytestmark = pytest.mark.skipif(S2 is None, reason="the native stride-2 Winograd module is not built")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
STRIDE2 = dict(stride=(2, 2), dil=(1, 1), groups=1)


@contextlib.contextmanager
def every_size():
    """The path for any channel, tile and position count (the rule's thresholds at 1)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(winograd_s2, "MIN_CHANNELS", 1)
        mp.setattr(winograd_s2, "MIN_TILES", 1)
        mp.setattr(winograd_s2, "MIN_POSITIONS", 1)
        yield


def _data(rng, b, c, co, h, w):
    return (rng.standard_normal((b, c, h, w)).astype(np.float32),
            rng.standard_normal((co, c, 3, 3)).astype(np.float32))


def _reference(x, k):
    return F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(k).double(), stride=2, padding=1).numpy()


def _close(got, want, c):
    """Within a few float32 rounding steps of the float64 result's scale (F(4, 2)'s
    transforms add up to 8 of a tile's values before multiplying)."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-7 * scale * (9 + c))


def _direct(x, k, units=1):
    """conv_s2 into an output filled with NaNs (each one must be written)."""
    b, c, h, w = x.shape
    co = k.shape[0]
    y = np.full((b, co, (h + 1) // 2, (w + 1) // 2), np.nan, np.float32)
    assert S2.conv_s2(x, k, y, b, c, co, h, w, units) is True
    return y


@given(b=st.integers(1, 3), c=st.integers(1, 20), co=st.integers(1, 20), h=st.integers(1, 13),
       w=st.integers(1, 41), units=st.integers(1, 3), seed=st.integers(0, 999))
@SETTINGS
def test_the_convolution_matches_pytorch(b, c, co, h, w, units, seed):
    x, k = _data(np.random.default_rng(seed), b, c, co, h, w)
    units = min(units, -(-co // 8))
    _close(_direct(x, k, units), _reference(x, k), c)


def _reference_kernel_grad(x, k_shape, g):
    k = torch.zeros(k_shape, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(torch.from_numpy(x).double(), k, stride=2, padding=1)
    (y * torch.from_numpy(g).double()).sum().backward()
    return k.grad.numpy()


def _kernel_grad(x, g, co, parts):
    """kernel_grad_s2 into NaN-filled slabs and kernel gradient (each one written)."""
    b, c, h, w = x.shape
    du = np.full((parts, 6, co, 3 * c), np.nan, np.float32)
    dk = np.full((co, c, 3, 3), np.nan, np.float32)
    assert S2.kernel_grad_s2(x, g, du, dk, b, c, co, h, w, parts) is True
    return dk


def _close_sum(got, want, terms):
    """A sum over ``terms`` products: within float32 rounding of its scale."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * scale * np.sqrt(terms) * 4)


@given(b=st.integers(1, 3), c=st.integers(1, 20), co=st.integers(1, 20), h=st.integers(1, 13),
       w=st.integers(1, 41), parts=st.integers(1, 3), seed=st.integers(0, 999))
@SETTINGS
def test_the_kernel_gradient_matches_pytorch(b, c, co, h, w, parts, seed):
    rng = np.random.default_rng(seed)
    x, k = _data(rng, b, c, co, h, w)
    g = rng.standard_normal((b, co, (h + 1) // 2, (w + 1) // 2)).astype(np.float32)
    parts = min(parts, b)
    _close_sum(_kernel_grad(x, g, co, parts), _reference_kernel_grad(x, k.shape, g), b * g[0, 0].size)


@pytest.mark.parametrize("shape", [(2, 16, 24, 32, 32), (3, 17, 40, 15, 29), (4, 32, 16, 28, 28)])
def test_the_kernel_gradient_s_bits_follow_the_parts_alone(shape):
    """Every build at one and two threads gives the same bits for a count of parts; the
    parts' sum is taken in order whatever thread made each."""
    b, c, co, h, w = shape
    rng = np.random.default_rng(sum(shape))
    x, _ = _data(rng, b, c, co, h, w)
    g = rng.standard_normal((b, co, (h + 1) // 2, (w + 1) // 2)).astype(np.float32)
    for parts in (1, 2, b):
        results = [_kernel_grad(x, g, co, parts) for _ in each_build_and_thread_count(S2)]
        assert len(results) >= 2
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])
    k_shape = (co, c, 3, 3)
    _close_sum(results[0], _reference_kernel_grad(x, k_shape, g), b * g[0, 0].size)


@pytest.mark.parametrize("shape", [(2, 16, 24, 32, 32), (3, 17, 40, 15, 29), (1, 64, 128, 56, 56),
                                   (2, 33, 9, 28, 28), (1, 16, 16, 1, 70)])
def test_the_same_bits_with_every_build_at_one_or_two_threads_and_any_blocks(shape):
    """Widths a multiple of 4 and not (the output transform in place or through a
    buffer), part-groups of 16 tiles, odd heights; the AVX-512 build against the AVX2
    and baseline ones (both plain C), one and two threads, 1 to 3 blocks of output
    channels per image."""
    b, c, co, h, w = shape
    x, k = _data(np.random.default_rng(sum(shape)), b, c, co, h, w)
    results = []
    for _ in each_build_and_thread_count(S2):
        for units in (1, 2, 3):
            results.append(_direct(x, k, min(units, -(-co // 8))))
    assert len(results) >= 6  # (the baseline build at one and two threads, at least)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    _close(results[0], _reference(x, k), c)


def test_conv2d_and_its_gradients_through_the_path(monkeypatch):
    """conv2d forward and kernel gradient through the path (the input gradient, a
    transposed convolution, takes its usual one), against PyTorch: values, input and
    kernel gradients."""
    rng = np.random.default_rng(7)
    x, k = _data(rng, 3, 24, 32, 18, 20)
    calls = []
    real, real_grad = winograd_s2.conv2d, winograd_s2.kernel_grad
    monkeypatch.setattr(winograd_s2, "conv2d", lambda *a: calls.append(a[1].shape) or real(*a))
    monkeypatch.setattr(winograd_s2, "kernel_grad", lambda *a: calls.append(("grad", a[2])) or real_grad(*a))
    tx, tk = tl.Var(x), tl.Var(k)
    out = tx.conv2d(tk, padding=1, stride=2)
    g = rng.standard_normal(out.shape).astype(np.float32)
    grads = (out * tl.Tensor(g)).sum_all().backward()
    assert calls == [k.shape, ("grad", k.shape)]
    px = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    ref = F.conv2d(px, pk, stride=2, padding=1)
    (ref * torch.from_numpy(g.astype(np.float64))).sum().backward()
    _close(out.numpy(), ref.detach().numpy(), 24)
    np.testing.assert_allclose(grads[tx].numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[tk].numpy(), pk.grad.numpy(), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("where", ["input", "kernel"])
def test_a_non_finite_value_takes_another_path(where, bad, monkeypatch):
    """An infinity would come out of the transforms as NaNs over its tile's outputs,
    where a direct sum gives infinities at the outputs it reaches: the path declines
    (conv_s2 says so) and im2col gives PyTorch's infinities and NaNs at their places."""
    rng = np.random.default_rng(41)
    x, k = _data(rng, 2, 20, 24, 16, 16)
    if where == "input":
        x[1, 5, 6, 7] = bad
    else:
        k[2, 7, 1, 0] = bad
    b, c, h, w = x.shape
    y = np.empty((b, 24, 8, 8), np.float32)
    assert S2.conv_s2(x, k, y, b, c, 24, h, w, 1) is False
    calls = []
    real = winograd_s2.conv2d
    monkeypatch.setattr(winograd_s2, "conv2d", lambda *a: calls.append(1) or real(*a))
    with every_size():
        got = cpu_conv._conv2d(x, k, (1, 1), **STRIDE2)
    assert calls  # (the path was asked and declined)
    g = np.random.default_rng(42).standard_normal((2, 24, 8, 8)).astype(np.float32)
    du, dk = np.empty((2, 6, 24, 60), np.float32), np.zeros((24, 20, 3, 3), np.float32)
    assert S2.kernel_grad_s2(x, g, du, dk, b, c, 24, h, w, 2) is (where != "input")
    if where == "input":
        assert not dk.any()  # (left alone)
        grad_calls = []
        real_grad = winograd_s2.kernel_grad
        monkeypatch.setattr(winograd_s2, "kernel_grad", lambda *a: grad_calls.append(1) or real_grad(*a))
        with every_size():
            got_dk = cpu_conv._conv2d_kernel_grad(x, g, k.shape, (1, 1), **STRIDE2)
        assert grad_calls
        want_dk = _reference_kernel_grad(x, k.shape, g)
        np.testing.assert_array_equal(np.isnan(got_dk), np.isnan(want_dk))
        np.testing.assert_array_equal(np.isposinf(got_dk), np.isposinf(want_dk))
        np.testing.assert_array_equal(np.isneginf(got_dk), np.isneginf(want_dk))
    want = _reference(x, k)
    assert not np.isfinite(want).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-3)


def test_the_rule(monkeypatch):
    f32 = np.float32
    x, k = np.zeros((4, 64, 32, 32), f32), np.zeros((128, 64, 3, 3), f32)
    applies = winograd_s2.applies
    assert applies(x, k, (1, 1), **STRIDE2)
    assert applies(np.zeros((16, 64, 28, 28), f32), k, (1, 1), **STRIDE2)  # 14 wide: a part-tile
    assert not applies(x, k, (1, 1), (1, 1), (1, 1), 1)  # stride 1: Winograd F(2x2, 3x3)'s
    assert not applies(x, k, (0, 0), **STRIDE2)  # other padding
    assert not applies(x, k, (1, 1), (2, 1), (1, 1), 1)
    assert not applies(x, k, (1, 1), (2, 2), (2, 2), 1)  # dilation
    assert not applies(x, np.zeros((128, 32, 3, 3), f32), (1, 1), (2, 2), (1, 1), 2)  # groups
    assert not applies(x, np.zeros((128, 64, 5, 5), f32), (1, 1), **STRIDE2)
    assert not applies(x.astype(np.float64), k.astype(np.float64), (1, 1), **STRIDE2)
    assert not applies(np.zeros((4, 8, 32, 32), f32), np.zeros((128, 8, 3, 3), f32), (1, 1), **STRIDE2)
    assert not applies(x, np.zeros((8, 64, 3, 3), f32), (1, 1), **STRIDE2)  # few output channels
    # 8x8 outputs are 16 tiles, but a single 16x16 image's kernel transform does not pay
    assert not applies(np.zeros((2, 512, 16, 16), f32), np.zeros((512, 512, 3, 3), f32), (1, 1), **STRIDE2)
    assert applies(np.zeros((4, 512, 16, 16), f32), np.zeros((512, 512, 3, 3), f32), (1, 1), **STRIDE2)
    assert not applies(np.zeros((16, 64, 14, 14), f32), k, (1, 1), **STRIDE2)  # 7x7 outputs: 14 tiles
    g = np.zeros((4, 128, 16, 16), f32)
    grad = winograd_s2.applies_to_kernel_grad
    assert grad(x, g, k.shape, (1, 1), **STRIDE2)
    assert not grad(x[:1], g[:1], k.shape, (1, 1), **STRIDE2)  # a single image: the split products
    assert not grad(x, g[:, :, :15], k.shape, (1, 1), **STRIDE2)
    assert not grad(x, g.astype(np.float64), k.shape, (1, 1), **STRIDE2)
    assert not grad(x, g, k.shape, (1, 1), (1, 1), (1, 1), 1)
    wide = np.zeros((4, 256, 32, 32), f32)  # 256x256 channel pairs: the slabs leave the L2 cache
    assert not grad(wide, np.zeros((4, 256, 16, 16), f32), (256, 256, 3, 3), (1, 1), **STRIDE2)
    monkeypatch.setattr(native, "disabled", lambda: True)
    assert not applies(x, k, (1, 1), **STRIDE2)
    assert not grad(x, g, k.shape, (1, 1), **STRIDE2)


def test_bad_arguments():
    x, k = np.zeros((1, 16, 8, 8), np.float32), np.zeros((16, 16, 3, 3), np.float32)
    y = np.zeros((1, 16, 4, 4), np.float32)
    with pytest.raises(TypeError):
        S2.conv_s2(x, k, y, 1, 16, 16, 8, 8)
    with pytest.raises(ValueError):
        S2.conv_s2(x, k, y, 1, 16, 16, 8, 8, 3)  # more blocks than 16 channels make
    with pytest.raises(ValueError):
        S2.conv_s2(x, k, y, 1, 16, 16, 8, 0, 1)
    with pytest.raises(ValueError):
        S2.conv_s2(x, k, y, 1, 16, 16, 9, 8, 1)  # x too small
    with pytest.raises(ValueError):
        S2.conv_s2(x, k[:8], y, 1, 16, 16, 8, 8, 1)
    with pytest.raises(ValueError):
        S2.conv_s2(x, k, y[:, :8], 1, 16, 16, 8, 8, 1)
    with pytest.raises(BufferError):
        S2.conv_s2(x, k, y.tobytes(), 1, 16, 16, 8, 8, 1)  # read-only output
    du, dk = np.zeros((1, 6, 16, 48), np.float32), np.zeros((16, 16, 3, 3), np.float32)
    with pytest.raises(TypeError):
        S2.kernel_grad_s2(x, y, du, dk, 1, 16, 16, 8, 8)
    with pytest.raises(ValueError):
        S2.kernel_grad_s2(x, y, du, dk, 1, 16, 16, 8, 8, 2)  # more parts than images
    with pytest.raises(ValueError):
        S2.kernel_grad_s2(x, y, du[:, :5], dk, 1, 16, 16, 8, 8, 1)  # slabs too small
    with pytest.raises(ValueError):
        S2.kernel_grad_s2(x, y[:, :8], du, dk, 1, 16, 16, 8, 8, 1)
    with pytest.raises(ValueError):
        S2.kernel_grad_s2(x, y, du, dk[:8], 1, 16, 16, 8, 8, 1)
