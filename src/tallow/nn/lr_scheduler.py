"""Learning-rate schedulers with torch.optim.lr_scheduler's rules: LambdaLR,
MultiplicativeLR, StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR,
CosineAnnealingLR, SequentialLR, ReduceLROnPlateau, OneCycleLR and
CosineAnnealingWarmRestarts.

As in PyTorch, each scheduler acts on every parameter group of the optimiser
(``optimizer.param_groups[i]["lr"]``): building one sets the rate for step 0 (and
records each group's ``initial_lr``, the ``base_lrs``), and each ``scheduler.step()``
(after ``optimizer.step()``) moves to the next. The rates follow PyTorch's chainable
forms, which start from each group's current rate: two schedulers on one optimiser
compose, and a rate changed by user code carries on from there. ``get_last_lr()``
returns one rate per group; ``state_dict()`` / ``load_state_dict()`` save and restore
a scheduler's position (not its functions: LambdaLR's lambdas stay the ones it was
built with).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter

from .errors import UnsupportedOptionError


def _per_group(name, optimizer, value) -> list:
    """``value`` once per parameter group (a list or tuple must have one per group)."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"{name}: {len(value)} values for {len(optimizer.param_groups)} "
                             "parameter groups; give one per group, or a single value")
        return list(value)
    return [value] * len(optimizer.param_groups)


class LRScheduler:
    """Base class: ``optimizer``, ``base_lrs`` (each group's ``initial_lr``),
    ``last_epoch`` (steps taken); subclasses define ``get_lr`` (the next rates, from
    the groups' current ones) and may define ``_closed_form_lr`` (the rates at
    ``last_epoch`` from ``base_lrs``, used when SequentialLR restarts a scheduler)."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if last_epoch != -1:
            raise UnsupportedOptionError(
                f"{type(self).__name__}: last_epoch is not supported; to resume, build the "
                "scheduler as before and call scheduler.load_state_dict(saved)")
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an "
                            "optimizer (pass the tl.optim optimizer whose rate it schedules)")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def _lrs(self) -> list:
        return [g["lr"] for g in self.optimizer.param_groups]

    def get_lr(self) -> list:
        raise NotImplementedError

    def step(self) -> None:
        """Advance one step and set every group's learning rate."""
        self._step_count += 1
        self._update_lr()

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = self._lrs()

    def get_last_lr(self) -> list:
        """The rate of each parameter group set by the last step."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Everything but the optimiser (and any functions), to resume with
        ``load_state_dict``."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("optimizer", "lr_lambdas", "_schedulers")}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update({k: v for k, v in state.items() if k != "_schedulers"})


class LambdaLR(LRScheduler):
    """``LambdaLR(optimizer, lr_lambda)``: ``base_lr * lr_lambda(epoch)`` (one function,
    or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group("LambdaLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(LRScheduler):
    """``MultiplicativeLR(optimizer, lr_lambda)``: each step multiplies the rate by
    ``lr_lambda(epoch)``."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group("MultiplicativeLR", optimizer, lr_lambda)
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"MultiplicativeLR: lr_lambda must be a function, got "
                                f"{type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._lrs()
        return [g["lr"] * f(self.last_epoch)
                for f, g in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """``StepLR(optimizer, step_size, gamma=0.1)``: ``base * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``MultiStepLR(optimizer, milestones, gamma=0.1)``: the rate times ``gamma`` at each
    milestone."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(int(m) for m in milestones)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._lrs()]

    def _closed_form_lr(self):
        ms = sorted(self.milestones.elements())
        return [b * self.gamma ** bisect_right(ms, self.last_epoch) for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """``ConstantLR(optimizer, factor=1/3, total_iters=5)``: ``base * factor`` for the
    first ``total_iters`` steps, then ``base``."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = float(factor), int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _closed_form_lr(self):
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for b in self.base_lrs]


class LinearLR(LRScheduler):
    """``LinearLR(optimizer, start_factor=1/3, end_factor=1.0, total_iters=5)``: the rate
    goes linearly from ``base * start_factor`` to ``base * end_factor`` over
    ``total_iters`` steps, then stays (a warm-up)."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1], end_factor in [0, 1]")
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        d = self.end_factor - self.start_factor
        ratio = 1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d)
        return [lr * ratio for lr in self._lrs()]

    def _closed_form_lr(self):
        t = min(self.total_iters, self.last_epoch)
        return [b * (self.start_factor + (self.end_factor - self.start_factor) * t
                     / self.total_iters) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``ExponentialLR(optimizer, gamma)``: the rate times ``gamma`` each step."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _closed_form_lr(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``CosineAnnealingLR(optimizer, T_max, eta_min=0)``:
    ``eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2`` (continuing as a
    cosine past ``T_max``, as PyTorch's)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._lrs()
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / t)) / 2 for b in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            return [lr + (b - lo) * (1 - math.cos(math.pi / t)) / 2
                    for b, lr in zip(self.base_lrs, self._lrs())]
        ratio = (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
        return [ratio * (lr - lo) + lo for lr in self._lrs()]

    def _closed_form_lr(self):
        lo = self.eta_min
        return [lo + (b - lo) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for b in self.base_lrs]


class SequentialLR(LRScheduler):
    """``SequentialLR(optimizer, schedulers, milestones)``: ``schedulers[i]`` runs from
    ``milestones[i - 1]`` on, restarted from its step 0 there; warm-up then decay is
    ``SequentialLR(opt, [LinearLR(opt, 0.01, total_iters=w), CosineAnnealingLR(opt, n - w)],
    milestones=[w])``."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if last_epoch != -1:
            raise UnsupportedOptionError(
                "SequentialLR: last_epoch is not supported; use load_state_dict to resume")
        if not schedulers:
            raise ValueError("SequentialLR: give at least one scheduler")
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR: scheduler {i} is a ReduceLROnPlateau, which "
                                 "needs the metric at each step; step it on its own")
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} ({type(s).__name__}) belongs "
                                 "to another optimizer; build every scheduler on this one")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need "
                             f"{len(schedulers) - 1} milestones, got {len(milestones)}")
        self._schedulers = list(schedulers)
        self._milestones = [int(m) for m in milestones]
        self.last_epoch = 0
        self.optimizer = optimizer
        # Undo what building the schedulers did: the rates back to their initial
        # values, each scheduler one step back; the first starts again.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        for s in self._schedulers:
            _undo_step(s)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for s, saved in zip(self._schedulers, state["_schedulers"]):
            s.load_state_dict(saved)


def _undo_step(scheduler) -> None:
    inner = getattr(scheduler, "_schedulers", None)
    if inner is not None:
        for s in inner:
            _undo_step(s)
    else:
        scheduler.last_epoch -= 1


class ReduceLROnPlateau(LRScheduler):
    """``ReduceLROnPlateau(optimizer, mode='min', factor=0.1, patience=10, threshold=1e-4,
    threshold_mode='rel', cooldown=0, min_lr=0, eps=1e-8)``: ``step(metric)`` multiplies
    every group's rate by ``factor`` (not below ``min_lr``) once the metric has not
    improved for more than ``patience`` steps."""

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0.0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1, got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        self.optimizer = optimizer
        self.factor = float(factor)
        self.min_lrs = _per_group("ReduceLROnPlateau min_lr", optimizer, min_lr)
        self.patience, self.cooldown, self.eps = int(patience), int(cooldown), float(eps)
        self.mode, self.threshold, self.threshold_mode = mode, float(threshold), threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.last_epoch = 0
        self._last_lr = self._lrs()
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def _is_better(self, a, best) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                        else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel"
                    else best + self.threshold)

    def step(self, metrics=None) -> None:
        """Record this step's metric (a number or a one-element tensor: the validation
        loss) and lower the rates on a plateau."""
        if metrics is None:
            raise TypeError("ReduceLROnPlateau.step: pass the metric it watches, "
                            "scheduler.step(val_loss)")
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = self._lrs()


class CosineAnnealingWarmRestarts(LRScheduler):
    """``CosineAnnealingWarmRestarts(optimizer, T_0, T_mult=1, eta_min=0)``: a cosine from
    ``base`` down to ``eta_min`` over ``T_0`` steps, restarted at ``base``, each cycle
    ``T_mult`` times longer than the last."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int, got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_mult must be an int >= 1, "
                             f"got {T_mult}")
        self.T_0 = self.T_i = T_0
        self.T_mult, self.eta_min = T_mult, float(eta_min)
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lo = self.eta_min
        return [lo + (b - lo) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for b in self.base_lrs]

    def step(self) -> None:
        self._step_count += 1
        if self.last_epoch < 0:
            epoch, self.T_cur, self.T_i = 0, 0, self.T_0
        else:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        self.last_epoch = epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = self._lrs()


