"""The CPU backward kernels of convolutions and pooling (im2col kernel gradient,
compiled and NumPy max-pool routing, avg-pool spreading) against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tallow as tl
from tallow.backends.cpu import conv as cpu_conv


@pytest.fixture(params=["native", "numba", "numpy"])
def pool_path(request, monkeypatch):
    if request.param != "native":
        monkeypatch.setattr(cpu_conv, "_CONV", lambda: None)  # as if not built
    if request.param == "numpy":
        monkeypatch.setattr(cpu_conv, "_compiled", lambda: None)  # the NumPy path
    return request.param


def _grads(f_tl, f_torch, x, k=None, need_x=True, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    tx = tl.Var(x) if need_x else tl.Tensor(x)
    args = [tx] + ([tl.Var(k)] if k is not None else [])
    out = f_tl(*args)
    w = rng.standard_normal(out.shape).astype(x.dtype)
    grads = (out * tl.Tensor(w)).sum_all().backward()
    px = torch.tensor(x, dtype=torch.float64, requires_grad=need_x)
    pargs = [px] + ([torch.tensor(k, dtype=torch.float64, requires_grad=True)] if k is not None else [])
    ref = f_torch(*pargs)
    (ref * torch.from_numpy(w.astype(np.float64))).sum().backward()
    got = [grads.get(a) for a in args]
    want = [p.grad for p in pargs]
    return got, want


@pytest.mark.parametrize("b,c,co,ks,stride,pad,groups", [
    (1, 3, 8, 3, 1, 1, 1), (4, 16, 32, 3, 2, 1, 1), (2, 8, 16, 1, 1, 0, 1),
    (3, 8, 8, 1, 2, 0, 1), (2, 6, 9, 3, 1, 0, 3), (5, 4, 4, 3, 2, 1, 4),
])
@pytest.mark.parametrize("need_x", [True, False])
def test_conv2d_kernel_gradient_matches_torch(b, c, co, ks, stride, pad, groups, need_x):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((b, c, 11, 10)).astype(np.float32)
    k = rng.standard_normal((co, c // groups, ks, ks)).astype(np.float32)
    got, want = _grads(lambda a, w: a.conv2d(w, padding=pad, stride=stride, groups=groups),
                       lambda a, w: F.conv2d(a, w, padding=pad, stride=stride, groups=groups),
                       x, k, need_x=need_x)
    if need_x:
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-4, atol=1e-4)
    else:
        assert got[0] is None  # a plain input gets no gradient (and none is computed)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-4, atol=1e-4)


def test_conv1d_and_transposed_kernel_gradients_use_the_same_kernel():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 13)).astype(np.float32)
    k = rng.standard_normal((6, 2, 3)).astype(np.float32)
    got, want = _grads(lambda a, w: a.conv1d(w, padding=1, stride=2, dilation=2, groups=2),
                       lambda a, w: F.conv1d(a, w, padding=1, stride=2, dilation=2, groups=2), x, k)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-4)
    x2 = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    k2 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got, want = _grads(lambda a, w: a.conv_transpose2d(w, padding=1, stride=2, output_padding=1),
                       lambda a, w: F.conv_transpose2d(a, w, padding=1, stride=2, output_padding=1),
                       x2, k2)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 2), (3, 1), ((2, 3), (1, 2))])
def test_pool_gradients_match_torch(kernel, stride, pool_path):
    x = np.random.default_rng(3).standard_normal((3, 5, 12, 11)).astype(np.float32)
    for name in ("max_pool2d", "avg_pool2d"):
        got, want = _grads(lambda a: getattr(a, name)(kernel, stride),
                           lambda a: getattr(F, name)(a, kernel, stride), x)
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-6)


def test_max_pool_gradient_ties_and_nans_go_where_torch_sends_them(pool_path):
    # Small integers make ties common; a NaN is the window's maximum in PyTorch.
    x = np.random.default_rng(4).integers(0, 3, (2, 3, 8, 8)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[1, 2, 4, 5] = np.nan
    x[1, 2, 5, 5] = np.nan
    for kernel, stride in ((2, 2), (3, 1)):
        tx = tl.Var(x)
        g = tx.max_pool2d(kernel, stride).sum_all().backward().get(tx)
        px = torch.tensor(x, requires_grad=True)
        F.max_pool2d(px, kernel, stride).sum().backward()
        np.testing.assert_array_equal(g.numpy(), px.grad.numpy())


def test_half_precision_pool_and_conv_gradients_follow_f32():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for dtype in (tl.f16, tl.bf16):
        tx, tk = tl.Var(x, dtype=dtype), tl.Var(k, dtype=dtype)
        out = tx.conv2d(tk, padding=1).max_pool2d(2).avg_pool2d(2)
        grads = out.sum_all().backward()
        assert grads.get(tk).dtype == dtype
        px, pk = torch.tensor(x, requires_grad=True), torch.tensor(k, requires_grad=True)
        F.avg_pool2d(F.max_pool2d(F.conv2d(px, pk, padding=1), 2), 2).sum().backward()
        np.testing.assert_allclose(grads.get(tk).to_dtype(tl.f32).numpy(), pk.grad.numpy(),
                                   rtol=0.05, atol=0.1)
