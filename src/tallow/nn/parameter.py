"""``nn.Parameter``: PyTorch's spelling of a trainable tensor, which in tallow is a Var."""

from __future__ import annotations

from ..var import Var


class _ParameterType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Var)


class Parameter(metaclass=_ParameterType):
    """``nn.Parameter(data, requires_grad=True)``: a ``Var`` over ``data`` (or over an
    empty tensor), or ``data`` detached when ``requires_grad=False``.
    ``isinstance(p, nn.Parameter)`` is true for every Var."""

    def __new__(cls, data=None, requires_grad: bool = True):
        if data is None:
            from ..creation import zeros

            data = zeros((0,))
        if not requires_grad:
            return data.detach()
        return data if isinstance(data, Var) else Var(data)
