"""Linear: ``y = x W^T + b``, with PyTorch's initialisation."""

from __future__ import annotations

import math

from ..checks import same_dtype_device
from ..errors import ShapeMismatchError
from ..layout import Layout
from ..op import Op
from ..tensor_class import Tensor
from . import init
from .module import Module
from .fused import fused


def linear(x: Tensor, weight, bias=None) -> Tensor:
    """``x @ weight.T + bias`` for ``x`` of shape ``(..., in)``.

    ``weight`` is a ``(out, in)`` tensor, or a quantized weight object: one with
    ``matmul_t(x)`` (a QTensor: ``x @ self.T``) or ``forward(x)`` (a QMatMul).
    """
    if not isinstance(weight, Tensor):
        if hasattr(weight, "forward"):
            y = weight.forward(x)
        elif hasattr(weight, "matmul_t"):
            y = _apply_2d(x, weight.matmul_t)
        else:
            raise TypeError(f"linear: unsupported weight type {type(weight).__name__}")
        return y if bias is None else y.broadcast_add(bias)
    out_features, in_features = weight.shape
    shape = x.shape
    if not shape or shape[-1] != in_features:
        raise ShapeMismatchError(
            f"linear: input of shape {shape} does not end in {in_features} "
            f"(weight {weight.shape})")
    tracked = x._track or weight._track or (bias is not None and bias._track)
    if tracked and len(shape) == 2 and (bias is None or bias.shape == (out_features,)):
        y = _linear_recorded(x, weight, bias, (shape[0], out_features))
        if y is not None:
            return y
    if not tracked:
        if bias is None or (bias.shape == (out_features,)):
            same_dtype_device("linear", (x, weight) if bias is None else (x, weight, bias))
            y = fused("linear", x, weight._storage, weight._layout,
                      None if bias is None else bias._storage,
                      None if bias is None else bias._layout,
                      shape=shape[:-1] + (out_features,))
            if y is not None:
                return y
    if len(shape) == 2:
        y = x.matmul(weight.t())
    else:
        y = _apply_2d(x, lambda x2: x2.matmul(weight.t()))
    return y if bias is None else y.broadcast_add(bias)


def _linear_recorded(x, weight, bias, out_shape):
    """``x @ weight.T + bias`` for a 2-D ``x`` as one recorded op ("linear": one GEMM
    forward, two and a column sum backward, as PyTorch's addmm), or None where the
    backend has no fused linear."""
    args = (x, weight) if bias is None else (x, weight, bias)
    same_dtype_device("linear", args)
    try:
        out = x._storage.linear(x._layout, weight._storage, weight._layout,
                                None if bias is None else bias._storage,
                                None if bias is None else bias._layout)
    except (AttributeError, NotImplementedError):
        return None
    return Tensor._wrap(out, Layout.contiguous_of(out_shape), Op("linear", args))


def _apply_2d(x, f):
    shape = x.shape
    if len(shape) == 2:
        return f(x)
    flat = x.reshape((-1, shape[-1])) if len(shape) != 1 else x.unsqueeze(0)
    y = f(flat)
    return y.reshape(shape[:-1] + (y.shape[-1],))


class Linear(Module):
    """``Linear(in_features, out_features, bias=True)``.

    Built from scratch, the weight (``(out, in)``) and bias are trainable ``Var``s
    drawn from ``U(-1/sqrt(in), 1/sqrt(in))``, PyTorch's default (its
    ``kaiming_uniform_(a=sqrt(5))``). ``from_weights`` / ``load`` keep the tensors
    they are given (plain tensors from a file are frozen: ``requires_grad_``).
    ``weight`` may be replaced by a quantized tensor.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None, weight=None, bias_tensor=None):
        super().__init__()
        self._quantizable_buffers.add("weight")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        dtype = dtype or "f32"
        if weight is None:
            weight = init.parameter(
                init.linear_weight(self.in_features, self.out_features, dtype, device))
        self.weight = weight
        if bias_tensor is not None:
            self.bias = bias_tensor
        elif bias:
            self.bias = init.parameter(
                init.linear_bias(self.in_features, self.out_features, dtype, device))
        else:
            self.bias = None

    @classmethod
    def from_weights(cls, weight, bias=None) -> "Linear":
        """A Linear over existing tensors (weight ``(out, in)``)."""
        out_f, in_f = tuple(weight.shape)
        m = cls.__new__(cls)
        Module.__init__(m)
        m._quantizable_buffers.add("weight")
        m.in_features, m.out_features = in_f, out_f
        m.weight = weight
        m.bias = bias
        return m

    @classmethod
    def load(cls, vb, in_features: int, out_features: int, bias: bool = True) -> "Linear":
        """Weights ``weight`` (``(out, in)``) and ``bias`` from a VarBuilder."""
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        hint = init.Init.uniform(-bound, bound)
        w = vb.get((out_features, in_features), "weight", hint)
        b = vb.get((out_features,), "bias", hint) if bias else None
        return cls.from_weights(w, b)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Identity(Module):
    """Returns its input; takes (and ignores) any arguments, as candle-pyo3's and torch's."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        return input
