"""Gradient clipping (torch.nn.utils's ``clip_grad_norm_`` / ``clip_grad_value_``).

Two forms: PyTorch's, ``clip_grad_norm_(model.parameters(), 1.0)``, clips each
parameter's ``.grad`` (what ``loss.backward()`` accumulated there); candle's,
``clip_grad_norm_(grads, 1.0, parameters=...)``, takes the GradStore that
``loss.backward()`` returns and replaces its gradients with the clipped ones.
"""

from __future__ import annotations

import math

from ..backprop import GradStore
from ..errors import TallowError
from ..tensor_class import Tensor


class _GradAttributes:
    """Parameters' ``.grad`` seen as a GradStore (PyTorch's form of the clipping calls)."""

    def __init__(self, op, params):
        self.params = [params] if isinstance(params, Tensor) else list(params)
        for p in self.params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{op}: pass model.parameters() (tensors whose .grad is clipped) or the "
                    f"GradStore loss.backward() returns; got a {type(p).__name__} among them")

    def items(self):
        return [(p, p.grad) for p in self.params if p.grad is not None]

    @staticmethod
    def insert(p, g):
        p.grad = g


def _pairs(op, grads, parameters):
    if not isinstance(grads, GradStore):
        if parameters is not None:
            raise TypeError(
                f"{op}: parameters= goes with a GradStore (candle's form, "
                f"{op}(grads, 1.0, parameters=...)); PyTorch's form takes the parameters "
                f"first, {op}(model.parameters(), 1.0)")
        return grads.items()
    if parameters is None:
        # The store also holds gradients of plain inputs a Var was combined with: only
        # the variables' count, as only parameters are clipped in PyTorch.
        return [(t, g) for t, g in grads.items() if t.is_variable()]
    return [(p, grads.get(p)) for p in parameters if grads.get(p) is not None]


def clip_grad_norm_(grads, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, parameters=None):
    """Scale the gradients so that their total ``norm_type`` norm is at most ``max_norm``
    (by ``max_norm / (total + 1e-6)``, clamped to 1, as PyTorch); returns the total norm
    before clipping as a 0-dim tensor. Every Var's gradient in ``grads`` counts, or
    only those of ``parameters`` when given."""
    if not isinstance(grads, GradStore):
        grads = _GradAttributes("clip_grad_norm_", grads)
    pairs = _pairs("clip_grad_norm_", grads, parameters)
    if not pairs:
        from ..creation import zeros

        return zeros(())
    norm_type = float(norm_type)
    if math.isinf(norm_type):
        norms = [g.abs().max_all() for _, g in pairs]
        total = norms[0]
        for n in norms[1:]:
            total = total.maximum(n)
    else:
        acc = None
        for _, g in pairs:
            part = g.abs().powf(norm_type).sum_all() if norm_type != 2.0 else g.sqr().sum_all()
            part = part.to_dtype("f32") if part.dtype.size_in_bytes < 4 else part
            acc = part if acc is None else acc + part.to_device(acc.device)
        total = acc.powf(1.0 / norm_type) if norm_type != 2.0 else acc.sqrt()
    if error_if_nonfinite and not math.isfinite(float(total.item())):
        raise TallowError(f"clip_grad_norm_: the total norm of order {norm_type} is non-finite")
    coef = ((total + 1e-6).recip() * float(max_norm)).clamp(high=1.0)
    for p, g in pairs:
        grads.insert(p, g.broadcast_mul(coef.to_device(g.device).to_dtype(g.dtype)))
    return total


def clip_grad_value_(grads, clip_value: float, parameters=None) -> None:
    """Clamp every gradient to ``[-clip_value, clip_value]``."""
    c = float(clip_value)
    if not isinstance(grads, GradStore):
        grads = _GradAttributes("clip_grad_value_", grads)
    for p, g in _pairs("clip_grad_value_", grads, parameters):
        grads.insert(p, g.clamp(-c, c))
