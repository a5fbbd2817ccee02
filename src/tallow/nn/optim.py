"""Optimisers over Vars, with torch.optim's update rules: SGD, Adam, AdamW, RMSprop.

``opt.step(grads)`` updates every variable that has a gradient in ``grads`` (the
GradStore ``loss.backward()`` returns); ``opt.backward_step(loss)`` does both.
``opt.step()`` without arguments reads each Var's ``.grad`` (summed by every
``backward()`` since ``opt.zero_grad()``), so PyTorch's loop ``loss.backward();
opt.step(); opt.zero_grad()`` runs as it is.
``params`` is a list (or iterator) of Vars, a module (its ``parameters()``) or a
VarMap; plain tensors among them are frozen and skipped. As in PyTorch it may also be a
list of parameter groups, ``[{"params": a, "lr": 0.1}, {"params": b}]``: each group's
settings (``opt.param_groups``) override the constructor's for its Vars.

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
    elif isinstance(params, Tensor):
        params = [params]
    params = list(params)
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


def _groups_of(params) -> list:
    """``params`` as a list of group dicts, each with ``"params"`` a list of Vars: one
    group for a list of Vars (or a module, a VarMap), or the caller's dicts (PyTorch's
    per-group options, ``[{"params": a, "lr": 0.1}, {"params": b}]``)."""
    if isinstance(params, dict):
        params = [params]
    elif not hasattr(params, "all_vars") and not (
            hasattr(params, "parameters") and callable(params.parameters)):
        params = list(params) if not isinstance(params, Tensor) else [params]
    if isinstance(params, list) and params and isinstance(params[0], dict):
        if not all(isinstance(g, dict) for g in params):
            raise TypeError("optimizer: mix of parameter-group dicts and tensors; pass a list "
                            "of dicts, each with a 'params' entry, or one list of tensors")
        return [dict(g) for g in params]
    return [{"params": params}]


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


def _loaded_state(name, value):
    """One entry of a saved per-variable state, as this optimiser keeps it. PyTorch saves
    Adam's ``step`` as a one-element tensor: it is read back as the int it counts."""
    if name == "step" and isinstance(value, Tensor):
        return int(value.numpy().reshape(-1)[0])
    return _own(value)


def _follow(t, v):
    """State tensor ``t`` on ``v``'s device and dtype (after ``model.to(...)``)."""
    if t.device != v.device:
        t = t.to_device(v.device)
    if t.dtype != v.dtype:
        t = t.to_dtype(v.dtype)
    return t


