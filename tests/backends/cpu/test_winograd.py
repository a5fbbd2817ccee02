"""Winograd F(2x2, 3x3) (and F(4, 3) for 1x3 kernels: 1-D convolutions) against
PyTorch (float64), values and gradients (the input gradient through the flipped
kernel, the kernel gradient through its own transforms).

The transforms are drawn over odd and even output sizes (cropped last tiles),
padding 0-2 on each side, batches and channel counts, with the rule's thresholds
lowered so that small shapes take the path; the AVX2 and baseline builds of the
transforms and one against two threads give the same bits, as do the passes run a
few images at a time and each pass over the whole batch, and the kernel gradient's
sums in parts of the batch at one and two threads; the rule sends only
stride-1, undilated, ungrouped 3x3 f32 convolutions with enough channels and tiles.
"""

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import conv as cpu_conv
from tallow.backends.cpu import native, winograd

from support.native_builds import each_build_and_thread_count

W = winograd._module()
pytestmark = pytest.mark.skipif(W is None, reason="the native Winograd transforms are not built")
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def every_size():
    """Winograd for any channel and tile count (the rule's thresholds at 1)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(winograd, "MIN_CHANNELS", 1)
        mp.setattr(winograd, "MIN_TILES", 1)
        yield


def _reference(op, x, k, **kw):
    return getattr(F, op)(torch.from_numpy(x).double(), torch.from_numpy(k).double(), **kw).numpy()


def _close(got, want):
    """Within a few float32 rounding steps of the float64 result's scale."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * scale * 9)


def _spy(monkeypatch):
    """The shapes of the kernels ``winograd.conv2d`` convolves with from now on (a
    flipped one's as (c_out, c_in, kh, kw) of the convolution), and ("grad", kernel
    shape) for each ``winograd.kernel_grad``."""
    calls = []
    real, real_grad = winograd.conv2d, winograd.kernel_grad

    def conv2d(x, k, pad, flipped=False):
        calls.append((k.shape[1], k.shape[0]) + k.shape[2:] if flipped else k.shape)
        return real(x, k, pad, flipped)

    monkeypatch.setattr(winograd, "conv2d", conv2d)
    monkeypatch.setattr(winograd, "kernel_grad",
                        lambda *a: calls.append(("grad", tuple(a[2]))) or real_grad(*a))
    return calls


def _check_with_gradients(op, x, k, pad, rng, monkeypatch):
    """``op`` forward and backward through autograd (Winograd for any size) against
    PyTorch in float64: values, input and kernel gradients. Returns the kernel shapes
    the Winograd path saw."""
    calls = _spy(monkeypatch)
    with every_size():
        tx, tk = tl.Var(x), tl.Var(k)
        out = getattr(tx, op)(tk, padding=pad)
        g = rng.standard_normal(out.shape).astype(np.float32)
        grads = (out * tl.Tensor(g)).sum_all().backward()
    px = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    ref = getattr(F, op)(px, pk, padding=pad)
    (ref * torch.from_numpy(g.astype(np.float64))).sum().backward()
    _close(out.numpy(), ref.detach().numpy())
    _close(grads[tx].numpy(), px.grad.numpy())
    np.testing.assert_allclose(grads[tk].numpy(), pk.grad.numpy(), rtol=2e-4, atol=2e-4)
    return calls


@given(b=st.integers(1, 3), c=st.integers(1, 6), co=st.integers(1, 6), h=st.integers(1, 9),
       w=st.integers(1, 9), ph=st.integers(0, 2), pw=st.integers(0, 2), seed=st.integers(0, 999))
@SETTINGS
def test_transforms_match_a_direct_convolution(b, c, co, h, w, ph, pw, seed):
    if h + 2 * ph < 3 or w + 2 * pw < 3:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    k = rng.standard_normal((co, c, 3, 3)).astype(np.float32)
    _close(winograd.conv2d(x, k, (ph, pw)), _reference("conv2d", x, k, padding=(ph, pw)))


@pytest.mark.parametrize("shape,pad", [((2, 16, 16, 17, 13), (1, 1)), ((1, 32, 24, 9, 16), (0, 2)),
                                       ((3, 20, 16, 12, 12), (2, 0))])
def test_conv2d_and_its_gradients_through_the_winograd_path(shape, pad, monkeypatch):
    """conv2d forward (Winograd), the input gradient (a stride-1 transposed convolution:
    Winograd with the flipped kernel) and the kernel gradient, against PyTorch."""
    b, c, co, h, w = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    k = rng.standard_normal((co, c, 3, 3)).astype(np.float32)
    calls = _check_with_gradients("conv2d", x, k, pad, rng, monkeypatch)
    # forward, the input gradient, the kernel gradient
    assert calls == [(co, c, 3, 3), (c, co, 3, 3), ("grad", (co, c, 3, 3))]


