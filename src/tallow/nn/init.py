"""Initialisation schemes (PyTorch's defaults and candle-nn's ``Init``)."""

from __future__ import annotations

import math

from ..creation import full, rand, randn


class Init:
    """How a new variable is filled: a constant, uniform or normal values, or Kaiming."""

    def __init__(self, kind: str, **params):
        self.kind = kind
        self.params = params

    @staticmethod
    def const(value: float) -> "Init":
        return Init("const", value=float(value))

    @staticmethod
    def uniform(low: float, high: float) -> "Init":
        return Init("uniform", low=float(low), high=float(high))

    @staticmethod
    def normal(mean: float = 0.0, std: float = 1.0) -> "Init":
        return Init("normal", mean=float(mean), std=float(std))

    @staticmethod
    def kaiming_uniform(fan_in_dim: int = 1, gain: float = math.sqrt(2.0)) -> "Init":
        return Init("kaiming_uniform", gain=gain)

    @staticmethod
    def kaiming_normal(gain: float = math.sqrt(2.0)) -> "Init":
        return Init("kaiming_normal", gain=gain)

    def tensor(self, shape, dtype="f32", device=None):
        shape = tuple(shape)
        if self.kind == "const":
            return full(shape, self.params["value"], dtype=dtype, device=device)
        if self.kind == "uniform":
            return rand(shape, low=self.params["low"], high=self.params["high"], dtype=dtype,
                        device=device)
        if self.kind == "normal":
            return randn(shape, mean=self.params["mean"], std=self.params["std"], dtype=dtype,
                         device=device)
        fan_in = fan_in_of(shape)
        std = self.params["gain"] / math.sqrt(max(fan_in, 1))
        if self.kind == "kaiming_uniform":
            bound = math.sqrt(3.0) * std
            return rand(shape, low=-bound, high=bound, dtype=dtype, device=device)
        if self.kind == "kaiming_normal":
            return randn(shape, mean=0.0, std=std, dtype=dtype, device=device)
        raise ValueError(f"unknown init {self.kind!r}")

    def __repr__(self):
        return f"Init.{self.kind}({', '.join(f'{k}={v}' for k, v in self.params.items())})"


ZERO = Init.const(0.0)
ONE = Init.const(1.0)
DEFAULT_KAIMING_NORMAL = Init.kaiming_normal()
DEFAULT_KAIMING_UNIFORM = Init.kaiming_uniform()


def fan_in_of(shape) -> int:
    """Inputs per output unit: dim 1 times the receptive field (PyTorch's rule)."""
    if len(shape) < 2:
        return shape[0] if shape else 1
    n = shape[1]
    for d in shape[2:]:
        n *= d
    return n


def parameter(t):
    """A new layer's parameter: a ``Var``, so a layer built from scratch is trainable.

    (Layers built from loaded weights keep what they are given: plain tensors from
    files record no graph; see ``Module.requires_grad_``.)
    """
    from ..var import Var

    return Var(t)


def uniform_fan_in(shape, fan_in: int, dtype="f32", device=None):
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default for the weights and
    biases of Linear and the convolutions (``kaiming_uniform_(a=sqrt(5))`` reduces to
    this bound for the weight)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return rand(tuple(shape), low=-bound, high=bound, dtype=dtype, device=device)


def linear_weight(in_features: int, out_features: int, dtype="f32", device=None):
    """PyTorch's ``nn.Linear`` weight: ``U(-1/sqrt(in), 1/sqrt(in))``.

    (kaiming_uniform with a = sqrt(5) reduces to this bound.)
    """
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    return rand((out_features, in_features), low=-bound, high=bound, dtype=dtype, device=device)


def linear_bias(in_features: int, out_features: int, dtype="f32", device=None):
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    return rand((out_features,), low=-bound, high=bound, dtype=dtype, device=device)
