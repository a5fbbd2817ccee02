"""``candle.functional`` of candle's Python binding: free functions over tensors.

Thin wrappers, each one call into the Tensor method or ``tl.nn.ops`` function that
does the work, so ``import tallow as candle; candle.functional.gelu(x)`` runs.
``max_pool2d`` / ``avg_pool2d`` follow PyTorch: the stride defaults to the kernel
size (candle-pyo3's default is 1: pass ``stride=1`` for its behaviour), and they
take ``padding``. ``arange`` gives f32 whatever its arguments, as the binding's
(``tl.arange`` of ints gives i64).
"""

from __future__ import annotations

from .creation import arange as _arange
from .dtype import f32
from .nn import pooling as _pool
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
    """Element-wise hyperbolic tangent."""
    return tensor.tanh()


def matmul(lhs: Tensor, rhs: Tensor) -> Tensor:
    """The matrix product ``lhs @ rhs``, batched over leading dims."""
    return lhs.matmul(rhs)


def max_pool2d(tensor: Tensor, ksize, stride=None, padding=0) -> Tensor:
    """Max pooling; ``stride`` defaults to the kernel size ``ksize`` (PyTorch)."""
    return _pool.max_pool2d(tensor, ksize, stride, padding)


def avg_pool2d(tensor: Tensor, ksize, stride=None, padding=0) -> Tensor:
    """Average pooling; ``stride`` defaults to the kernel size ``ksize`` (PyTorch)."""
    return _pool.avg_pool2d(tensor, ksize, stride, padding)


adaptive_avg_pool2d = _pool.adaptive_avg_pool2d


__all__ = ["adaptive_avg_pool2d", "arange", "avg_pool2d", "gelu", "matmul", "max_pool2d", "relu", "rsqrt", "silu",
           "softmax", "tanh"]
