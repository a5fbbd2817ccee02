"""LayerNorm and RmsNorm over the last dim."""

from __future__ import annotations

from ..creation import ones, zeros
from ..tensor_class import Tensor
from . import ops
from .module import Module


class LayerNorm(Module):
    """``LayerNorm(normalized_shape, eps=1e-5, bias=True)`` (weight 1, bias 0).

    As torch.nn.LayerNorm, ``normalized_shape`` may name several trailing dims
    (``(3, 4)``): they are normalised together, with weight and bias of that shape.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, bias: bool = True, device=None,
                 dtype=None, weight=None, bias_tensor=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        shape = tuple(int(d) for d in normalized_shape)
        self.normalized_shape = shape
        self.eps = float(eps)
        dtype = dtype or "f32"
        self.weight = weight if weight is not None else ones(shape, dtype=dtype, device=device)
        if bias_tensor is not None:
            self.bias = bias_tensor
        elif bias:
            self.bias = zeros(shape, dtype=dtype, device=device)
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
    """``RmsNorm(dim, eps=1e-5)``: ``x / rms(x) * weight`` (weight 1)."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None, dtype=None, weight=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = weight if weight is not None else ones((int(dim),), dtype=dtype or "f32",
                                                             device=device)

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