@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("pad", [0, 1, 2])
def test_a_stride_1_transposed_convolution_goes_to_winograd(pad, passes, monkeypatch):
    """Through the channel-lane convolution (U^T) and the pass-by-pass path (U), both
    from the kernel's transform with its positions permuted (no flipped copy)."""
    rng = np.random.default_rng(pad)
    x = rng.standard_normal((2, 24, 11, 14)).astype(np.float32)
    k = rng.standard_normal((24, 20, 3, 3)).astype(np.float32)  # (c_in, c_out, 3, 3)
    calls = _spy(monkeypatch)
    if passes:
        monkeypatch.setattr(winograd, "_bands", lambda batch, th: 0)
        monkeypatch.setattr(winograd, "_by_images", lambda batch: False)
    with every_size():
        y = tl.Tensor(x).conv_transpose2d(tl.Tensor(k), padding=pad).numpy()
    assert calls
    _close(y, _reference("conv_transpose2d", x, k, padding=pad))


def test_a_stride_1_transposed_convolution_s_kernel_gradient_goes_to_winograd(monkeypatch):
    """Its kernel gradient is that of a convolution of the output gradient (as the
    input) with the input (as the output gradient), in the kernel's own layout."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 24, 11, 14)).astype(np.float32)
    k = rng.standard_normal((24, 20, 3, 3)).astype(np.float32)
    calls = _spy(monkeypatch)
    with every_size():
        tk = tl.Var(k)
        out = tl.Tensor(x).conv_transpose2d(tk, padding=1)
        g = rng.standard_normal(out.shape).astype(np.float32)
        got = (out * tl.Tensor(g)).sum_all().backward()[tk].numpy()
    assert ("grad", (24, 20, 3, 3)) in calls
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    (F.conv_transpose2d(torch.from_numpy(x).double(), pk, padding=1)
     * torch.from_numpy(g).double()).sum().backward()
    _close_sum(got, pk.grad.numpy())


@given(b=st.integers(1, 3), c=st.integers(1, 6), co=st.integers(1, 6), h=st.integers(1, 3),
       w=st.integers(1, 12), pw=st.integers(0, 2), seed=st.integers(0, 999))
@SETTINGS
def test_row_transforms_match_a_direct_convolution(b, c, co, h, w, pw, seed):
    """1x3 kernels: F(4, 3) along each row, every width modulo 4, padding 0-2."""
    if w + 2 * pw < 3:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    k = rng.standard_normal((co, c, 1, 3)).astype(np.float32)
    _close(winograd.conv2d(x, k, (0, pw)), _reference("conv2d", x, k, padding=(0, pw)))


def _close_sum(got, want):
    """A kernel gradient (a sum over every output position): within float32 rounding of
    the float64 result's scale."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale)


def _reference_kernel_grad(x, g, k_shape, pad):
    pk = torch.zeros(k_shape, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(torch.from_numpy(x).double(), pk, padding=pad)
    y.backward(torch.from_numpy(g).double())
    return pk.grad.numpy()


@given(b=st.integers(1, 3), c=st.integers(1, 6), co=st.integers(1, 6), h=st.integers(1, 9),
       w=st.integers(1, 9), ph=st.integers(0, 2), pw=st.integers(0, 2), seed=st.integers(0, 999))
@SETTINGS
def test_kernel_gradient_transforms_match_pytorch(b, c, co, h, w, ph, pw, seed):
    """G^T (sum over tiles of (A dY A^T) V^T) G, odd and even output sizes (the last
    tiles' missing rows and columns of dY count as zeros), padding 0-2."""
    if h + 2 * ph < 3 or w + 2 * pw < 3:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    g = rng.standard_normal((b, co, h + 2 * ph - 2, w + 2 * pw - 2)).astype(np.float32)
    k_shape = (co, c, 3, 3)
    _close_sum(winograd.kernel_grad(x, g, k_shape, (ph, pw)), _reference_kernel_grad(x, g, k_shape, (ph, pw)))


@given(b=st.integers(1, 3), c=st.integers(1, 6), co=st.integers(1, 6), h=st.integers(1, 3),
       w=st.integers(1, 12), pw=st.integers(0, 2), seed=st.integers(0, 999))
@SETTINGS
def test_row_kernel_gradient_transforms_match_pytorch(b, c, co, h, w, pw, seed):
    if w + 2 * pw < 3:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    g = rng.standard_normal((b, co, h, w + 2 * pw - 2)).astype(np.float32)
    k_shape = (co, c, 1, 3)
    _close_sum(winograd.kernel_grad(x, g, k_shape, (0, pw)), _reference_kernel_grad(x, g, k_shape, (0, pw)))


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_conv1d_and_its_gradients_through_the_winograd_path(pad, monkeypatch):
    """conv1d forward and its input gradient (a stride-1 transposed convolution) go to
    F(4, 3); values and both gradients against PyTorch."""
    rng = np.random.default_rng(30 + pad)
    x = rng.standard_normal((3, 32, 41)).astype(np.float32)  # 96 column rows: past the direct kernel's
    k = rng.standard_normal((40, 32, 3)).astype(np.float32)
    calls = _check_with_gradients("conv1d", x, k, pad, rng, monkeypatch)
    assert calls == [(40, 32, 1, 3), (32, 40, 1, 3), ("grad", (40, 32, 1, 3))]


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("op,where", [("conv1d", "input"), ("conv2d", "input"), ("conv2d", "kernel"),
                                      ("conv_transpose2d", "input")])
def test_a_non_finite_value_takes_another_path(op, where, bad, monkeypatch):
    """The transforms mix a tile's values before multiplying: an infinity would come out
    as NaNs over its tiles, where a direct sum gives infinities at the outputs it
    reaches. Such a convolution takes another path: PyTorch's values, infinities and
    NaNs at the same places, in the output and both gradients."""
    rng = np.random.default_rng(40)
    rank = 1 if op == "conv1d" else 2
    x = rng.standard_normal((3, 32) + (13,) * rank).astype(np.float32)  # 96+ column rows: not direct
    channels = (32, 20) if op == "conv_transpose2d" else (20, 32)  # (c_in, c_out) or (c_out, c_in)
    k = rng.standard_normal(channels + (3,) * rank).astype(np.float32)
    if where == "input":
        x[(1, 5) + (6,) * rank] = bad
    else:
        k[(2, 7) + (1,) * rank] = bad
    calls = _spy(monkeypatch)
    with every_size():
        tx, tk = tl.Var(x), tl.Var(k)
        out = getattr(tx, op)(tk, padding=1)
        g = rng.standard_normal(out.shape).astype(np.float32)
        grads = (out * tl.Tensor(g)).sum_all().backward()
    assert calls  # (Winograd applied and declined)
    px = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    ref = getattr(F, op)(px, pk, padding=1)
    (ref * torch.from_numpy(g.astype(np.float64))).sum().backward()
    assert not np.isfinite(ref.detach().numpy()).all()  # (the case reaches this value)
    for got, want in ((out, ref.detach()), (grads[tx], px.grad), (grads[tk], pk.grad)):
        got, want = got.numpy(), want.numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-3)


