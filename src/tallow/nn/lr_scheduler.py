"""Learning-rate schedulers with torch.optim.lr_scheduler's formulas: StepLR,
CosineAnnealingLR, LinearLR (warm-up) and OneCycleLR.

As in PyTorch, building a scheduler sets the optimiser's learning rate for step 0,
and each ``scheduler.step()`` (after ``optimizer.step``) moves to the next one;
``get_last_lr()`` returns ``[lr]``. The rates are computed in closed form from the
optimiser's initial rate (``base_lrs``), so they do not drift.
"""

from __future__ import annotations

import math

from .errors import UnsupportedOptionError


class LRScheduler:
    """Base class: ``optimizer``, ``base_lrs``, ``last_epoch``; subclasses define ``lr_at``."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if last_epoch != -1:
            raise UnsupportedOptionError("lr_scheduler: resuming with last_epoch is not supported")
        self.optimizer = optimizer
        self.base_lrs = [optimizer.learning_rate()]
        self.last_epoch = -1
        self.step()

    def lr_at(self, epoch: int, base_lr: float) -> float:
        raise NotImplementedError

    def step(self) -> None:
        """Advance one step and set the optimiser's learning rate."""
        self.last_epoch += 1
        lr = self.lr_at(self.last_epoch, self.base_lrs[0])
        self.optimizer.set_learning_rate(lr)
        self._last_lr = [lr]

    def get_last_lr(self) -> list:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """``StepLR(optimizer, step_size, gamma=0.1)``: ``base * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch, base_lr):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """``CosineAnnealingLR(optimizer, T_max, eta_min=0)``:
    ``eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2``."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch, base_lr):
        return self.eta_min + (base_lr - self.eta_min) * (
            1 + math.cos(math.pi * epoch / self.T_max)) / 2


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

    def lr_at(self, epoch, base_lr):
        t = min(epoch, self.total_iters)
        return base_lr * (self.start_factor
                          + (self.end_factor - self.start_factor) * t / self.total_iters)


def _anneal_cos(start, end, pct):
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _anneal_linear(start, end, pct):
    return (end - start) * pct + start


class OneCycleLR(LRScheduler):
    """``OneCycleLR(optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
    pct_start=0.3, anneal_strategy='cos', cycle_momentum=True, base_momentum=0.85,
    max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False)``.

    PyTorch's 1cycle policy: from ``max_lr / div_factor`` up to ``max_lr`` over
    ``pct_start`` of the steps, then down to ``initial / final_div_factor``; with
    ``cycle_momentum`` the momentum (SGD's ``momentum``, Adam's ``beta1``) moves the
    opposite way between ``max_momentum`` and ``base_momentum``. Stepping past
    ``total_steps`` raises ``ValueError``, as PyTorch does.
    """

    def __init__(self, optimizer, max_lr: float, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = int(epochs) * int(steps_per_epoch)
        if total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be positive, got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps = int(total_steps)
        self._anneal = _anneal_cos if anneal_strategy == "cos" else _anneal_linear
        initial = float(max_lr) / div_factor
        min_lr = initial / final_div_factor
        t = self.total_steps
        if three_phase:
            self._phases = [
                (float(pct_start * t) - 1, initial, max_lr, max_momentum, base_momentum),
                (float(2 * pct_start * t) - 2, max_lr, initial, base_momentum, max_momentum),
                (t - 1, initial, min_lr, max_momentum, max_momentum),
            ]
        else:
            self._phases = [
                (float(pct_start * t) - 1, initial, max_lr, max_momentum, base_momentum),
                (t - 1, max_lr, min_lr, base_momentum, max_momentum),
            ]
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            if hasattr(optimizer, "beta1"):
                self._momentum_attr = "beta1"
            elif hasattr(optimizer, "momentum"):
                self._momentum_attr = "momentum"
            else:
                raise ValueError("OneCycleLR: the optimiser has no momentum to cycle "
                                 "(pass cycle_momentum=False)")
        optimizer.set_learning_rate(initial)
        super().__init__(optimizer, last_epoch)

    def _at(self, step):
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; total_steps is "
                             f"{self.total_steps}")
        start = 0.0
        for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
            if step <= end or i == len(self._phases) - 1:
                pct = (step - start) / (end - start)
                return self._anneal(lr0, lr1, pct), self._anneal(m0, m1, pct)
            start = end
        raise AssertionError("unreachable")

    def lr_at(self, epoch, base_lr):
        return self._at(epoch)[0]

    def step(self) -> None:
        super().step()
        if self.cycle_momentum:
            setattr(self.optimizer, self._momentum_attr, self._at(self.last_epoch)[1])
