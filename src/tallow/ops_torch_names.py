"""PyTorch's Tensor methods that candle lacks, written with tallow's own ops, so a
PyTorch expression runs as it is (``x.square()``, ``x.isnan()``, ``x.tril()``,
``x.softmax(1)``...). Each has PyTorch's meaning, on every device; the ones built
from differentiable ops are differentiable. (``tl.nn.functional.softmax`` adds the
fused kernels and the legacy dim; these methods stay below the nn layer.)
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from .shape import normalize_dim


class TorchNamedOps:
    __slots__ = ()

    # -- element-wise ------------------------------------------------------------------
    def square(self):
        """``self * self`` (``torch.square``)."""
        return self * self

    def reciprocal(self):
        """``1 / self``; an integer or bool tensor gives f32, as ``torch.reciprocal``."""
        return 1.0 / self

    def trunc(self):
        """Rounded toward zero (``torch.trunc``); integers are returned as they are."""
        if not self.dtype.is_float:
            return self
        return self.ge(0).where_cond(self.floor(), self.ceil())

    fix = trunc

    def frac(self):
        """``self - self.trunc()``: the fractional part with the sign of ``self``."""
        return self - self.trunc()

    def clip(self, min=None, max=None):  # noqa: A002 - PyTorch's argument names
        """``clamp`` (PyTorch's alias)."""
        return self.clamp(min, max)

    def lerp(self, end, weight):
        """``self + weight * (end - self)`` (``torch.lerp``)."""
        return self + weight * (end - self)

    def addcmul(self, tensor1, tensor2, value=1):
        """``self + value * tensor1 * tensor2`` (``torch.addcmul``)."""
        return self + value * (tensor1 * tensor2)

    def addcdiv(self, tensor1, tensor2, value=1):
        """``self + value * tensor1 / tensor2`` (``torch.addcdiv``)."""
        return self + value * (tensor1 / tensor2)

    # -- tests on values ---------------------------------------------------------------
    def isnan(self):
        """True where NaN (a bool mask; never for integers)."""
        return self.ne(self)

    def isinf(self):
        """True where +-infinity (a bool mask; never for integers)."""
        if not self.dtype.is_float:
            return self.ne(self)
        return self.abs().eq(math.inf)

    def isfinite(self):
        """True where neither NaN nor infinite."""
        if not self.dtype.is_float:
            return self.eq(self)
        return self.abs().lt(math.inf)

    def is_floating_point(self) -> bool:
        """True for a float dtype (``torch.is_floating_point``)."""
        return self.dtype.is_float

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
        """``torch.allclose``: ``|self - other| <= atol + rtol * |other|`` everywhere."""
        theirs = other.numpy() if hasattr(other, "numpy") else np.asarray(other)
        return bool(np.allclose(self.numpy(), theirs, rtol=rtol, atol=atol, equal_nan=equal_nan))

    # -- dtypes ------------------------------------------------------------------------
    def type(self, dtype=None):
        """``to_dtype(dtype)``; without one, the dtype's name (PyTorch gives a type
        string there)."""
        if dtype is None:
            return str(self.dtype)
        return self.to_dtype(dtype if isinstance(dtype, dt.DType) else dt.DType.parse(dtype))

    # -- matrices ----------------------------------------------------------------------
    def _triangle(self, diagonal, lower):
        rows, cols = self.shape[-2:]
        keep = np.tri(rows, cols, int(diagonal), dtype=bool)
        if not lower:
            keep = ~np.tri(rows, cols, int(diagonal) - 1, dtype=bool)
        mask = self.new(keep, device=self.device)
        return mask.where_cond(self, self.zeros((1,), dtype=self.dtype, device=self.device))

    def tril(self, diagonal=0):
        """The lower triangle of the last two dims (``torch.tril``), the rest zero."""
        return self._triangle(diagonal, lower=True)

    def triu(self, diagonal=0):
        """The upper triangle of the last two dims (``torch.triu``), the rest zero."""
        return self._triangle(diagonal, lower=False)

    def outer(self, other):
        """The outer product of two vectors (``torch.outer``)."""
        return self.unsqueeze(1) * other.unsqueeze(0)

    ger = outer

    # -- normalisations ----------------------------------------------------------------
    def softmax(self, dim, dtype=None):
        """``torch.Tensor.softmax(dim)``: ``exp(x - max) / sum(exp(x - max))``."""
        x = self if dtype is None else self.to_dtype(dtype)
        d = normalize_dim(dim, x.rank, "softmax")
        if x.shape[d] == 0:  # empty rows: an empty result, as PyTorch gives
            return x.copy()
        e = x.broadcast_sub(x.max_keepdim(d).detach()).exp()
        return e.broadcast_div(e.sum_keepdim(d))

    def log_softmax(self, dim, dtype=None):
        """``torch.Tensor.log_softmax(dim)``: ``x - max - log(sum(exp(x - max)))``."""
        x = self if dtype is None else self.to_dtype(dtype)
        d = normalize_dim(dim, x.rank, "log_softmax")
        if x.shape[d] == 0:
            return x.copy()
        shifted = x.broadcast_sub(x.max_keepdim(d).detach())
        return shifted.broadcast_sub(shifted.exp().sum_keepdim(d).log())
