"""Optimisers over Vars, with torch.optim's update rules: SGD, Adam, AdamW, RMSprop.

``opt.step(grads)`` updates every variable that has a gradient in ``grads`` (the
GradStore ``loss.backward()`` returns); ``opt.backward_step(loss)`` does both.
``opt.step()`` without arguments reads each Var's ``.grad`` (summed by every
``backward()`` since ``opt.zero_grad()``), so PyTorch's loop ``loss.backward();
opt.step(); opt.zero_grad()`` runs as it is.
``params`` is a list (or iterator) of Vars, a module (its ``parameters()``) or a
VarMap; plain tensors among them are frozen and skipped.

The optimiser holds the Var objects themselves. ``Module.to`` / ``type`` and
``load_state_dict`` update those Vars in place, and the optimiser's state (moments,
momentum buffers) follows a Var to its new device or dtype, so training goes on.
If none of the optimiser's Vars receives a gradient (the model's Vars were replaced:
``requires_grad_(True)`` on a reloaded model, a deep copy trained instead of the
original...), ``step`` raises ``OptimizerVariablesError`` instead of silently doing
nothing. State is kept per position in the variable list, so an optimiser pickled or
deep-copied together with its model follows the copies.
"""

from __future__ import annotations

import math

from ..tensor_class import Tensor
from ..var import Var
from ..versions import bump
from .errors import OptimizerVariablesError, UnsupportedOptionError


def _vars_of(params):
    if hasattr(params, "all_vars"):
        params = params.all_vars()
    elif hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    params = list(params)
    if params and isinstance(params[0], dict):
        raise UnsupportedOptionError(
            "optimizer: parameter groups (dicts) are not supported; pass one list of Vars")
    out = [p for p in params if isinstance(p, Var)]
    if not out:
        raise ValueError(
            "optimizer: no variables to optimise: the parameters are plain tensors (a model "
            "loaded from files is frozen; call model.requires_grad_(True) first) or the list "
            "is empty")
    for p in out:
        if not p.dtype.is_float:
            raise ValueError(f"optimizer: variable of dtype {p.dtype} is not a float tensor")
    return out


def _write(t, value):
    """``t``'s buffer (its own: state tensors are copies) set to ``value`` in place, the
    version bumped as ``Var.set`` does."""
    s = t._storage
    s.copy_into_inplace(t._layout, value._storage, value._layout)
    bump(s)


def _update_state(state, name, first, after):
    """``state[name]`` made by ``first()`` on the first step, then set to
    ``after(state[name])`` in place; returns the state tensor."""
    t = state.get(name)
    if t is None:
        t = state[name] = first()
    else:
        _write(t, after(t))
    return t


def _own(value):
    """A state value as the optimiser keeps it: a tensor is copied (its buffer is then
    written in place by later steps), anything else kept as it is."""
    return value.copy() if isinstance(value, Tensor) else value


def _follow(t, v):
    """State tensor ``t`` on ``v``'s device and dtype (after ``model.to(...)``)."""
    if t.device != v.device:
        t = t.to_device(v.device)
    if t.dtype != v.dtype:
        t = t.to_dtype(v.dtype)
    return t


