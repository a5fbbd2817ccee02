"""Learning-rate schedulers against torch.optim.lr_scheduler: the rate (and OneCycleLR's
momentum) after every step."""

from __future__ import annotations

import pytest
import torch

import tallow as tl

S = tl.nn.lr_scheduler


def _pair(make_opt, make_topt):
    return make_opt([tl.Var([1.0])]), make_topt([torch.zeros(1, requires_grad=True)])


def _run(make_ours, make_theirs, steps, opts=None, momentum=None):
    opt, topt = opts or _pair(lambda p: tl.nn.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1))
    ours, theirs = make_ours(opt), make_theirs(topt)
    for _ in range(steps):
        assert ours.get_last_lr()[0] == pytest.approx(theirs.get_last_lr()[0], rel=1e-9, abs=1e-15)
        assert opt.learning_rate() == pytest.approx(topt.param_groups[0]["lr"], rel=1e-9, abs=1e-15)
        if momentum is not None:
            assert momentum(opt) == pytest.approx(momentum(topt), rel=1e-9)
        topt.step()
        theirs.step()
        ours.step()


def test_step_lr():
    _run(lambda o: S.StepLR(o, 3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5), 20)


def test_cosine_annealing_lr():
    _run(lambda o: S.CosineAnnealingLR(o, 10, eta_min=0.001),
         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.001), 35)


@pytest.mark.parametrize("kw", [dict(), dict(start_factor=0.01, end_factor=1.0, total_iters=8),
                                dict(start_factor=1.0, end_factor=0.1, total_iters=4)])
def test_linear_lr(kw):
    _run(lambda o: S.LinearLR(o, **kw), lambda o: torch.optim.lr_scheduler.LinearLR(o, **kw), 15)


ONE_CYCLE = [
    dict(max_lr=0.5, total_steps=20),
    dict(max_lr=0.5, epochs=3, steps_per_epoch=7, pct_start=0.25, anneal_strategy="linear"),
    dict(max_lr=1.0, total_steps=30, three_phase=True, div_factor=10, final_div_factor=100),
    dict(max_lr=0.2, total_steps=12, base_momentum=0.8, max_momentum=0.9),
]


@pytest.mark.parametrize("kw", ONE_CYCLE)
def test_one_cycle_lr_with_sgd_momentum(kw):
    steps = kw.get("total_steps") or kw["epochs"] * kw["steps_per_epoch"]
    opts = _pair(lambda p: tl.nn.SGD(p, lr=0.1, momentum=0.9),
                 lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    _run(lambda o: S.OneCycleLR(o, **kw), lambda o: torch.optim.lr_scheduler.OneCycleLR(o, **kw),
         steps, opts=opts,
         momentum=lambda o: o.momentum if isinstance(o, tl.nn.SGD) else o.param_groups[0]["momentum"])


def test_one_cycle_lr_cycles_adams_beta1_and_stops_at_the_end():
    opts = _pair(lambda p: tl.nn.AdamW(p), lambda p: torch.optim.AdamW(p))
    kw = dict(max_lr=0.01, total_steps=15)
    _run(lambda o: S.OneCycleLR(o, **kw), lambda o: torch.optim.lr_scheduler.OneCycleLR(o, **kw),
         15, opts=opts,
         momentum=lambda o: o.beta1 if isinstance(o, tl.nn.AdamW) else o.param_groups[0]["betas"][0])
    opt = tl.nn.SGD([tl.Var([1.0])], lr=0.1)
    s = S.OneCycleLR(opt, max_lr=0.1, total_steps=3, cycle_momentum=False)
    for _ in range(3):
        s.step()
    with pytest.raises(ValueError):
        s.step()


def test_schedulers_are_reachable_as_in_torch():
    assert tl.nn.optim.lr_scheduler.StepLR is S.StepLR
