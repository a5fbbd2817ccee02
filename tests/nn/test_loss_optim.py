"""Losses and optimisers against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tallow as tl
from tallow.nn import loss

RNG = np.random.default_rng(3)


def close(a, b, atol=1e-6, rtol=1e-5):
    a = a.numpy() if isinstance(a, tl.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol)


def test_cross_entropy_and_nll_values_and_grads():
    x = (RNG.standard_normal((6, 5)) * 3).astype(np.float32)
    y = np.array([0, 4, 2, 2, 1, 3], np.uint32)
    v = tl.Var(x)
    ce = loss.cross_entropy(v, tl.Tensor(y))
    g = ce.backward()[v]
    tx = torch.from_numpy(x).requires_grad_()
    tce = F.cross_entropy(tx, torch.from_numpy(y.astype(np.int64)))
    tce.backward()
    close(ce, tce, atol=1e-5)
    close(g, tx.grad, atol=1e-6)
    lp = torch.log_softmax(torch.from_numpy(x), 1)
    close(loss.nll(tl.Tensor(lp.numpy()), tl.Tensor(y)),
          F.nll_loss(lp, torch.from_numpy(y.astype(np.int64))), atol=1e-5)
    with pytest.raises(tl.ShapeMismatchError):
        loss.nll(tl.Tensor(x), tl.Tensor(y[:3]))
    with pytest.raises(tl.UnsupportedDTypeError):
        loss.nll(tl.Tensor(x), tl.Tensor(y.astype(np.float32)))


def test_mse_and_bce_with_logits():
    x = (RNG.standard_normal((4, 3)) * 5).astype(np.float32)
    t = RNG.uniform(0, 1, (4, 3)).astype(np.float32)
    for ours, theirs in ((loss.mse, F.mse_loss),
                         (loss.binary_cross_entropy_with_logit, F.binary_cross_entropy_with_logits)):
        v = tl.Var(x)
        val = ours(v, tl.Tensor(t))
        g = val.backward()[v]
        tx = torch.from_numpy(x).requires_grad_()
        tv = theirs(tx, torch.from_numpy(t))
        tv.backward()
        close(val, tv, atol=1e-5)
        close(g, tx.grad, atol=1e-6)
    # large logits stay finite
    big = tl.Tensor(np.array([[80.0, -80.0]], np.float32))
    val = loss.binary_cross_entropy_with_logit(big, tl.Tensor(np.array([[0.0, 1.0]], np.float32)))
    close(val, F.binary_cross_entropy_with_logits(torch.tensor([[80.0, -80.0]]),
                                                  torch.tensor([[0.0, 1.0]])), rtol=1e-6)


def _train(make_opt, make_topt, steps=10, device=tl.cpu):
    """Both frameworks minimise the same small regression; returns (ours, theirs)."""
    w0 = RNG.standard_normal((3, 4)).astype(np.float32)
    b0 = RNG.standard_normal((3,)).astype(np.float32)
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    y = RNG.standard_normal((8, 3)).astype(np.float32)
    w, b = tl.Var(w0, device=device), tl.Var(b0, device=device)
    opt = make_opt([w, b])
    tw, tb = torch.from_numpy(w0.copy()).requires_grad_(), torch.from_numpy(b0.copy()).requires_grad_()
    topt = make_topt([tw, tb])
    xt, yt = tl.Tensor(x, device=device), tl.Tensor(y, device=device)
    for _ in range(steps):
        opt.backward_step(loss.mse(tl.nn.linear(xt, w, b).tanh(), yt))
        topt.zero_grad()
        F.mse_loss(torch.tanh(F.linear(torch.from_numpy(x), tw, tb)), torch.from_numpy(y)).backward()
        topt.step()
    return (w, b), (tw, tb)


def test_sgd_matches_torch():
    ours, theirs = _train(lambda p: tl.nn.SGD(p, lr=0.3), lambda p: torch.optim.SGD(p, lr=0.3))
    for a, b in zip(ours, theirs):
        close(a, b, atol=1e-6)
    ours, theirs = _train(lambda p: tl.nn.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                          lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01))
    for a, b in zip(ours, theirs):
        close(a, b, atol=1e-6)


@pytest.mark.parametrize("wd", [0.0, 0.01, 0.1])
def test_adamw_matches_torch_over_10_steps(wd, device):
    ours, theirs = _train(lambda p: tl.nn.AdamW(p, lr=0.05, weight_decay=wd),
                          lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=wd), device=device)
    for a, b in zip(ours, theirs):
        close(a, b, atol=1e-6, rtol=0)


def test_adamw_defaults_and_learning_rate():
    opt = tl.nn.AdamW([tl.Var([1.0])])
    assert (opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay) == (1e-3, 0.9, 0.999, 1e-8, 0.01)
    opt.set_learning_rate(0.5)
    assert opt.learning_rate() == 0.5
    with pytest.raises(ValueError):
        tl.nn.SGD([tl.Tensor([1.0])], lr=0.1)  # no Var to optimise


def test_adamw_counts_steps_per_variable_like_torch():
    """A variable that gets no gradient on the first steps (a head trained later) starts
    its own bias correction at step 1, as torch.optim.AdamW keeps one step per parameter."""
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((3,)), rng.standard_normal((3,))
    x = rng.standard_normal((3,)).astype(np.float32)
    ta = torch.tensor(a0, dtype=torch.float32, requires_grad=True)
    tb = torch.tensor(b0, dtype=torch.float32, requires_grad=True)
    topt = torch.optim.AdamW([ta, tb], lr=0.1, weight_decay=0.1)
    a, b = tl.Var(a0.astype(np.float32)), tl.Var(b0.astype(np.float32))
    opt = tl.nn.AdamW([a, b], lr=0.1, weight_decay=0.1)
    for step in range(6):
        both = step >= 3
        topt.zero_grad()
        tloss = (ta * torch.tensor(x)).sin().sum() + ((tb * tb).sum() if both else 0)
        tloss.backward()
        topt.step()
        ours = (a * tl.Tensor(x)).sin().sum_all()
        opt.backward_step(ours + (b * b).sum_all() if both else ours)
    close(a, ta, atol=1e-6, rtol=0)
    close(b, tb, atol=1e-6, rtol=0)
