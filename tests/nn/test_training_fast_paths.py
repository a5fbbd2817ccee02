"""The training step's one-op paths against PyTorch: Linear on Vars (one recorded
op), cross entropy over class ids (loss and gradient in one backend pass),
log_softmax and the reduced nll as single ops, SGD's in-place update, and the
equal-shape binary operators. Values and gradients come from torch; the version
counters must still catch a graph made stale by an update."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tallow as tl
from tallow.errors import IndexOutOfRangeError, StaleGraphError

rng = np.random.default_rng(11)


def _names(t):
    return [n.op.name for n in t.sorted_nodes() if n.op is not None]


# -- Linear ------------------------------------------------------------------------------

@pytest.mark.parametrize("x_tracked", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_on_vars_is_one_op_with_torch_gradients(x_tracked, with_bias, device):
    x_np = rng.standard_normal((5, 7)).astype(np.float32)
    w_np = rng.standard_normal((3, 7)).astype(np.float32)
    b_np = rng.standard_normal(3).astype(np.float32)
    r_np = rng.standard_normal((5, 3)).astype(np.float32)
    x = (tl.Var if x_tracked else tl.Tensor)(x_np, device=device)
    w = tl.Var(w_np, device=device)
    b = tl.Var(b_np, device=device) if with_bias else None
    tx = torch.tensor(x_np, requires_grad=x_tracked)
    tw = torch.tensor(w_np, requires_grad=True)
    tb = torch.tensor(b_np, requires_grad=True) if with_bias else None
    y = tl.nn.linear(x, w, b)
    ty = TF.linear(tx, tw, tb)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    (ty * torch.from_numpy(r_np)).sum().backward()
    grads = (y * tl.Tensor(r_np, device=device)).sum_all().backward()
    np.testing.assert_allclose(grads[w].numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    if with_bias:
        np.testing.assert_allclose(grads[b].numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-5)
    if x_tracked:
        np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    else:
        assert grads.get(x) is None
    if device.kind == "cpu":
        assert "linear" in _names(y)  # one node, not transpose + matmul + broadcast + add


def test_linear_refuses_mixed_dtypes_before_work():
    x = tl.Var(np.ones((2, 3), np.float32))
    w = tl.Var(np.ones((4, 3), np.float64))
    with pytest.raises(tl.errors.DTypeMismatchError):
        tl.nn.linear(x, w)


# -- cross entropy -------------------------------------------------------------------------

def _ce_case(target_np, torch_target, ignore_index=-100, reduction="mean", dtype=np.float32,
             rtol=1e-5):
    x_np = (rng.standard_normal((9, 6)) * 3).astype(dtype)
    tx = torch.tensor(x_np, requires_grad=True)
    x = tl.Var(x_np)
    y = tl.nn.loss.cross_entropy(x, tl.Tensor(target_np), ignore_index=ignore_index,
                                 reduction=reduction)
    ty = TF.cross_entropy(tx, torch_target, ignore_index=ignore_index, reduction=reduction)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=rtol)
    ty.backward()
    g = y.backward()[x]
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=rtol, atol=rtol)
    return y


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ids_dtype", [np.int64, np.uint32, np.uint8])
def test_cross_entropy_ids_dtypes_one_op(reduction, ids_dtype):
    t = np.array([0, 5, 2, 2, 1, 3, 4, 0, 5])
    y = _ce_case(t.astype(ids_dtype), torch.from_numpy(t), reduction=reduction)
    assert _names(y) == ["cross_entropy"]


def test_cross_entropy_ignore_index_that_is_a_class():
    t = np.array([0, 5, 2, 2, 1, 3, 4, 0, 2])
    _ce_case(t, torch.from_numpy(t), ignore_index=2)


def test_cross_entropy_all_ignored_mean_is_nan_like_torch():
    t = np.full(9, -100)
    x = tl.Var(rng.standard_normal((9, 6)).astype(np.float32))
    y = tl.nn.loss.cross_entropy(x, tl.Tensor(t))
    ty = TF.cross_entropy(torch.tensor(x.numpy()), torch.from_numpy(t))
    assert np.isnan(y.item()) and torch.isnan(ty)


def test_cross_entropy_f64():
    t = np.array([0, 5, 2, 2, 1, 3, 4, 0, 5])
    _ce_case(t, torch.from_numpy(t), dtype=np.float64, rtol=1e-12)


def test_cross_entropy_untracked_value_matches_tracked():
    x_np = rng.standard_normal((4, 3)).astype(np.float32)
    t = tl.Tensor(np.array([2, 0, 1, 1]))
    a = tl.nn.loss.cross_entropy(tl.Tensor(x_np), t)
    b = tl.nn.loss.cross_entropy(tl.Var(x_np), t)
    assert not a.track_op()
    assert a.item() == b.item()


def test_cross_entropy_out_of_range_id_raises():
    x = tl.Var(np.zeros((3, 4), np.float32))
    with pytest.raises(IndexOutOfRangeError):
        tl.nn.loss.cross_entropy(x, tl.Tensor(np.array([0, 4, 1])))


def test_cross_entropy_stale_logits_are_caught():
    x = tl.Var(rng.standard_normal((3, 4)).astype(np.float32))
    y = tl.nn.loss.cross_entropy(x, tl.Tensor(np.array([0, 3, 1])))
    x.set(tl.Tensor(np.zeros((3, 4), np.float32)))
    with pytest.raises(StaleGraphError):
        y.backward()


# -- log_softmax and nll on their own ------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_one_op_gradient(dim):
    x_np = rng.standard_normal((4, 5)).astype(np.float32)
    r_np = rng.standard_normal((4, 5)).astype(np.float32)
    tx = torch.tensor(x_np, requires_grad=True)
    x = tl.Var(x_np)
    y = tl.nn.ops.log_softmax(x, dim)
    ty = torch.log_softmax(tx, dim)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    (ty * torch.from_numpy(r_np)).sum().backward()
    g = (y * tl.Tensor(r_np)).sum_all().backward()[x]
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert _names(y) == ["log_softmax"]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_weighted_ignored_one_op(reduction):
    logp_np = np.log(rng.dirichlet(np.ones(5), size=6)).astype(np.float32)
    t = np.array([0, -100, 2, 4, 1, 2])
    w_np = np.array([0.5, 1.0, 2.0, 1.5, 0.25], np.float32)
    tx = torch.tensor(logp_np, requires_grad=True)
    x = tl.Var(logp_np)
    y = tl.nn.loss.nll(x, tl.Tensor(t), weight=tl.Tensor(w_np), reduction=reduction)
    ty = TF.nll_loss(tx, torch.from_numpy(t), weight=torch.from_numpy(w_np), reduction=reduction)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    ty.backward()
    np.testing.assert_allclose(y.backward()[x].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert _names(y) == ["nll"]


# -- SGD's in-place update --------------------------------------------------------------------

@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.01)])
def test_sgd_updates_in_place_like_torch(momentum, wd, device):
    w_np = rng.standard_normal((4, 3)).astype(np.float32)
    x_np = rng.standard_normal((5, 3)).astype(np.float32)
    w = tl.Var(w_np, device=device)
    storage = w._storage
    tw = torch.tensor(w_np, requires_grad=True)
    opt = tl.nn.optim.SGD([w], lr=0.1, momentum=momentum, weight_decay=wd)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=momentum, weight_decay=wd)
    x, tx = tl.Tensor(x_np, device=device), torch.from_numpy(x_np)
    for _ in range(3):
        opt.backward_step(x.matmul(w.t()).sqr().sum_all())
        topt.zero_grad()
        (tx @ tw.t()).square().sum().backward()
        topt.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert w._storage is storage  # the same buffer, written in place


def test_sgd_step_makes_older_graphs_stale():
    w = tl.Var(np.ones((2, 2), np.float32))
    opt = tl.nn.optim.SGD([w], lr=0.1)
    old = (w * w).sum_all()
    opt.backward_step((w * 3.0).sum_all())
    with pytest.raises(StaleGraphError):
        old.backward()


def test_sgd_f16_var_uses_the_composed_update():
    w = tl.Var(np.array([1.0, 2.0], np.float16))
    opt = tl.nn.optim.SGD([w], lr=0.5)
    opt.backward_step((w * w).sum_all())  # grad 2w: w - 0.5 * 2w = 0
    np.testing.assert_array_equal(w.numpy(), np.zeros(2, np.float16))


# -- equal-shape binary operators -------------------------------------------------------------

@pytest.mark.parametrize("op", ["+", "-", "*"])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64])
def test_operators_on_views_and_wrapping_dtypes(op, dtype):
    a_np = rng.integers(0, 200, (6, 4)).astype(dtype)
    b_np = rng.integers(0, 200, (6, 4)).astype(dtype)
    a, b = tl.Tensor(a_np), tl.Tensor(b_np)
    f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f(a, b).numpy(), f(a_np, b_np))
        # A contiguous view at an offset, a transposed one, and size-1 dims.
        np.testing.assert_array_equal(f(a.narrow(0, 2, 3), b.narrow(0, 1, 3)).numpy(),
                                      f(a_np[2:5], b_np[1:4]))
        np.testing.assert_array_equal(f(a.t(), b.t()).numpy(), f(a_np.T, b_np.T))
        np.testing.assert_array_equal(f(a.narrow(0, 3, 1), b.narrow(0, 5, 1)).numpy(),
                                      f(a_np[3:4], b_np[5:6]))
        chained = f(f(a.narrow(0, 2, 3), b.narrow(0, 1, 3)), a.narrow(0, 0, 3))
        np.testing.assert_array_equal(chained.numpy(), f(f(a_np[2:5], b_np[1:4]), a_np[0:3]))


def test_operator_mismatch_is_refused_before_work():
    # Two dtypes promote as torch (f32 + f64 is f64); candle's broadcast_add refuses them.
    assert (tl.Tensor(np.ones(3, np.float32)) + tl.Tensor(np.ones(3, np.float64))).dtype == tl.f64
    with pytest.raises(tl.errors.DTypeMismatchError):
        tl.Tensor(np.ones(3, np.float32)).broadcast_add(tl.Tensor(np.ones(3, np.float64)))
    with pytest.raises(tl.errors.ShapeMismatchError):
        tl.Tensor(np.ones(3, np.float32)) + tl.Tensor(np.ones(4, np.float32))


def test_operator_on_var_records_and_checks_versions():
    v = tl.Var(np.array([1.0, 2.0], np.float32))
    t = tl.Tensor(np.array([3.0, 4.0], np.float32))
    y = v * t + v
    assert y.track_op() and not (t + t).track_op()
    np.testing.assert_allclose(y.backward()[v].numpy(), [4.0, 5.0])
    v.set(tl.Tensor(np.array([0.0, 0.0], np.float32)))
    with pytest.raises(StaleGraphError):
        y.backward()