def _anneal_cos(start, end, pct):
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _anneal_linear(start, end, pct):
    return (end - start) * pct + start


class OneCycleLR(LRScheduler):
    """``OneCycleLR(optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
    pct_start=0.3, anneal_strategy='cos', cycle_momentum=True, base_momentum=0.85,
    max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False)``.

    PyTorch's 1cycle policy, per group (``max_lr`` and the momenta may be one per
    group): from ``max_lr / div_factor`` up to ``max_lr`` over ``pct_start`` of the
    steps, then down to ``initial / final_div_factor``; with ``cycle_momentum`` the
    momentum (SGD's ``momentum``, Adam's ``betas[0]``) moves the opposite way between
    ``max_momentum`` and ``base_momentum``. Stepping past ``total_steps`` raises
    ``ValueError``, as PyTorch does.
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = int(epochs) * int(steps_per_epoch)
        if total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be positive, got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        self.total_steps = t = int(total_steps)
        self.anneal_strategy = anneal_strategy
        if three_phase:
            self._phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * t) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (t - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (t - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        for group, top in zip(optimizer.param_groups, _per_group("OneCycleLR max_lr",
                                                                 optimizer, max_lr)):
            group["initial_lr"] = top / div_factor
            group["max_lr"] = top
            group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            defaults = getattr(optimizer, "defaults", {})
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError("OneCycleLR: the optimiser has no momentum to cycle "
                                 "(pass cycle_momentum=False)")
            self.use_beta1 = "betas" in defaults
            for group, hi, lo in zip(
                    optimizer.param_groups,
                    _per_group("OneCycleLR max_momentum", optimizer, max_momentum),
                    _per_group("OneCycleLR base_momentum", optimizer, base_momentum)):
                self._set_momentum(group, hi)
                group["max_momentum"], group["base_momentum"] = hi, lo
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def get_lr(self):
        anneal = _anneal_cos if self.anneal_strategy == "cos" else _anneal_linear
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; total_steps is "
                             f"{self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(anneal(group[lr0], group[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, anneal(group[m0], group[m1], pct))
                    break
                start = end
        return lrs
