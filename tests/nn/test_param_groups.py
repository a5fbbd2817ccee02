"""Optimiser parameter groups, state dicts and gradient accumulation against torch.optim:
per-group settings, groups edited by user code and by schedulers, ``add_param_group``,
``state_dict`` round trips (ours and PyTorch's, read by ``tl.load``), and four
micro-batches accumulated into ``.grad`` (or added as GradStores) against one batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tallow as tl

rng = np.random.default_rng(1)
INIT = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((4, 3), (4,), (2, 4))]
X = rng.standard_normal((8, 3)).astype(np.float32)
Y = rng.standard_normal((8, 2)).astype(np.float32)


def _loss_torch(p, x, y):
    h = torch.tanh(x @ p[0].T + p[1])
    return ((h @ p[2].T - y) ** 2).mean()


def _loss_ours(p, x, y):
    h = x.matmul(p[0].t()).broadcast_add(p[1]).tanh()
    return (h.matmul(p[2].t()) - y).sqr().mean_all()


def _params():
    return ([tl.Var(a.copy()) for a in INIT],
            [torch.tensor(a.copy(), requires_grad=True) for a in INIT])


def _torch_step(topt, tp, x=X, y=Y):
    topt.zero_grad()
    _loss_torch(tp, torch.from_numpy(x), torch.from_numpy(y)).backward()
    topt.step()


def _our_step(opt, op, x=X, y=Y):
    opt.zero_grad()
    _loss_ours(op, tl.Tensor(x), tl.Tensor(y)).backward()
    opt.step()


def _close(op, tp, atol=1e-6):
    for a, b in zip(op, tp):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=atol, rtol=0)


GROUPS = [
    ("SGD", dict(lr=0.05, momentum=0.9), [dict(lr=0.2, weight_decay=0.1), dict()]),
    ("Adam", dict(lr=0.01), [dict(betas=(0.8, 0.99)), dict(lr=0.05, weight_decay=0.1)]),
    ("AdamW", dict(lr=0.01), [dict(weight_decay=0.0), dict(lr=0.03, amsgrad=True)]),
    ("RMSprop", dict(lr=0.01), [dict(momentum=0.5), dict(centered=True, alpha=0.9)]),
]


@pytest.mark.parametrize("name,kw,groups", GROUPS, ids=[g[0] for g in GROUPS])
def test_per_group_settings_match_torch(name, kw, groups):
    op, tp = _params()
    split = lambda p: [{"params": p[:2], **groups[0]}, {"params": p[2:], **groups[1]}]
    opt = getattr(tl.nn, name)(split(op), **kw)
    topt = getattr(torch.optim, name)(split(tp), **kw)
    for step in range(8):
        if step == 4:  # user code changes one group's rate, as PyTorch users do
            opt.param_groups[1]["lr"] *= 0.5
            topt.param_groups[1]["lr"] *= 0.5
        _torch_step(topt, tp)
        _our_step(opt, op)
        _close(op, tp)
    assert np.abs(op[0].numpy() - INIT[0]).max() > 1e-3
    for ours, theirs in zip(opt.param_groups, topt.param_groups):
        for k, v in ours.items():
            if k != "params":
                assert v == pytest.approx(theirs[k]), k


def test_groups_fill_defaults_and_attributes_stand_for_the_first_group():
    op, _ = _params()
    opt = tl.nn.AdamW([{"params": op[:1], "lr": 0.1}, {"params": op[1:]}], lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    assert opt.param_groups[1]["weight_decay"] == 0.01
    assert opt.lr == 0.1 and opt.learning_rate() == 0.1 and opt.beta1 == 0.9
    assert [id(v) for v in opt.vars] == [id(v) for v in op]
    opt.set_learning_rate(0.5)  # candle's call sets every group
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]
    opt.beta1 = 0.8
    assert all(g["betas"] == (0.8, 0.999) for g in opt.param_groups)


def test_add_param_group_matches_torch():
    op, tp = _params()
    opt = tl.nn.SGD(op[:2], lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tp[:2], lr=0.1, momentum=0.9)
    for _ in range(2):
        _torch_step(topt, tp)
        _our_step(opt, op)
    opt.add_param_group({"params": op[2:], "lr": 0.01})
    topt.add_param_group({"params": tp[2:], "lr": 0.01})
    assert opt.param_groups[1]["momentum"] == 0.9
    for _ in range(3):
        _torch_step(topt, tp)
        _our_step(opt, op)
        _close(op, tp)
    with pytest.raises(ValueError, match="more than one group"):
        opt.add_param_group({"params": op[:1]})
    with pytest.raises(TypeError, match="'params'"):
        opt.add_param_group(op[:1])


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)),
                                     ("AdamW", dict(lr=0.02)),
                                     ("RMSprop", dict(lr=0.01, centered=True))])
def test_state_dict_round_trip_with_two_groups(name, kw):
    op, tp = _params()
    cls, tcls = getattr(tl.nn, name), getattr(torch.optim, name)
    opt = cls([{"params": op[:2]}, {"params": op[2:], "lr": 0.05}], **kw)
    topt = tcls([{"params": tp[:2]}, {"params": tp[2:], "lr": 0.05}], **kw)
    for _ in range(3):
        _torch_step(topt, tp)
        _our_step(opt, op)
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == [0, 1, 2]
    fresh = cls([{"params": op[:2]}, {"params": op[2:]}], lr=1.0)
    fresh.load_state_dict(sd)
    assert [g["lr"] for g in fresh.param_groups] == [kw["lr"], 0.05]
    for _ in range(3):
        _torch_step(topt, tp)
        _our_step(fresh, op)
        _close(op, tp)
    with pytest.raises(ValueError, match="parameter groups"):
        cls(op, lr=1.0).load_state_dict(sd)


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9)),
                                     ("Adam", dict(lr=0.02, weight_decay=0.01)),
                                     ("AdamW", dict(lr=0.02))])
def test_loads_a_pytorch_optimizer_state_dict_saved_by_torch_save(tmp_path, name, kw):
    """Three steps in PyTorch, ``torch.save(opt.state_dict())``, ``tl.load``: three more
    steps in tallow land where six steps of PyTorch do."""
    op, tp = _params()
    tcls = getattr(torch.optim, name)
    topt = tcls([{"params": tp[:2]}, {"params": tp[2:], "lr": 0.05}], **kw)
    for _ in range(3):
        _torch_step(topt, tp)
    path = tmp_path / "opt.pt"
    torch.save(topt.state_dict(), path)
    for ours, theirs in zip(op, tp):
        ours.set(tl.Tensor(theirs.detach().numpy().copy()))
    opt = getattr(tl.nn, name)([{"params": op[:2]}, {"params": op[2:]}], lr=1.0)
    opt.load_state_dict(tl.load(path))
    assert [g["lr"] for g in opt.param_groups] == [kw["lr"], 0.05]
    for _ in range(3):
        _torch_step(topt, tp)
        _our_step(opt, op)
        _close(op, tp, atol=2e-6)


def _micro_batches():
    return [(X[i:i + 2], Y[i:i + 2]) for i in range(0, 8, 2)]


def test_grad_accumulates_over_four_micro_batches_like_one_batch():
    op, tp = _params()
    opt = tl.nn.SGD(op, lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tp, lr=0.1, momentum=0.9)
    for _ in range(3):
        _torch_step(topt, tp)  # one batch of 8
        for x, y in _micro_batches():  # four of 2, each loss scaled by 1/4
            (_loss_ours(op, tl.Tensor(x), tl.Tensor(y)) * 0.25).backward()
        opt.step()
        opt.zero_grad()
        _close(op, tp)
    assert np.abs(op[0].numpy() - INIT[0]).max() > 1e-3


def test_grad_stores_add_up_to_one_batch():
    op, _ = _params()
    stores = [(_loss_ours(op, tl.Tensor(x), tl.Tensor(y)) * 0.25).backward()
              for x, y in _micro_batches()]
    total = stores[0] + stores[1] + stores[2] + stores[3]
    whole = _loss_ours(op, tl.Tensor(X), tl.Tensor(Y)).backward()
    for p in op:
        np.testing.assert_allclose(total[p].numpy(), whole[p].numpy(), atol=1e-6)
    running = stores[0] + stores[1]  # the operands are left as they were
    running += stores[2]
    np.testing.assert_allclose((running + stores[3])[op[0]].numpy(), whole[op[0]].numpy(),
                               atol=1e-6)
    np.testing.assert_allclose((stores[0] + stores[1])[op[0]].numpy(),
                               stores[0][op[0]].numpy() + stores[1][op[0]].numpy(), atol=1e-7)
    opt = tl.nn.SGD(op, lr=0.1)
    opt.step(total)
    assert np.abs(op[0].numpy() - INIT[0]).max() > 1e-4


def test_step_before_backward_says_to_call_backward():
    op, _ = _params()
    opt = tl.optim.Adam(op)
    with pytest.raises(tl.nn.OptimizerVariablesError, match=r"loss.backward\(\) before"):
        opt.step()