class Optimizer:
    """Base class: ``vars`` (the Vars), ``lr``, ``state`` (one dict per Var, by position)."""

    def __init__(self, params, lr: float):
        if lr < 0:
            raise ValueError(f"optimizer: invalid learning rate {lr}")
        self.vars = _vars_of(params)
        self.lr = float(lr)
        self.state = [dict() for _ in self.vars]

    def learning_rate(self) -> float:
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        self.lr = float(lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear each Var's ``.grad`` (None, or zeros in place with ``set_to_none=False``)."""
        for v in self.vars:
            g = v.grad
            if g is None:
                continue
            if set_to_none:
                v.grad = None
            else:
                g.zero_()

    def backward_step(self, loss) -> None:
        """``self.step(loss.backward())``."""
        self.step(loss.backward())

    def add_var(self, var: Var) -> None:
        new = _vars_of([var])
        self.vars.extend(new)
        self.state.extend(dict() for _ in new)

    def state_dict(self) -> dict:
        """``{"state": {position: {name: tensor or int}}, "param_groups": [hyperparameters]}``
        (PyTorch's layout, one group): save it with the model's state_dict to resume."""
        hyper = {k: v for k, v in self.__dict__.items() if k not in ("vars", "state")}
        hyper["params"] = list(range(len(self.vars)))
        return {"state": {i: dict(st) for i, st in enumerate(self.state) if st},
                "param_groups": [hyper]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` saved, for an optimiser over the same number of
        Vars in the same order (the moments move to each Var's device at the next step)."""
        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.vars):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the saved state is for "
                f"{len(group['params'])} variables, this optimiser has {len(self.vars)}")
        for k, v in group.items():
            if k != "params":
                setattr(self, k, v)
        # Copied, as torch's load_state_dict does: state is updated in place by later
        # steps, which must not write into the caller's tensors.
        self.state = [{k: _own(v) for k, v in state_dict["state"].get(i, {}).items()}
                      for i in range(len(self.vars))]

    def step(self, grads=None) -> None:
        """Update each Var that has a gradient in ``grads`` (a GradStore or a mapping
        taking Vars), or, without ``grads``, in its ``.grad`` (PyTorch's ``step()``).

        A step from ``grads`` also clears the Vars' ``.grad``: candle's loop
        (``opt.step(loss.backward())``) never zeroes it, and the sum would otherwise grow
        by one addition per parameter and step (and outlive a compiled step)."""
        updated = 0
        from_store = grads is not None
        if grads is None:
            by_id = None
            grads = _GradAttributes()
        else:
            by_id = getattr(grads, "get_id", None)  # a GradStore; else a mapping taking Vars
        for i, v in enumerate(self.vars):
            if from_store:
                v.grad = None
            g = by_id(v._id) if by_id is not None else grads.get(v)
            if g is None:
                continue
            state = self.state[i]
            if state:
                for k, t in state.items():
                    if hasattr(t, "device"):
                        state[k] = _follow(t, v)
            gs, vs = g._storage, v._storage
            if gs.bdev is not vs.bdev or gs.dtype is not vs.dtype:
                g = _follow(g, v)
            self._update(v, g.detach() if g._track else g, state)
            updated += 1
        if not updated and not from_store:
            raise OptimizerVariablesError(
                f"{type(self).__name__}.step(): none of its {len(self.vars)} variables has a "
                ".grad: call loss.backward() first (inside a compiled function backward() "
                "leaves .grad alone: pass its GradStore, opt.step(grads), or use "
                "opt.backward_step(loss))")
        if not updated:
            raise OptimizerVariablesError(
                f"{type(self).__name__}.step: none of its {len(self.vars)} variables has a "
                "gradient: the model's parameters are no longer the Vars this optimiser "
                "holds (replaced by requires_grad_, a reload, or a copy?); build the "
                "optimiser again from model.parameters()")

    def _update(self, v: Var, g, state: dict) -> None:
        raise NotImplementedError


class _GradAttributes:
    """The Vars' ``.grad`` as ``step`` reads a mapping."""

    @staticmethod
    def get(v):
        return v.grad


class SGD(Optimizer):
    """``SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False)``,
    torch.optim.SGD's rule: ``g += wd * p``; ``buf = g`` on the first step, then
    ``buf = momentum * buf + (1 - dampening) * g``; ``g = g + momentum * buf`` (Nesterov)
    or ``buf``; ``p -= lr * g``."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0,
                 weight_decay: float = 0.0, dampening: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.dampening = float(dampening)
        self.nesterov = bool(nesterov)

    def _update(self, v, g, state):
        if self.weight_decay:
            g = g + v.detach() * self.weight_decay
        if self.momentum:
            # torch: a clone of the first gradient, then buf.mul_(m).add_(g, 1 - d), in
            # place (a captured step then updates state that outlives it).
            buf = _update_state(state, "momentum_buffer", g.copy,
                                lambda buf: buf * self.momentum + g * (1.0 - self.dampening))
            g = g + buf * self.momentum if self.nesterov else buf
        v._add_scaled(g, -self.lr)  # in place, as torch's p.add_(g, alpha=-lr)


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False)``,
    torch.optim.Adam's rule (``weight_decay`` is added to the gradient; AdamW decouples it).
    Steps are counted per variable, as torch does: one without a gradient is left as it is."""

    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, lr)
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"{type(self).__name__}: invalid betas {betas}")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.amsgrad = bool(amsgrad)

    @property
    def betas(self):
        return (self.beta1, self.beta2)

    @betas.setter
    def betas(self, value):
        self.beta1, self.beta2 = (float(b) for b in value)

    def _update(self, v, g, state):
        b1, b2, lr = self.beta1, self.beta2, self.lr
        theta = v.detach()
        if self.weight_decay:
            if self._decoupled:
                theta = theta * (1.0 - lr * self.weight_decay)
            else:
                g = g + theta * self.weight_decay
        t = state["step"] = state.get("step", 0) + 1
        m, s = state.get("exp_avg"), state.get("exp_avg_sq")
        m = g * (1.0 - b1) if m is None else m * b1 + g * (1.0 - b1)
        s = g.sqr() * (1.0 - b2) if s is None else s * b2 + g.sqr() * (1.0 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, s
        if self.amsgrad:
            prev = state.get("max_exp_avg_sq")
            s = s if prev is None else prev.maximum(s)
            state["max_exp_avg_sq"] = s
        bc1 = 1.0 - b1 ** t
        bc2_sqrt = math.sqrt(1.0 - b2 ** t)
        denom = s.sqrt() * (1.0 / bc2_sqrt) + self.eps
        v.set(theta - (m / denom) * (lr / bc1))


class AdamW(Adam):
    """``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
    amsgrad=False)``: Adam with decoupled weight decay (``p *= 1 - lr * wd`` before the
    update), torch.optim.AdamW's rule. candle-nn's ``beta1=`` / ``beta2=`` are accepted."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, betas=None,
                 amsgrad: bool = False):
        if betas is None:
            betas = (beta1, beta2)
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class RMSprop(Optimizer):
    """``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False)``, torch.optim.RMSprop's rule: ``sq = alpha * sq + (1 - alpha) g^2``;
    ``avg = sqrt(sq - mean_g^2 if centered else sq) + eps``; ``p -= lr * g / avg`` (through
    a momentum buffer ``buf = momentum * buf + g / avg`` when ``momentum > 0``)."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False):
        super().__init__(params, lr)
        self.alpha, self.eps = float(alpha), float(eps)
        self.weight_decay, self.momentum = float(weight_decay), float(momentum)
        self.centered = bool(centered)

    def _update(self, v, g, state):
        a = self.alpha
        theta = v.detach()
        if self.weight_decay:
            g = g + theta * self.weight_decay
        # Each state tensor is made on the first step and written in place after (a
        # captured step then updates state that outlives it, docs/compile.md).
        sq = _update_state(state, "square_avg", lambda: g.sqr() * (1.0 - a),
                           lambda sq: sq * a + g.sqr() * (1.0 - a))
        if self.centered:
            ga = _update_state(state, "grad_avg", lambda: g * (1.0 - a),
                               lambda ga: ga * a + g * (1.0 - a))
            avg = (sq - ga.sqr()).sqrt() + self.eps
        else:
            avg = sq.sqrt() + self.eps
        if self.momentum > 0:
            buf = _update_state(state, "momentum_buffer", lambda: g / avg,
                                lambda buf: buf * self.momentum + g / avg)
            v.set(theta - buf * self.lr)
        else:
            v.set(theta - (g / avg) * self.lr)


from . import lr_scheduler  # noqa: E402  (tl.nn.optim.lr_scheduler, as torch.optim's)
