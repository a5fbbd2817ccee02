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


TS = torch.optim.lr_scheduler

# (ours, theirs) built on an optimiser with two parameter groups; each runs 50 steps.
SCHEDULES = {
    "LambdaLR": lambda m, o: m.LambdaLR(o, [lambda e: 0.95 ** e, lambda e: 1 / (1 + e)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.97),
    "StepLR": lambda m, o: m.StepLR(o, 7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, [5, 12, 12, 30], gamma=0.3),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=9),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.05, total_iters=20),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, 0.93),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, 17, eta_min=1e-4),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.01, total_iters=10), m.CosineAnnealingLR(o, 40)],
        milestones=[10]),
    "SequentialLR3": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, 0.5, total_iters=4), m.ExponentialLR(o, 0.9),
            m.StepLR(o, 5, 0.5)], milestones=[6, 20]),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.05], total_steps=51),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(
        o, 6, T_mult=2, eta_min=0.001),
}


def _two_groups(lib, params):
    kw = dict(lr=0.1, momentum=0.9)
    groups = [{"params": params[:1]}, {"params": params[1:], "lr": 0.02}]
    return (tl.nn.SGD if lib is S else torch.optim.SGD)(groups, **kw)


def _pair_of_two_groups():
    ours = _two_groups(S, [tl.Var([1.0]), tl.Var([2.0])])
    theirs = _two_groups(TS, [torch.zeros(1, requires_grad=True),
                              torch.zeros(1, requires_grad=True)])
    return ours, theirs


def _assert_same_rates(opt, topt, ours, theirs):
    assert len(ours.get_last_lr()) == 2
    for a, b in zip(ours.get_last_lr(), theirs.get_last_lr()):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    for g, tg in zip(opt.param_groups, topt.param_groups):
        assert g["lr"] == pytest.approx(tg["lr"], rel=1e-12, abs=1e-15)
        assert g["momentum"] == pytest.approx(tg["momentum"], rel=1e-12)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_fifty_steps_on_two_param_groups_match_torch(name):
    opt, topt = _pair_of_two_groups()
    ours, theirs = SCHEDULES[name](S, opt), SCHEDULES[name](TS, topt)
    rates = set()
    for _ in range(50):
        _assert_same_rates(opt, topt, ours, theirs)
        rates.add(round(opt.param_groups[0]["lr"], 12))
        topt.step()
        theirs.step()
        ours.step()
    _assert_same_rates(opt, topt, ours, theirs)
    assert len(rates) > 1  # the schedule moved the rate


@pytest.mark.parametrize("name", ["MultiStepLR", "CosineAnnealingLR", "SequentialLR",
                                  "OneCycleLR", "CosineAnnealingWarmRestarts", "LambdaLR"])
def test_state_dict_resumes_the_schedule(name):
    """20 steps, save, a new optimiser and scheduler load both: the next 30 rates are
    PyTorch's."""
    opt, topt = _pair_of_two_groups()
    ours, theirs = SCHEDULES[name](S, opt), SCHEDULES[name](TS, topt)
    for _ in range(20):
        topt.step()
        theirs.step()
        ours.step()
    saved_opt, saved = opt.state_dict(), ours.state_dict()
    opt2, _ = _pair_of_two_groups()
    ours2 = SCHEDULES[name](S, opt2)
    opt2.load_state_dict(saved_opt)
    ours2.load_state_dict(saved)
    assert ours2.last_epoch == theirs.last_epoch
    for _ in range(30):
        _assert_same_rates(opt2, topt, ours2, theirs)
        topt.step()
        theirs.step()
        ours2.step()


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", threshold_mode="abs", threshold=0.1),
                                dict(patience=2, cooldown=3, factor=0.5, min_lr=[0.01, 0.005])])
def test_reduce_lr_on_plateau_matches_torch(kw):
    opt, topt = _pair_of_two_groups()
    ours, theirs = S.ReduceLROnPlateau(opt, **kw), TS.ReduceLROnPlateau(topt, **kw)
    metrics = [1.0 / (1 + i) if i < 10 else 0.1 + 0.001 * (i % 3) for i in range(50)]
    if kw.get("mode") == "max":
        metrics = [-m for m in metrics]
    for m in metrics:
        topt.step()
        theirs.step(m)
        ours.step(tl.Tensor(m) if m > 0.5 else m)  # a metric tensor, as torch users pass
        _assert_same_rates(opt, topt, ours, theirs)
    assert opt.param_groups[0]["lr"] < 0.1
    with pytest.raises(TypeError, match="metric"):
        ours.step()


def test_schedulers_are_under_tl_optim():
    for name in ["LambdaLR", "MultiStepLR", "ExponentialLR", "ReduceLROnPlateau",
                 "SequentialLR", "ConstantLR", "CosineAnnealingWarmRestarts"]:
        assert getattr(tl.optim.lr_scheduler, name) is getattr(S, name)
