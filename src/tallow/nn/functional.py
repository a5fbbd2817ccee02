"""PyTorch's ``torch.nn.functional`` names over tallow's ops (``import tallow.nn.functional as F``).

Each is the tallow function of the same meaning; see tl.nn.ops, tl.nn.loss and
tl.nn.pooling for the details.
"""

from __future__ import annotations

from ..tensor_class import Tensor
from .linear import linear
from .loss import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                   nll_loss)
from . import ops as _ops
from .activation import _legacy_softmax_dim
from .ops import gelu as _gelu_tanh
from .ops import gelu_erf, leaky_relu, relu, scaled_dot_product_attention, sigmoid, silu
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .functional_torch import (batch_norm, cosine_similarity, elu, glu, group_norm, hardtanh,
                               interpolate, kl_div, layer_norm, logsigmoid, mish, normalize,
                               one_hot, pad, pairwise_distance, smooth_l1_loss, softplus, unfold)
from .functional_torch import __all__ as _more


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: the exact (erf) form, or the tanh approximation with ``approximate='tanh'``."""
    return _gelu_tanh(input) if approximate == "tanh" else gelu_erf(input)


def _softmax_dim(name, input, dim):
    """``dim``, or without one PyTorch's legacy choice (dim 0 for ranks 0, 1 and 3,
    else 1) with PyTorch's warning."""
    if dim is not None:
        return dim
    import warnings

    dim = _legacy_softmax_dim(input.rank)
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument (dim={dim} is used here, as PyTorch).",
                  UserWarning, stacklevel=3)
    return dim


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """``torch.nn.functional.softmax``: without ``dim``, PyTorch's legacy choice (dim 0
    for ranks 0, 1 and 3, else 1) with a UserWarning; ``dtype`` converts first."""
    dim = _softmax_dim("softmax", input, dim)
    if dtype is not None:
        input = input.to_dtype(dtype)
    if input.rank == 0:
        return _ops.softmax(input.reshape((1,)), 0).reshape(())
    return _ops.softmax(input, dim)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """``torch.nn.functional.log_softmax``: without ``dim``, PyTorch's legacy choice
    with a UserWarning, as ``softmax``."""
    dim = _softmax_dim("log_softmax", input, dim)
    if dtype is not None:
        input = input.to_dtype(dtype)
    if input.rank == 0:
        return _ops.log_softmax(input.reshape((1,)), 0).reshape(())
    return _ops.log_softmax(input, dim)


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``
    when ``training`` (PyTorch's default is True here too)."""
    from .activation import Dropout

    return Dropout(p).train(training)(input)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """``F.embedding``: the rows of ``weight`` at ``input``; rows at ``padding_idx`` get
    no gradient, as PyTorch (``max_norm`` and the rest are not supported)."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise TypeError("embedding: max_norm, scale_grad_by_freq and sparse are not supported")
    out = weight.embedding(input)
    if padding_idx is None or not out.track_op():
        return out
    if padding_idx < 0:
        padding_idx += weight.shape[0]
    at_pad = input.eq(padding_idx).unsqueeze(-1)
    return out.detach().where(at_pad, out)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    y = input.conv1d(weight, padding=padding, stride=stride, dilation=dilation, groups=groups)
    return y if bias is None else y.broadcast_add(bias.reshape((1, -1, 1)))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    y = input.conv2d(weight, padding=padding, stride=stride, dilation=dilation, groups=groups)
    return y if bias is None else y.broadcast_add(bias.reshape((1, -1, 1, 1)))


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    y = input.conv_transpose2d(weight, padding=padding, output_padding=output_padding,
                               stride=stride, dilation=dilation, groups=groups)
    return y if bias is None else y.broadcast_add(bias.reshape((1, -1, 1, 1)))


__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "binary_cross_entropy_with_logits", "conv1d",
           "conv2d", "conv_transpose2d", "cross_entropy", "dropout", "embedding", "gelu",
           "l1_loss", "leaky_relu", "linear", "log_softmax", "max_pool2d", "mse_loss",
           "nll_loss", "relu", "scaled_dot_product_attention", "sigmoid", "silu", "softmax",
           "tanh"] + _more
