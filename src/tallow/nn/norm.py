"""Normalisation layers: LayerNorm, RmsNorm / RMSNorm, GroupNorm (BatchNorm: batchnorm.py)."""

from __future__ import annotations

from ..creation import ones, zeros
from ..tensor_class import Tensor
from . import ops
from .init import parameter
from .module import Module


def _normalize_trailing(x: Tensor, shape, eps: float) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the trailing dims ``shape`` (biased var)."""
    k = len(shape)
    if tuple(x.shape[-k:]) != tuple(shape):
        from ..errors import ShapeMismatchError

        raise ShapeMismatchError(
            f"layer_norm: input of shape {x.shape} does not end in normalized_shape {shape}")
    dims = tuple(range(x.rank - k, x.rank))
    centred = x.broadcast_sub(x.mean_keepdim(dims))
    var = centred.sqr().mean_keepdim(dims)
    return centred.broadcast_div((var + eps).sqrt())


class LayerNorm(Module):
    """``LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
    device=None, dtype=None)``, PyTorch's signature.

    ``normalized_shape`` may name several trailing dims (``(3, 4)``): they are
    normalised together, with weight (ones) and bias (zeros) of that shape, trainable
    ``Var``s when built from scratch. ``elementwise_affine=False`` keeps neither;
    ``bias=False`` keeps the weight only. (candle-pyo3's third positional argument is
    ``bias``; PyTorch's meaning wins: docs/differences.md.)
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None, *, weight=None, bias_tensor=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        shape = tuple(int(d) for d in normalized_shape)
        self.normalized_shape = shape
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine) or weight is not None
        dtype = dtype or "f32"
        if weight is None and self.elementwise_affine:
            weight = parameter(ones(shape, dtype=dtype, device=device))
        self.weight = weight
        if bias_tensor is not None:
            self.bias = bias_tensor
        elif bias and self.elementwise_affine:
            self.bias = parameter(zeros(shape, dtype=dtype, device=device))
        else:
            self.bias = None

    @classmethod
    def from_weights(cls, weight: Tensor, bias: Tensor | None, eps: float) -> "LayerNorm":
        return cls(weight.shape[0], eps, bias=bias is not None, weight=weight, bias_tensor=bias)

    @classmethod
    def load(cls, vb, size: int, eps: float = 1e-5, bias: bool = True) -> "LayerNorm":
        """``weight`` and ``bias`` from a VarBuilder (also the old ``gamma``/``beta`` names)."""
        from .init import ONE, ZERO

        if not vb.contains_tensor("weight") and vb.contains_tensor("gamma"):
            w = vb.get((size,), "gamma")
            b = vb.get((size,), "beta") if bias else None
        else:
            w = vb.get((size,), "weight", ONE)
            b = vb.get((size,), "bias", ZERO) if bias else None
        return cls.from_weights(w, b, eps)

    def forward(self, x: Tensor) -> Tensor:
        shape = self.normalized_shape
        if self.weight is None:  # elementwise_affine=False
            return _normalize_trailing(x, shape, self.eps)
        if len(shape) == 1:
            return ops.layer_norm(x, self.weight, self.bias, self.eps)
        # Several trailing dims: normalise them as one flattened last dim.
        k = len(shape)
        if tuple(x.shape[-k:]) != shape:
            from ..errors import ShapeMismatchError

            raise ShapeMismatchError(
                f"layer_norm: input of shape {x.shape} does not end in normalized_shape {shape}")
        n = 1
        for d in shape:
            n *= d
        flat = x.reshape(tuple(x.shape[:-k]) + (n,))
        w = self.weight.reshape((n,))
        b = None if self.bias is None else self.bias.reshape((n,))
        return ops.layer_norm(flat, w, b, self.eps).reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RmsNorm(Module):
    """``RmsNorm(dim, eps=1e-5)``: ``x / rms(x) * weight`` over the last dim (weight
    ones, a trainable ``Var`` when built from scratch). candle's name and default eps;
    ``RMSNorm`` takes PyTorch's arguments."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None, dtype=None, weight=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = weight if weight is not None else parameter(
            ones((int(dim),), dtype=dtype or "f32", device=device))

    @classmethod
    def from_weights(cls, weight: Tensor, eps: float) -> "RmsNorm":
        return cls(weight.shape[0], eps, weight=weight)

    @classmethod
    def load(cls, vb, size: int, eps: float = 1e-5) -> "RmsNorm":
        from .init import ONE

        return cls.from_weights(vb.get((size,), "weight", ONE), eps)

    def forward(self, x: Tensor) -> Tensor:
        return ops.rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class RMSNorm(Module):
    """``RMSNorm(normalized_shape, eps=None, elementwise_affine=True)``, as torch.nn.RMSNorm:
    ``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims.
    ``eps=None`` is the dtype's machine epsilon (PyTorch's default). Weight: ones,
    a trainable ``Var``."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = parameter(ones(self.normalized_shape, dtype=dtype or "f32", device=device)) \
            if self.elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        import numpy as np

        shape = self.normalized_shape
        k = len(shape)
        if tuple(x.shape[-k:]) != shape:
            from ..errors import ShapeMismatchError

            raise ShapeMismatchError(
                f"rms_norm: input of shape {x.shape} does not end in normalized_shape {shape}")
        eps = float(np.finfo(x.dtype.np).eps) if self.eps is None else float(self.eps)
        dims = tuple(range(x.rank - k, x.rank))
        y = x.broadcast_div((x.sqr().mean_keepdim(dims) + eps).sqrt())
        return y if self.weight is None else y.broadcast_mul(self.weight)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """``GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)``, as torch.nn.GroupNorm:
    the channels (dim 1) are split into ``num_groups`` groups, each normalised over its
    channels and all trailing dims (biased variance), then scaled and shifted per
    channel by ``weight`` (ones) and ``bias`` (zeros), trainable ``Var``s."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            from ..errors import ShapeMismatchError

            raise ShapeMismatchError(
                f"GroupNorm: num_channels {num_channels} is not divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps = float(eps)
        self.affine = bool(affine)
        dtype = dtype or "f32"
        self.weight = parameter(ones((self.num_channels,), dtype=dtype, device=device)) \
            if affine else None
        self.bias = parameter(zeros((self.num_channels,), dtype=dtype, device=device)) \
            if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.rank < 2 or x.shape[1] != self.num_channels:
            from ..errors import ShapeMismatchError

            raise ShapeMismatchError(
                f"GroupNorm: expected (batch, {self.num_channels}, ...), got {x.shape}")
        n, c = x.shape[:2]
        g = x.reshape((n, self.num_groups, -1))
        centred = g.broadcast_sub(g.mean_keepdim(2))
        var = centred.sqr().mean_keepdim(2)
        y = centred.broadcast_div((var + self.eps).sqrt()).reshape(x.shape)
        if self.weight is None:
            return y
        per_channel = (1, c) + (1,) * (x.rank - 2)
        return y.broadcast_mul(self.weight.reshape(per_channel)).broadcast_add(
            self.bias.reshape(per_channel))

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