def test_all_finite():
    a = np.zeros((3, 70), np.float32)
    assert W.all_finite(a) and W.all_finite(a[:0])
    for bad in (np.inf, -np.inf, np.nan):
        for at in (0, 69, 209):
            b = a.copy()
            b.flat[at] = bad
            assert not W.all_finite(b)
    b = a.copy()
    b.flat[5] = np.finfo(np.float32).max
    assert W.all_finite(b)
    with pytest.raises(TypeError):
        W.all_finite(np.zeros(4, np.float64))


def test_the_rule(monkeypatch):
    f32 = np.float32
    x, k = np.zeros((8, 64, 16, 16), f32), np.zeros((64, 64, 3, 3), f32)
    assert winograd.applies(x, k, (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies(x, k, (1, 1), (2, 2), (1, 1), 1)  # stride 2
    assert not winograd.applies(x, k, (1, 1), (1, 1), (2, 2), 1)  # dilation
    assert not winograd.applies(x, np.zeros((64, 32, 3, 3), f32), (1, 1), (1, 1), (1, 1), 2)  # groups
    assert not winograd.applies(x.astype(np.float64), k.astype(np.float64), (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies(x, np.zeros((64, 64, 5, 5), f32), (2, 2), (1, 1), (1, 1), 1)
    assert not winograd.applies(np.zeros((8, 8, 16, 16), f32), np.zeros((64, 8, 3, 3), f32),
                                (1, 1), (1, 1), (1, 1), 1)  # few input channels: the direct kernel
    assert not winograd.applies(np.zeros((1, 256, 7, 7), f32), np.zeros((256, 256, 3, 3), f32),
                                (1, 1), (1, 1), (1, 1), 1)  # 16 tiles: the kernel transform would not pay
    row, k13 = np.zeros((16, 64, 1, 256), f32), np.zeros((64, 64, 1, 3), f32)
    assert winograd.applies(row, k13, (0, 1), (1, 1), (1, 1), 1)  # a 1-D convolution
    assert not winograd.applies(row, k13, (1, 1), (1, 1), (1, 1), 1)  # rows of padding
    assert not winograd.applies(x, np.zeros((64, 64, 3, 1), f32), (1, 0), (1, 1), (1, 1), 1)  # 3x1
    g = np.zeros((8, 64, 16, 16), f32)
    assert winograd.applies_to_kernel_grad(x, g, k.shape, (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies_to_kernel_grad(x, g[:, :, :15], k.shape, (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies_to_kernel_grad(x, g.astype(np.float64), k.shape, (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies_to_kernel_grad(x, g, k.shape, (1, 1), (2, 2), (1, 1), 1)
    monkeypatch.setattr(native, "disabled", lambda: True)
    assert not winograd.applies(x, k, (1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies_to_kernel_grad(x, g, k.shape, (1, 1), (1, 1), (1, 1), 1)


@pytest.mark.parametrize("k_shape,pad", [((3, 3), (1, 1)), ((1, 3), (0, 1))])
def test_the_same_bits_with_either_build_and_at_one_or_two_threads(k_shape, pad):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 32, 15, 18)).astype(np.float32)
    k = rng.standard_normal((40, 32) + k_shape).astype(np.float32)
    g = rng.standard_normal((4, 40, 15, 18)).astype(np.float32)
    results, grads = [], []
    # the baseline build, AVX2 where the CPU has it, and the channel-lane forward in
    # AVX-512 registers where it has that too
    for _ in each_build_and_thread_count(W):
        results.append(winograd.conv2d(x, k, pad))
        grads.append(winograd.kernel_grad(x, g, k.shape, pad))
    assert len(results) >= 2  # (the baseline build at one and two threads, at least)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    for r in grads[1:]:
        np.testing.assert_array_equal(r, grads[0])
    _close(results[0], _reference("conv2d", x, k, padding=pad))
    _close_sum(grads[0], _reference_kernel_grad(x, g, k.shape, pad))


def _pass_by_pass(x, k, pad, monkeypatch):
    """``winograd.conv2d`` with each pass split over the threads (neither by images nor
    in bands of tile rows)."""
    calls = []
    passes, row_passes = W.input_transform, W.input_transform_row
    with monkeypatch.context() as mp:
        mp.setattr(winograd, "_by_images", lambda batch: False)
        mp.setattr(winograd, "_bands", lambda batch, th: 0)
        mp.setattr(W, "input_transform", lambda *a: calls.append(a) or passes(*a))
        mp.setattr(W, "input_transform_row", lambda *a: calls.append(a) or row_passes(*a))
        y = winograd.conv2d(x, k, pad)
    assert calls  # (the passes ran)
    return y


@pytest.mark.parametrize("k_shape,pad", [((3, 3), (1, 1)), ((3, 3), (0, 2)), ((1, 3), (0, 1))])
@pytest.mark.parametrize("group_bytes", [0, 1 << 14, 1 << 30])
def test_the_convolution_by_images_gives_the_pass_by_pass_bits(k_shape, pad, group_bytes, monkeypatch):
    """The three passes a few images at a time (one product per group of images, groups
    of 1, a few and the whole batch; a 3x3 kernel's images also cut into every count of
    bands of tile rows) against each pass over the whole batch, at one and two threads:
    the same bits, and PyTorch's values."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((7, 24, 11, 14)).astype(np.float32)
    k = rng.standard_normal((20, 24) + k_shape).astype(np.float32)
    want = _pass_by_pass(x, k, pad, monkeypatch)
    w = native._workers
    before, min_bytes, old_group = tl.utils.get_num_threads(), w.min_bytes(), W.set_group_bytes(group_bytes)
    try:
        for threads in (1, 2):
            tl.utils.set_num_threads(threads)
            native.sync_threads()
            w.set_min_bytes(0)
            w.set_load_check(False)
            u = np.empty(((16, 24, 20) if k_shape[0] == 3 else (winograd.ROW_POSITIONS, 20, 24)), np.float32)
            b, c, h, wd = x.shape
            if k_shape[0] == 3:
                W.kernel_transform_t(k, u, 20, 24)  # conv's layout: (16, c_in, c_out)
                th, tw = (want.shape[2] + 1) // 2, (want.shape[3] + 1) // 2
                for bands in [None] + list(range(1, th + 1)):
                    y = np.full(want.shape, np.nan, np.float32)
                    args = (x, u, y, b, c, 20, h, wd, pad[0], pad[1], th, tw)
                    W.conv(*args) if bands is None else W.conv(*args, bands)
                    np.testing.assert_array_equal(y, want)
            else:
                y = np.full(want.shape, np.nan, np.float32)
                W.kernel_transform_row(k, u, 20, 24)
                W.conv_row(x, u, y, b, c, 20, h, wd, pad[1], winograd._row_tiles(want.shape[3]))
                np.testing.assert_array_equal(y, want)
    finally:
        W.set_group_bytes(old_group)
        w.set_load_check(True)
        w.set_min_bytes(min_bytes)
        tl.utils.set_num_threads(before)
    _close(want, _reference("conv2d", x, k, padding=pad))


@pytest.mark.parametrize("k_shape,pad", [((3, 3), (1, 1)), ((3, 3), (2, 0)), ((1, 3), (0, 1))])
def test_the_kernel_gradient_in_parts(k_shape, pad, monkeypatch):
    """The kernel gradient's sums in parts of the batch, a group of images at a time
    (groups of 1, a few and a whole part; 1 to 7 parts of 7 images): PyTorch's values,
    and the same bits at one and two threads for each part count and group size."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((7, 18, 9, 13)).astype(np.float32)
    oh, ow = (9 + 2 * pad[0] - k_shape[0] + 1, 13 + 2 * pad[1] - 2)
    g = rng.standard_normal((7, 21, oh, ow)).astype(np.float32)
    shape = (21, 18) + k_shape
    want = _reference_kernel_grad(x, g, shape, pad)
    w = native._workers
    before, min_bytes = tl.utils.get_num_threads(), w.min_bytes()
    old_group = W.set_group_bytes(0)
    try:
        for group in (0, 1 << 15, 1 << 30):
            W.set_group_bytes(group)
            for parts in (1, 3, 7):
                monkeypatch.setattr(winograd, "_kernel_grad_parts", lambda b, parts=parts: parts)
                got = []
                for threads in (1, 2):
                    tl.utils.set_num_threads(threads)
                    native.sync_threads()
                    w.set_min_bytes(0)
                    w.set_load_check(False)
                    got.append(winograd.kernel_grad(x, g, shape, pad))
                np.testing.assert_array_equal(got[1], got[0])
                _close_sum(got[0], want)
    finally:
        W.set_group_bytes(old_group)
        w.set_load_check(True)
        w.set_min_bytes(min_bytes)
        tl.utils.set_num_threads(before)


def test_the_kernel_gradient_s_parts_follow_the_batch_alone(monkeypatch):
    assert [winograd._kernel_grad_parts(b) for b in (1, 2, 3, 4, 5, 64)] == [0, 2, 3, 4, 4, 4]
    for threads in (1, 2):  # not the threads
        monkeypatch.setattr(winograd.CONFIG, "get", lambda threads=threads: threads)
        assert winograd._kernel_grad_parts(8) == 4
        assert winograd._by_images(8)
    previous = winograd.gemm.set_native(False)  # TALLOW_NO_NATIVE_GEMM: the products stay on BLAS
    try:
        assert winograd._kernel_grad_parts(8) == 0 and not winograd._by_images(8)
    finally:
        winograd.gemm.set_native(previous)


def test_the_rule_for_the_convolution_by_images(monkeypatch):
    """By images on one thread, and on two when the images share out evenly enough."""
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 1)
    assert all(winograd._by_images(b) for b in (1, 2, 3, 64))
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 2)
    assert [winograd._by_images(b) for b in (1, 2, 3, 4, 5, 8)] == [False, True, False, True, True, True]


def test_the_rule_for_the_bands_of_tile_rows(monkeypatch):
    """Whole images where they share out; else bands so that images x bands share out
    evenly, at most one per tile row; none (the passes) without the f32 kernel."""
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 1)
    assert [winograd._bands(b, 8) for b in (1, 2, 3)] == [1, 1, 1]
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 2)
    assert [winograd._bands(b, 8) for b in (1, 2, 3, 4, 5)] == [2, 1, 2, 1, 1]
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 4)
    assert [winograd._bands(b, 8) for b in (1, 2, 3, 6)] == [4, 2, 4, 2]
    assert winograd._bands(1, 3) == 3
    previous = winograd.gemm.set_native(False)
    try:
        assert winograd._bands(1, 8) == 0
    finally:
        winograd.gemm.set_native(previous)


def test_a_single_image_runs_in_bands_on_two_threads(monkeypatch):
    """conv2d of one image at two threads goes to ``conv`` with two bands, and gives the
    one-thread bits."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 24, 12, 12)).astype(np.float32)
    k = rng.standard_normal((20, 24, 3, 3)).astype(np.float32)
    before = tl.utils.get_num_threads()
    seen, conv = [], W.conv
    monkeypatch.setattr(W, "conv", lambda *a: seen.append(a[-1]) or conv(*a))
    try:
        tl.utils.set_num_threads(1)
        one = winograd.conv2d(x, k, (1, 1))
        tl.utils.set_num_threads(2)
        two = winograd.conv2d(x, k, (1, 1))
    finally:
        tl.utils.set_num_threads(before)
    assert seen == [1, 2]
    np.testing.assert_array_equal(two, one)
    _close(one, _reference("conv2d", x, k, padding=1))


@pytest.mark.parametrize("b,c,co,h,w,pad", [
    (1, 64, 96, 15, 13, 1),   # odd sizes, 6 blocks of 16 channels
    (2, 20, 40, 9, 11, 0),    # two images, a partial last block
    (1, 16, 33, 8, 8, 1),     # a block of one channel
])
@pytest.mark.parametrize("flip", [0, 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_groups_gives_conv_s_bits(b, c, co, h, w, pad, flip, threads):
    """conv_groups, each unit transforming its own columns of U^T from the kernel (or the
    flipped kernel of a transposed convolution): kernel_transform_t / kernel_transform
    (flip) + conv's bits for every group count, and every output written."""
    rng = np.random.default_rng(c * co + flip)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    k = rng.standard_normal((c, co, 3, 3) if flip else (co, c, 3, 3)).astype(np.float32)
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(threads)
        native.sync_threads()
        ut = np.empty((16, c, co), np.float32)
        if flip:
            W.kernel_transform(k, ut, c, co, 1)
        else:
            W.kernel_transform_t(k, ut, co, c)
        want = np.empty((b, co, oh, ow), np.float32)
        W.conv(x, ut, want, b, c, co, h, w, pad, pad, th, tw)
        for groups in range(1, (co + 15) // 16 + 1):
            got = np.full((b, co, oh, ow), np.nan, np.float32)
            W.conv_groups(x, k, got, b, c, co, h, w, pad, pad, th, tw, groups, flip)
            np.testing.assert_array_equal(got, want)
    finally:
        tl.utils.set_num_threads(before)
    op = "conv_transpose2d" if flip else "conv2d"
    _close(want, _reference(op, x, k, padding=2 - pad if flip else pad))


def test_a_single_image_with_more_channels_than_tiles_runs_in_groups(monkeypatch):
    """One image of no more tiles than output channels at two threads: ``conv_groups``
    in two groups, forward and the transposed (input gradient) form, with the
    one-thread bits."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((1, 48, 10, 10)).astype(np.float32)  # 25 tiles, 40 channels out
    k = rng.standard_normal((40, 48, 3, 3)).astype(np.float32)
    g = rng.standard_normal((1, 40, 10, 10)).astype(np.float32)
    before = tl.utils.get_num_threads()
    seen, groups = [], W.conv_groups
    monkeypatch.setattr(W, "conv_groups", lambda *a: seen.append(a[-2:]) or groups(*a))
    runs = []
    try:
        for threads in (1, 2):
            tl.utils.set_num_threads(threads)
            runs.append((winograd.conv2d(x, k, (1, 1)), winograd.conv2d(g, k, (1, 1), flipped=True)))
    finally:
        tl.utils.set_num_threads(before)
    assert seen == [(2, 0), (2, 1)]
    for one, two in zip(*runs):
        np.testing.assert_array_equal(two, one)
    _close(runs[0][0], _reference("conv2d", x, k, padding=1))
    _close(runs[0][1], _reference("conv_transpose2d", g, k, padding=1))


def test_the_rule_for_the_groups_of_output_channels(monkeypatch):
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 2)
    assert winograd._groups(1, 64, 128) == 2      # 128->128 at 16x16
    assert winograd._groups(1, 64, 64) == 2       # as many channels as tiles
    assert winograd._groups(1, 256, 64) == 0      # 64->64 at 32x32: bands
    assert winograd._groups(2, 64, 128) == 0      # two images: one each
    assert winograd._groups(1, 4, 16) == 1        # one block of channels
    with winograd.parallel.serial():              # one thread's batch worker
        assert winograd._groups(1, 64, 128) == 0
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 1)
    assert winograd._groups(1, 64, 128) == 0
    monkeypatch.setattr(winograd.CONFIG, "get", lambda: 2)
    previous = winograd.gemm.set_native(False)  # its products are the f32 kernel's
    try:
        assert winograd._groups(1, 64, 128) == 0
    finally:
        winograd.gemm.set_native(previous)


@pytest.mark.parametrize("co,ci", [(1, 1), (5, 37), (70, 3), (130, 66)])
def test_the_transposed_kernel_transform_is_the_kernel_transform_transposed(co, ci):
    """kernel_transform_t (conv's layout, (16, c_in, c_out)) holds kernel_transform's
    bits, transposed, for channel counts across its blocks of 64; both match G k G^T."""
    rng = np.random.default_rng(co * 1000 + ci)
    k = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    u = np.empty((16, co, ci), np.float32)
    ut = np.full((16, ci, co), np.nan, np.float32)
    W.kernel_transform(k, u, co, ci)
    W.kernel_transform_t(k, ut, co, ci)
    np.testing.assert_array_equal(ut, u.transpose(0, 2, 1))
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    want = np.einsum("pa,oiab,qb->pqio", g, k.astype(np.float64), g)  # position 4p + q
    np.testing.assert_allclose(ut, want.reshape(16, ci, co), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("co,ci", [(1, 1), (5, 37), (70, 3), (130, 66), (17, 80)])
def test_the_kernel_transforms_give_the_same_bits_in_zmm_registers(co, ci):
    """The 16 kernels at a time gathered into AVX-512 registers (channel counts across
    the 16-lane tails and the blocks of 64) give the scalar blocks' bits, in both
    layouts, flipped or not; so does the kernel gradient's transform, scattered."""
    if not W.avx512():
        pytest.skip("the CPU has no AVX-512")
    rng = np.random.default_rng(co * 1000 + ci + 2)
    k = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    try:
        for transform, shape in ((W.kernel_transform, (16, co, ci)), (W.kernel_transform_t, (16, ci, co))):
            for flip in (0, 1):
                out = []
                for zmm in (False, True):
                    W.set_avx512(zmm)
                    u = np.full(shape, np.nan, np.float32)
                    transform(k, u, co, ci, flip)
                    out.append(u)
                np.testing.assert_array_equal(out[1], out[0])
                assert not np.isnan(out[0]).any()
        du = rng.standard_normal((16, co, ci)).astype(np.float32)  # and the kernel gradient's G^T dU G
        out = []
        for zmm in (False, True):
            W.set_avx512(zmm)
            dk = np.full((co, ci, 3, 3), np.nan, np.float32)
            W.kernel_grad_transform(du, dk, co, ci)
            out.append(dk)
        np.testing.assert_array_equal(out[1], out[0])
        assert not np.isnan(out[0]).any()
    finally:
        W.set_avx512(True)


@pytest.mark.parametrize("co,ci", [(1, 1), (5, 37), (70, 3), (130, 66)])
def test_the_flipped_kernel_transforms_permute_the_positions(co, ci):
    """With flip, the transforms write U of each kernel flipped along both axes: the
    plain transform's bits at permuted positions (0 and 3 of each axis swapped), and G
    flip(k) G^T in float64. The 1x3 kernels' F(4, 3) transform reads the taps reversed:
    the plain transform's bits of the reversed kernel, and G flip(k) in float64; given
    a transposed convolution's kernel (swapped), the bits of its transposed copy."""
    rng = np.random.default_rng(co * 1000 + ci + 1)
    k = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    perm = np.array([4 * p + q for p in (3, 1, 2, 0) for q in (3, 1, 2, 0)])
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    want = np.einsum("pa,oiab,qb->pqoi", g, k[:, :, ::-1, ::-1].astype(np.float64), g).reshape(16, co, ci)
    for transform, layout in ((W.kernel_transform, (0, 1, 2)), (W.kernel_transform_t, (0, 2, 1))):
        plain = np.empty((16, co, ci), np.float32).transpose(layout).copy()
        flipped = np.full_like(plain, np.nan)
        transform(k, plain, co, ci)
        transform(k, flipped, co, ci, 1)
        np.testing.assert_array_equal(flipped, plain[perm])
        np.testing.assert_allclose(flipped, want.transpose(layout), rtol=1e-6, atol=1e-6)
    kr = k[:, :, 1:2, :].copy()
    shape = (winograd.ROW_POSITIONS, co, ci)
    reversed_plain, flipped = np.empty(shape, np.float32), np.full(shape, np.nan, np.float32)
    W.kernel_transform_row(kr[..., ::-1].copy(), reversed_plain, co, ci)
    W.kernel_transform_row(kr, flipped, co, ci, 1)
    np.testing.assert_array_equal(flipped, reversed_plain)
    g4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    want = np.einsum("pa,oia->poi", g4, kr[:, :, 0, ::-1].astype(np.float64))
    np.testing.assert_allclose(flipped, want, rtol=1e-6, atol=1e-6)
    # a transposed convolution's kernel (ci, co, 1, 3), read as its transpose in place
    swapped = np.full(shape, np.nan, np.float32)
    W.kernel_transform_row(kr.transpose(1, 0, 2, 3).copy(), swapped, co, ci, 1, 1)
    np.testing.assert_array_equal(swapped, flipped)
    with pytest.raises(ValueError, match="flip"):
        W.kernel_transform(k, plain, co, ci, 2)
    with pytest.raises(ValueError, match="swapped"):
        W.kernel_transform_row(kr, swapped, co, ci, 1, 2)
    with pytest.raises(TypeError):
        W.kernel_transform(k, plain, co, ci, 1, 1)


def test_bad_buffers_are_refused_before_any_write():
    x = np.zeros((1, 2, 4, 4), np.float32)
    y = np.full((1, 2, 4, 4), 7.0, np.float32)
    for bands in (0, 3):  # 2 tile rows
        with pytest.raises(ValueError, match="bands"):
            W.conv(x, np.zeros((16, 2, 2), np.float32), y, 1, 2, 2, 4, 4, 1, 1, 2, 2, bands)
    assert (y == 7.0).all()
    with pytest.raises(TypeError):
        W.conv_row(x, np.zeros((4, 2, 2), np.float32), y, 1, 2, 2, 4, 4, 1, 2, 1)
    v = np.full((16, 2, 3), 7.0, np.float32)  # room for 3 tiles; a 4x4 image padded by 1 has 4
    with pytest.raises(ValueError):
        W.input_transform(x, v, 1, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(ValueError, match="too few tiles"):
        W.input_transform(x, np.zeros((16, 2, 1), np.float32), 1, 2, 4, 4, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="too few tiles"):
        W.output_transform(np.zeros((16, 2, 1), np.float32), np.zeros((1, 2, 4, 4), np.float32), 1, 2, 4, 4, 1, 1)
    with pytest.raises(ValueError):
        W.kernel_transform(np.zeros((2, 2, 3, 3), np.float32), np.zeros((16, 2, 1), np.float32), 2, 2)
    with pytest.raises(TypeError):
        W.kernel_transform(np.zeros((2, 2, 3, 3), np.float32), np.zeros((16, 2, 2), np.float32), 2)
    with pytest.raises(ValueError):
        W.kernel_transform_t(np.zeros((2, 2, 3, 3), np.float32), np.zeros((16, 2, 1), np.float32), 2, 2)
    with pytest.raises(ValueError, match="too few tiles"):
        W.input_transform_row(x, np.zeros((6, 2, 4), np.float32), 1, 2, 4, 4, 1, 0)
    with pytest.raises(ValueError, match="too few tiles"):
        W.output_transform_row(np.zeros((6, 2, 4), np.float32), np.zeros((1, 2, 4, 5), np.float32), 1, 2, 4, 5, 1)
    vr = np.full((6, 2, 7), 7.0, np.float32)  # 4 rows x 2 tiles need 8 per channel and position
    with pytest.raises(ValueError):
        W.input_transform_row(x, vr, 1, 2, 4, 4, 1, 2)
    with pytest.raises(ValueError, match="too few tiles"):
        W.grad_transform(x, np.zeros((16, 2, 1), np.float32), 1, 2, 4, 4, 1, 1)
    with pytest.raises(ValueError):  # room for 3 of the 4 tiles
        W.grad_transform(x, v, 1, 2, 4, 4, 2, 2)
    with pytest.raises(ValueError, match="too few tiles"):
        W.grad_transform_row(np.zeros((1, 2, 4, 5), np.float32), np.zeros((6, 2, 4), np.float32), 1, 2, 4, 5, 1)
    with pytest.raises(ValueError):
        W.grad_transform_row(x, vr, 1, 2, 4, 4, 2)
    dk = np.full((2, 2, 3, 3), 7.0, np.float32)
    with pytest.raises(ValueError):  # m holds 16 x 2 x 1 floats, not 16 x 2 x 2
        W.kernel_grad_transform(np.zeros((16, 2, 1), np.float32), dk, 2, 2)
    with pytest.raises(ValueError):
        W.kernel_grad_transform_row(np.zeros((4, 2, 1), np.float32), dk, 2, 2)
    with pytest.raises(TypeError):
        W.kernel_grad_transform(np.zeros((16, 2, 2), np.float32), dk, 2)
    y = np.full((1, 2, 4, 4), 7.0, np.float32)
    with pytest.raises(ValueError, match="tiles do not match"):
        W.conv(x, np.zeros((16, 2, 2), np.float32), y, 1, 2, 2, 4, 4, 1, 1, 1, 2)
    with pytest.raises(ValueError):  # the kernel's u holds 16 x 2 x 1 floats, not 16 x 2 x 2
        W.conv(x, np.zeros((16, 2, 1), np.float32), y, 1, 2, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(ValueError):  # an output of 4x3 for a 4x4 one
        W.conv(x, np.zeros((16, 2, 2), np.float32), y[..., :3].copy(), 1, 2, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(TypeError):
        W.conv_row(x, np.zeros((4, 2, 2), np.float32), y, 1, 2, 2, 4, 4, 1)
    k9 = np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="groups"):  # 2 channels: one block of 16
        W.conv_groups(x, k9, y, 1, 2, 2, 4, 4, 1, 1, 2, 2, 2, 0)
    with pytest.raises(ValueError, match="groups"):
        W.conv_groups(x, k9, y, 1, 2, 2, 4, 4, 1, 1, 2, 2, 0, 0)
    with pytest.raises(ValueError, match="flip"):
        W.conv_groups(x, k9, y, 1, 2, 2, 4, 4, 1, 1, 2, 2, 1, 2)
    with pytest.raises(ValueError):  # a kernel of 2 x 2 x 3 x 2 floats
        W.conv_groups(x, k9[..., :2].copy(), y, 1, 2, 2, 4, 4, 1, 1, 2, 2, 1, 0)
    with pytest.raises(ValueError, match="tiles do not match"):
        W.conv_groups(x, k9, y, 1, 2, 2, 4, 4, 1, 1, 1, 2, 1, 0)
    with pytest.raises(TypeError):
        W.conv_groups(x, k9, y, 1, 2, 2, 4, 4, 1, 1, 2, 2, 1)
    du = np.full((2, 16, 2, 2), 7.0, np.float32)
    with pytest.raises(ValueError):  # room for 2 parts, not 3
        W.kernel_grad_parts(x, x, du, 3, 1, 2, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(ValueError, match="do not match"):
        W.kernel_grad_parts(x, x, du, 0, 1, 2, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(ValueError):  # the gradient of a 4x4 output is 16 floats per plane, not 9
        W.kernel_grad_parts(x, x[..., :3, :3].copy(), du, 1, 1, 2, 2, 4, 4, 1, 1, 2, 2)
    with pytest.raises(TypeError):
        W.kernel_grad_parts_row(x, x, du, 1, 1, 2, 2, 4, 4, 1)
    assert np.all(du == 7.0)
    assert np.all(v == 7.0) and np.all(vr == 7.0) and np.all(dk == 7.0) and np.all(y == 7.0)


def test_large_layers_take_the_path_by_default(monkeypatch):
    """A VGG-like layer: the real thresholds send it here; values match PyTorch."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 64, 16, 16)).astype(np.float32)
    k = rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
    calls = _spy(monkeypatch)
    y = cpu_conv._conv2d(x, k, (1, 1), (1, 1), (1, 1), 1)
    assert calls
    _close(y, _reference("conv2d", x, k, padding=1))


def test_native_isa_scalar_picks_the_baseline_builds():
    """TALLOW_NATIVE_ISA=scalar: the transforms and the convolution passes use their
    portable loops, and the results still match."""
    code = (
        "import numpy as np, tallow as tl\n"
        "from tallow.backends.cpu import conv, winograd\n"
        "x = np.ones((2, 16, 16, 16), np.float32); k = np.ones((16, 16, 3, 3), np.float32)\n"
        "assert winograd.applies(x, k, (1, 1), (1, 1), (1, 1), 1)\n"
        "y = conv._conv2d(x, k, (1, 1), (1, 1), (1, 1), 1)\n"
        "assert y[0, 0, 5, 5] == 144 and y[0, 0, 0, 0] == 64, (y[0, 0, 5, 5], y[0, 0, 0, 0])\n"
        "print(winograd._module().simd(), conv._native(x).simd())\n")
    env = dict(os.environ, TALLOW_NATIVE_ISA="scalar")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
