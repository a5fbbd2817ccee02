"""Optimisers over Vars: SGD and AdamW (PyTorch's update rules, candle-nn's API).

``opt.step(grads)`` updates every variable that has a gradient in ``grads``;
``opt.backward_step(loss)`` runs ``loss.backward()`` first.
"""

from __future__ import annotations

import math

from ..var import Var


def _vars_of(params):
    if hasattr(params, "all_vars"):
        params = params.all_vars()
    elif hasattr(params, "named_buffers"):
        params = [b for _, b in params.named_buffers()]
    out = [p for p in params if isinstance(p, Var)]
    if not out:
        raise ValueError("optimizer: no variables to optimise (use tl.Var or a VarMap)")
    for p in out:
        if not p.dtype.is_float:
            raise ValueError(f"optimizer: variable of dtype {p.dtype} is not a float tensor")
    return out


class Optimizer:
    def __init__(self, params, lr: float):
        self.vars = _vars_of(params)
        self.lr = float(lr)

    def learning_rate(self) -> float:
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        self.lr = float(lr)

    def step(self, grads) -> None:
        raise NotImplementedError

    def backward_step(self, loss) -> None:
        self.step(loss.backward())

    def add_var(self, var: Var) -> None:
        self.vars.extend(_vars_of([var]))


class SGD(Optimizer):
    """``theta -= lr * g`` (with optional momentum and weight decay, as torch.optim.SGD)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.dampening = float(dampening)
        self.nesterov = bool(nesterov)
        self._buf = {}

    def step(self, grads) -> None:
        for v in self.vars:
            g = grads.get(v)
            if g is None:
                continue
            theta = v.detach()
            if self.weight_decay:
                g = g + theta * self.weight_decay
            if self.momentum:
                buf = self._buf.get(v.id)
                buf = g if buf is None else buf * self.momentum + g * (1.0 - self.dampening)
                self._buf[v.id] = buf
                g = g + buf * self.momentum if self.nesterov else buf
            v.set(theta - g * self.lr)


class AdamW(Optimizer):
    """AdamW (decoupled weight decay), PyTorch's defaults: lr 1e-3, betas (0.9, 0.999),
    eps 1e-8, weight_decay 0.01."""

    def __init__(self, params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, betas=None):
        super().__init__(params, lr)
        if betas is not None:
            beta1, beta2 = betas
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.t = 0  # calls to step()
        self._steps = {}  # per variable: the updates it had (its bias correction)
        self._m = {}
        self._v = {}

    def step(self, grads) -> None:
        self.t += 1
        b1, b2, lr = self.beta1, self.beta2, self.lr
        for v in self.vars:
            g = grads.get(v)
            if g is None:
                continue
            # torch.optim.AdamW counts steps per parameter: a variable without a gradient
            # on the first steps starts its bias correction at 1 when it gets one.
            t = self._steps[v.id] = self._steps.get(v.id, 0) + 1
            bc1 = 1.0 - b1 ** t
            bc2_sqrt = math.sqrt(1.0 - b2 ** t)
            m = self._m.get(v.id)
            s = self._v.get(v.id)
            m = g * (1.0 - b1) if m is None else m * b1 + g * (1.0 - b1)
            s = g.sqr() * (1.0 - b2) if s is None else s * b2 + g.sqr() * (1.0 - b2)
            self._m[v.id], self._v[v.id] = m, s
            theta = v.detach()
            if self.weight_decay:
                theta = theta * (1.0 - lr * self.weight_decay)
            denom = s.sqrt() * (1.0 / bc2_sqrt) + self.eps
            v.set(theta - (m / denom) * (lr / bc1))