class Optimizer:
    """Base class, PyTorch's layout: ``param_groups`` (a list of dicts, each with
    ``"params"`` (its Vars) and its hyperparameters: ``"lr"``, ``"weight_decay"``...),
    ``defaults`` (the constructor's hyperparameters, for groups that do not set one),
    ``state`` (one dict per Var, by position over all groups) and ``vars`` (all the
    Vars, in that order).

    Schedulers and user code change a group's settings by writing its dict
    (``for g in opt.param_groups: g["lr"] = x``). candle's ``learning_rate()`` reads the
    first group's rate and ``set_learning_rate(lr)`` sets every group's; the attributes
    ``opt.lr``, ``opt.momentum``, ``opt.beta1``... read the first group and set them all.
    """

    def __init__(self, params, defaults: dict):
        if defaults.get("lr", 0.0) < 0:
            raise ValueError(f"optimizer: invalid learning rate {defaults['lr']}")
        object.__setattr__(self, "defaults", dict(defaults))
        object.__setattr__(self, "param_groups", [])
        self.state = []
        for group in _groups_of(params):
            self.add_param_group(group)

    # -- groups and the attributes that stand for the first group's settings --------

    @property
    def vars(self) -> list:
        return [v for g in self.param_groups for v in g["params"]]

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (``{"params": vars, "lr": ...}``; settings it leaves out take the
        constructor's values), as PyTorch's ``add_param_group``."""
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError("add_param_group: pass a dict with a 'params' entry, "
                            "{'params': model.parameters(), 'lr': 0.01}")
        group = dict(param_group)
        group["params"] = _vars_of(group["params"])
        ids = {id(v) for v in self.vars}
        if any(id(v) in ids for v in group["params"]):
            raise ValueError("add_param_group: some parameters appear in more than one "
                             "group; give each Var to one group only")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        self.param_groups.append(group)
        self.state.extend(dict() for _ in group["params"])

    def _check_group(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"optimizer: invalid learning rate {group['lr']}")

    def _group_value(self, name):
        if name in ("beta1", "beta2") and "betas" in self.defaults:
            return self.param_groups[0]["betas"][name == "beta2"]
        return self.param_groups[0][name]

    def __getattr__(self, name):
        # Only reached for names that are not attributes: a group setting read as one.
        if name in ("param_groups", "defaults") or name.startswith("__"):
            raise AttributeError(name)
        defaults = self.__dict__.get("defaults", {})
        if name in defaults or (name in ("beta1", "beta2") and "betas" in defaults):
            return self._group_value(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        defaults = self.__dict__.get("defaults", {})
        if name in ("beta1", "beta2") and "betas" in defaults:
            i = int(name == "beta2")
            for g in self.param_groups:
                betas = list(g["betas"])
                betas[i] = float(value)
                g["betas"] = tuple(betas)
        elif name in defaults:
            for g in self.param_groups:
                g[name] = value
        else:
            object.__setattr__(self, name, value)

    def learning_rate(self) -> float:
        return self.param_groups[0]["lr"]

    def set_learning_rate(self, lr: float) -> None:
        for g in self.param_groups:
            g["lr"] = float(lr)

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
        """Add a Var to the last group (candle-nn's ``add_var``)."""
        new = [v for v in _vars_of([var]) if all(v is not w for w in self.vars)]
        self.param_groups[-1]["params"].extend(new)
        # State is kept by position over all groups: insert after the last group's Vars.
        self.state.extend(dict() for _ in new)

    # -- state dicts ---------------------------------------------------------------

    def state_dict(self) -> dict:
        """PyTorch's layout: ``{"state": {position: {name: tensor or int}},
        "param_groups": [{settings..., "params": [positions]}]}``; save it with the
        model's state_dict to resume."""
        groups, i = [], 0
        for g in self.param_groups:
            saved = {k: v for k, v in g.items() if k != "params"}
            saved["params"] = list(range(i, i + len(g["params"])))
            i += len(g["params"])
            groups.append(saved)
        return {"state": {i: dict(st) for i, st in enumerate(self.state) if st},
                "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` saved (this optimiser's, or a PyTorch optimiser's
        read by ``tl.load``), for an optimiser whose groups hold as many Vars, in the
        same order; the moments move to each Var's device at the next step."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the saved state has {len(saved)} "
                f"parameter groups, this optimiser has {len(self.param_groups)}")
        for n, (s, g) in enumerate(zip(saved, self.param_groups)):
            if len(s["params"]) != len(g["params"]):
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: group {n} of the saved state "
                    f"is for {len(s['params'])} variables, this optimiser's has "
                    f"{len(g['params'])}")
        if any(s.get("maximize") for s in saved):
            raise UnsupportedOptionError(
                f"{type(self).__name__}.load_state_dict: maximize=True is not supported; "
                "minimise the negated loss instead")
        positions = [p for s in saved for p in s["params"]]
        for s, g in zip(saved, self.param_groups):
            for k, v in s.items():
                if k != "params":
                    g[k] = tuple(v) if k == "betas" else v
        # Copied, as torch's load_state_dict does: state is updated in place by later
        # steps, which must not write into the caller's tensors.
        saved_state = state_dict["state"]
        self.state = [
            {k: _loaded_state(k, v) for k, v in
             (saved_state.get(p) or saved_state.get(str(p)) or {}).items() if v is not None}
            for p in positions]

    # -- the step --------------------------------------------------------------------

    def step(self, grads=None) -> None:
        """Update each Var that has a gradient in ``grads`` (a GradStore or a mapping
        taking Vars), or, without ``grads``, in its ``.grad`` (PyTorch's ``step()``),
        with the settings of its group.

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
        i = -1
        for group in self.param_groups:
            for v in group["params"]:
                i += 1
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
                self._update(v, g.detach() if g._track else g, state, group)
                updated += 1
        if not updated and not from_store:
            raise OptimizerVariablesError(
                f"{type(self).__name__}.step(): none of its {i + 1} variables has a "
                ".grad: call loss.backward() before opt.step() (inside a compiled function "
                "backward() leaves .grad alone: pass its GradStore, opt.step(grads), or use "
                "opt.backward_step(loss))")
        if not updated:
            raise OptimizerVariablesError(
                f"{type(self).__name__}.step: none of its {i + 1} variables has a "
                "gradient: the model's parameters are no longer the Vars this optimiser "
                "holds (replaced by requires_grad_, a reload, or a copy?); build the "
                "optimiser again from model.parameters()")

    def _update(self, v: Var, g, state: dict, group: dict) -> None:
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
        super().__init__(params, dict(lr=float(lr), momentum=float(momentum),
                                      dampening=float(dampening),
                                      weight_decay=float(weight_decay),
                                      nesterov=bool(nesterov)))

    def _check_group(self, group):
        super()._check_group(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")

    def _update(self, v, g, state, group):
        momentum, lr = group["momentum"], group["lr"]
        if group["weight_decay"]:
            g = g + v.detach() * group["weight_decay"]
        if momentum:
            # torch: a clone of the first gradient, then buf.mul_(m).add_(g, 1 - d), in
            # place (a captured step then updates state that outlives it).
            damp = 1.0 - group["dampening"]
            buf = _update_state(state, "momentum_buffer", g.copy,
                                lambda buf: buf * momentum + g * damp)
            g = g + buf * momentum if group["nesterov"] else buf
        v._add_scaled(g, -lr)  # in place, as torch's p.add_(g, alpha=-lr)


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False)``,
    torch.optim.Adam's rule (``weight_decay`` is added to the gradient; AdamW decouples it).
    Steps are counted per variable, as torch does: one without a gradient is left as it is."""

    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, dict(lr=float(lr), betas=tuple(float(b) for b in betas),
                                      eps=float(eps), weight_decay=float(weight_decay),
                                      amsgrad=bool(amsgrad)))

    def _check_group(self, group):
        super()._check_group(group)
        beta1, beta2 = group["betas"]
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"{type(self).__name__}: invalid betas {group['betas']}")

    def _update(self, v, g, state, group):
        (b1, b2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        theta = v.detach()
        if wd:
            if self._decoupled:
                theta = theta * (1.0 - lr * wd)
            else:
                g = g + theta * wd
        t = state["step"] = state.get("step", 0) + 1
        m, s = state.get("exp_avg"), state.get("exp_avg_sq")
        m = g * (1.0 - b1) if m is None else m * b1 + g * (1.0 - b1)
        s = g.sqr() * (1.0 - b2) if s is None else s * b2 + g.sqr() * (1.0 - b2)
        state["exp_avg"], state["exp_avg_sq"] = m, s
        if group["amsgrad"]:
            prev = state.get("max_exp_avg_sq")
            s = s if prev is None else prev.maximum(s)
            state["max_exp_avg_sq"] = s
        bc1 = 1.0 - b1 ** t
        bc2_sqrt = math.sqrt(1.0 - b2 ** t)
        denom = s.sqrt() * (1.0 / bc2_sqrt) + group["eps"]
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
        super().__init__(params, dict(lr=float(lr), alpha=float(alpha), eps=float(eps),
                                      weight_decay=float(weight_decay),
                                      momentum=float(momentum), centered=bool(centered)))

    def _update(self, v, g, state, group):
        a, eps, lr, momentum = group["alpha"], group["eps"], group["lr"], group["momentum"]
        theta = v.detach()
        if group["weight_decay"]:
            g = g + theta * group["weight_decay"]
        # Each state tensor is made on the first step and written in place after (a
        # captured step then updates state that outlives it, docs/compile.md).
        sq = _update_state(state, "square_avg", lambda: g.sqr() * (1.0 - a),
                           lambda sq: sq * a + g.sqr() * (1.0 - a))
        if group["centered"]:
            ga = _update_state(state, "grad_avg", lambda: g * (1.0 - a),
                               lambda ga: ga * a + g * (1.0 - a))
            avg = (sq - ga.sqr()).sqrt() + eps
        else:
            avg = sq.sqrt() + eps
        if momentum > 0:
            buf = _update_state(state, "momentum_buffer", lambda: g / avg,
                                lambda buf: buf * momentum + g / avg)
            v.set(theta - buf * lr)
        else:
            v.set(theta - (g / avg) * lr)


from . import lr_scheduler  # noqa: E402  (tl.nn.optim.lr_scheduler, as torch.optim's)
