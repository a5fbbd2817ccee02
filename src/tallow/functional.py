"""``candle.functional`` of candle's Python binding: free functions over tensors.

Thin wrappers, each one call into the Tensor method or ``tl.nn.ops`` function that
does the work, so ``import tallow as candle; candle.functional.gelu(x)`` runs. Where
candle-pyo3's signature differs from the method's, the binding's wins here:
``max_pool2d`` / ``avg_pool2d`` take ``stride=1`` by default (the Tensor methods,
as candle-core, default the stride to the kernel size), and ``arange`` gives f32
whatever its arguments (``tl.arange`` of ints gives i64).
"""

from __future__ import annotations

from .creation import arange as _arange
from .dtype import f32
from .nn.ops import gelu, relu, silu, softmax
from .tensor_class import Tensor


def arange(start: float, end: float, step: float = 1.0, device=None) -> Tensor:
    """``[start, end)`` by ``step``, always f32 (as the binding's ``functional.arange``)."""
    kwargs = {} if device is None else {"device": device}
    return _arange(start, end, step, dtype=f32, **kwargs)


def rsqrt(input: Tensor) -> Tensor:
    """``1 / sqrt(input)`` element-wise."""
    return input.sqrt().recip()


def tanh(tensor: Tensor) -> Tensor:
    return tensor.tanh()


def matmul(lhs: Tensor, rhs: Tensor) -> Tensor:
    return lhs.matmul(rhs)


def max_pool2d(tensor: Tensor, ksize: int, stride: int = 1) -> Tensor:
    return tensor.max_pool2d(ksize, stride)


def avg_pool2d(tensor: Tensor, ksize: int, stride: int = 1) -> Tensor:
    return tensor.avg_pool2d(ksize, stride)


__all__ = ["arange", "avg_pool2d", "gelu", "matmul", "max_pool2d", "relu", "rsqrt", "silu",
           "softmax", "tanh"]
