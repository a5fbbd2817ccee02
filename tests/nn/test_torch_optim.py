"""Optimisers against torch.optim: the same two-layer model, the same data, ten steps;
the parameters must agree to 1e-6 after each step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tallow as tl

rng = np.random.default_rng(0)
W1 = rng.standard_normal((4, 3)).astype(np.float32) * 0.5
B1 = rng.standard_normal((4,)).astype(np.float32) * 0.1
W2 = rng.standard_normal((2, 4)).astype(np.float32) * 0.5
X = rng.standard_normal((8, 3)).astype(np.float32)
Y = rng.standard_normal((8, 2)).astype(np.float32)


def _loss_torch(p, x, y):
    h = torch.tanh(x @ p[0].T + p[1])
    return ((h @ p[2].T - y) ** 2).mean()


def _loss_ours(p, x, y):
    h = (x.matmul(p[0].t()).broadcast_add(p[1])).tanh()
    return (h.matmul(p[2].t()) - y).sqr().mean_all()


def _compare(make_ours, make_theirs, steps=10, atol=1e-6, device=tl.cpu, sched=None):
    tp = [torch.tensor(a, requires_grad=True) for a in (W1, B1, W2)]
    op = [tl.Var(a, device=device) for a in (W1, B1, W2)]
    topt, opt = make_theirs(tp), make_ours(op)
    x, y = tl.Tensor(X, device=device), tl.Tensor(Y, device=device)
    tx, ty = torch.from_numpy(X), torch.from_numpy(Y)
    for _ in range(steps):
        topt.zero_grad()
        _loss_torch(tp, tx, ty).backward()
        topt.step()
        opt.backward_step(_loss_ours(op, x, y))
        for a, b in zip(op, tp):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=atol, rtol=0)
    # the test is not vacuous: the parameters moved
    assert np.abs(op[0].numpy() - W1).max() > 1e-3


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, dampening=0.3),
    dict(lr=0.1, momentum=0.9, nesterov=True),
    dict(lr=0.1, momentum=0.5, weight_decay=0.05),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_sgd(kw):
    _compare(lambda p: tl.nn.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))


ADAM_CASES = [
    dict(lr=0.05),
    dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.05, weight_decay=0.1),
    dict(lr=0.05, amsgrad=True),
]


@pytest.mark.parametrize("kw", ADAM_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_adam(kw):
    _compare(lambda p: tl.nn.Adam(p, **kw), lambda p: torch.optim.Adam(p, **kw))


@pytest.mark.parametrize("kw", ADAM_CASES + [dict(lr=0.05, weight_decay=0.5, amsgrad=True)],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_adamw(kw):
    _compare(lambda p: tl.nn.AdamW(p, **kw), lambda p: torch.optim.AdamW(p, **kw))


RMS_CASES = [
    dict(lr=0.01),
    dict(lr=0.01, alpha=0.9, eps=1e-6),
    dict(lr=0.01, centered=True),
    dict(lr=0.01, momentum=0.9),
    dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.1),
]


@pytest.mark.parametrize("kw", RMS_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_rmsprop(kw):
    _compare(lambda p: tl.nn.RMSprop(p, **kw), lambda p: torch.optim.RMSprop(p, **kw))


@pytest.mark.gpu
def test_adam_and_rmsprop_on_the_gpu(gpu):
    _compare(lambda p: tl.nn.Adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05),
             device=gpu, atol=2e-6)
    _compare(lambda p: tl.nn.RMSprop(p, momentum=0.9, centered=True),
             lambda p: torch.optim.RMSprop(p, momentum=0.9, centered=True), device=gpu, atol=2e-6)


def test_defaults_are_torchs():
    v = [tl.Var([1.0])]
    tv = [torch.zeros(1, requires_grad=True)]
    for ours, theirs, names in (
            (tl.nn.SGD(v), torch.optim.SGD(tv), ("lr", "momentum", "dampening", "weight_decay",
                                                   "nesterov")),
            (tl.nn.Adam(v), torch.optim.Adam(tv), ("lr", "betas", "eps", "weight_decay", "amsgrad")),
            (tl.nn.AdamW(v), torch.optim.AdamW(tv), ("lr", "betas", "eps", "weight_decay",
                                                       "amsgrad")),
            (tl.nn.RMSprop(v), torch.optim.RMSprop(tv), ("lr", "alpha", "eps", "weight_decay",
                                                           "momentum", "centered"))):
        for n in names:
            assert getattr(ours, n) == theirs.defaults[n], (type(ours).__name__, n)


def test_clip_grad_norm_matches_torch():
    for norm_type in (2.0, 1.0, 3.0, float("inf")):
        for max_norm in (0.05, 100.0):
            tp = [torch.tensor(a, requires_grad=True) for a in (W1, B1, W2)]
            op = [tl.Var(a) for a in (W1, B1, W2)]
            _loss_torch(tp, torch.from_numpy(X), torch.from_numpy(Y)).backward()
            grads = _loss_ours(op, tl.Tensor(X), tl.Tensor(Y)).backward()
            tn = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type)
            n = tl.nn.clip_grad_norm_(grads, max_norm, norm_type)
            assert abs(float(n.item()) - float(tn)) < 1e-5 * max(1.0, float(tn))
            for a, b in zip(op, tp):
                np.testing.assert_allclose(grads[a].numpy(), b.grad.numpy(), atol=1e-6)


def test_clip_grad_norm_limited_to_parameters_and_value_clipping():
    op = [tl.Var(a) for a in (W1, B1, W2)]
    grads = _loss_ours(op, tl.Tensor(X), tl.Tensor(Y)).backward()
    before = grads[op[2]].numpy().copy()
    tl.nn.clip_grad_norm_(grads, 1e-3, parameters=op[:2])
    np.testing.assert_array_equal(grads[op[2]].numpy(), before)  # not among the parameters
    total = np.sqrt(sum((grads[p].numpy() ** 2).sum() for p in op[:2]))
    assert abs(total - 1e-3) < 1e-6
    tl.nn.clip_grad_value_(grads, 0.01)
    assert np.abs(grads[op[2]].numpy()).max() <= 0.01
    with pytest.raises(TypeError, match="PyTorch's form"):
        tl.nn.clip_grad_norm_(op, 1.0, parameters=op)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_on_parameters_grad_matches_torch(norm_type):
    """PyTorch's form: the parameters' .grad is clipped (and clip_grad_value_ too)."""
    tp = [torch.tensor(a, requires_grad=True) for a in (W1, B1, W2)]
    op = [tl.Var(a) for a in (W1, B1, W2)]
    _loss_torch(tp, torch.from_numpy(X), torch.from_numpy(Y)).backward()
    _loss_ours(op, tl.Tensor(X), tl.Tensor(Y)).backward()
    tn = torch.nn.utils.clip_grad_norm_(iter(tp), 0.05, norm_type)
    n = tl.nn.utils.clip_grad_norm_(iter(op), 0.05, norm_type)
    assert abs(float(n.item()) - float(tn)) < 1e-5 * max(1.0, float(tn))
    for a, b in zip(op, tp):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-7)
    torch.nn.utils.clip_grad_value_(tp, 0.004)
    tl.nn.utils.clip_grad_value_(op, 0.004)
    for a, b in zip(op, tp):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=1e-7)


def test_param_groups_with_their_own_settings():
    """PyTorch's per-group options (tests/nn/test_param_groups.py has the rest)."""
    _compare(lambda p: tl.nn.SGD([{"params": p[:2], "lr": 0.3}, {"params": p[2:]}],
                                 lr=0.05, momentum=0.9),
             lambda p: torch.optim.SGD([{"params": p[:2], "lr": 0.3}, {"params": p[2:]}],
                                       lr=0.05, momentum=0.9))
