"""PyTorch's module-level functions: ``tl.exp(x)``, ``tl.sum(x, 1)``, ``tl.einsum(...)``.

Most are the Tensor method of the same name with the tensor as the first argument
(``tl.exp(x)`` is ``x.exp()``), made here from the method so the two never differ.
The rest take PyTorch's arguments where the method's differ (``tl.gather(x, dim,
index)``, ``tl.max(a, b)``, ``tl.roll(x, shifts)`` without dims) or make tensors.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .contraction import einsum
from .errors import InvalidArgumentError
from .tensor_class import Tensor


def _from_method(name: str):
    method = getattr(Tensor, name)

    def function(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = (f"``torch.{name}``: ``input.{name}(...)`` with the same arguments.\n\n"
                        + (method.__doc__ or "").strip())
    return function


# The methods whose arguments after the tensor are PyTorch's function's.
_SAME_AS_METHOD = (
    "abs", "acos", "addcdiv", "addcmul", "all", "amax", "amin", "any", "argmax", "argmin",
    "argsort", "asin", "atan", "bmm", "ceil", "chunk", "clamp_max", "clamp_min", "clip", "cos",
    "cosh", "count_nonzero", "cummax", "cumprod", "cumsum", "diag", "diagonal", "diff", "dot",
    "erf", "exp", "expm1", "flatten", "flip", "floor", "fmod", "frac", "isclose", "isfinite",
    "isinf", "isnan", "lerp", "log", "log1p", "log2", "log10", "logsumexp", "masked_fill",
    "matmul", "mean", "median", "mm", "movedim", "moveaxis", "mv", "nan_to_num", "narrow", "neg",
    "norm", "nonzero", "numel", "outer", "permute", "prod", "reciprocal", "relu", "remainder",
    "repeat_interleave", "reshape", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sort", "split",
    "sqrt", "square", "squeeze", "std", "sum", "swapaxes", "swapdims", "t", "take_along_dim",
    "tan", "tanh", "tile", "topk", "trace", "tril", "triu", "trunc", "unbind", "unflatten",
    "unique", "unsqueeze", "var", "allclose", "equal",
)

_made = {}
for _name in _SAME_AS_METHOD:
    if hasattr(Tensor, _name):
        _made[_name] = _from_method(_name)
globals().update(_made)


def transpose(input, dim0, dim1):
    """``torch.transpose``: a view with ``dim0`` and ``dim1`` swapped."""
    return input.transpose(dim0, dim1)


def gather(input, dim, index):
    """``torch.gather``: ``out[i][j] = input[index[i][j]][j]`` for ``dim`` 0."""
    return input.gather(index, dim)


def index_select(input, dim, index):
    """``torch.index_select``: the slices at the 1-D ``index`` along ``dim``."""
    return input.index_select(index, dim)


def _extreme(name, input, other_or_dim, keepdim):
    if other_or_dim is None:
        return getattr(input, name)()
    if isinstance(other_or_dim, Tensor):
        return getattr(input, "maximum" if name == "max" else "minimum")(other_or_dim)
    return getattr(input, name)(other_or_dim, keepdim)


def max(input, dim=None, keepdim=False):  # noqa: A001  (PyTorch's name)
    """``torch.max``: the largest value; with ``dim``, ``(values, indices)``; with a
    tensor second, the element-wise maximum (``torch.maximum``)."""
    return _extreme("max", input, dim, keepdim)


def min(input, dim=None, keepdim=False):  # noqa: A001
    """``torch.min``: the smallest value; with ``dim``, ``(values, indices)``; with a
    tensor second, the element-wise minimum (``torch.minimum``)."""
    return _extreme("min", input, dim, keepdim)


def maximum(input, other):
    """``torch.maximum``: the element-wise maximum (shapes broadcast)."""
    return input.broadcast_maximum(other) if isinstance(other, Tensor) else input.maximum(other)


def minimum(input, other):
    """``torch.minimum``: the element-wise minimum (shapes broadcast)."""
    return input.broadcast_minimum(other) if isinstance(other, Tensor) else input.minimum(other)


def clamp(input, min=None, max=None):  # noqa: A002
    """``torch.clamp``: values limited to ``[min, max]`` (either may be None)."""
    return input.clamp(min, max)


def pow(input, exponent):  # noqa: A001
    """``torch.pow``: ``input ** exponent`` (either may be a scalar)."""
    return input ** exponent


def round(input, *, decimals=0):  # noqa: A001
    """``torch.round``: to the nearest integer, halves to even (or to ``decimals``)."""
    return input.round() if decimals == 0 else input.round_to(decimals)


def roll(input, shifts, dims=None):
    """``torch.roll``: elements shifted along ``dims`` (of the flattened tensor without)."""
    if dims is None:
        return input.flatten_all().roll(shifts, 0).reshape(input.shape)
    if isinstance(dims, (tuple, list)):
        for shift, dim in zip(shifts, dims):
            input = input.roll(shift, dim)
        return input
    return input.roll(shifts, dims)


def softmax(input, dim, dtype=None):
    """``torch.softmax``: ``exp(x) / sum(exp(x))`` along ``dim``."""
    return input.softmax(dim, dtype=dtype)


def log_softmax(input, dim, dtype=None):
    """``torch.log_softmax``: ``x - logsumexp(x)`` along ``dim``."""
    return input.log_softmax(dim, dtype=dtype)


def dropout(input, p=0.5, train=True):
    """``torch.dropout``: zero each element with probability ``p`` when ``train``,
    scaling the rest by ``1 / (1 - p)``."""
    if not 0 <= p <= 1:
        raise InvalidArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not train or p == 0:
        return input
    if p == 1:
        return input * 0
    keep = Tensor.rand(input.shape, dtype=input.dtype, device=input.device).ge(p)
    return input * keep.to_dtype(input.dtype) * (1.0 / (1.0 - p))


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``torch.addmm``: ``beta * input + alpha * (mat1 @ mat2)``."""
    product = mat1.matmul(mat2)
    if alpha != 1:
        product = product * alpha
    return product.broadcast_add(input if beta == 1 else input * beta)


def broadcast_tensors(*tensors):
    """``torch.broadcast_tensors``: the tensors broadcast to their common shape (views)."""
    shape = np.broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.broadcast_as(tuple(shape)) for t in tensors)


def as_tensor(data, dtype=None, device=None):
    """``torch.as_tensor``: ``data`` itself when it is a tensor of that dtype and device,
    else a tensor of it (converted)."""
    if isinstance(data, Tensor):
        out = data if dtype is None else data.to_dtype(dtype)
        return out if device is None else out.to_device(device)
    return Tensor(data, dtype=dtype, device=device)


def empty(*size, dtype=None, device=None):
    """``torch.empty``: a tensor of ``size``; its values are zeros here."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return Tensor.zeros(tuple(size), dtype=dtype or dt.f32, device=device or "cpu")


def empty_like(input, dtype=None, device=None):
    """``torch.empty_like``: a tensor of ``input``'s shape, dtype and device (zeros here)."""
    return input.new_zeros(input.shape, dtype=dtype, device=device)


def meshgrid(*tensors, indexing=None, xy_indexing=False):
    """``torch.meshgrid(*tensors, indexing="ij")``: coordinate grids of 1-D tensors
    (``"xy"`` swaps the first two dims, as NumPy), as a tuple. candle-pyo3's
    ``meshgrid([a, b], xy_indexing)`` is the same call with one list, and gives a list."""
    candle_style = bool(tensors) and isinstance(tensors[0], (list, tuple))
    if candle_style:
        if len(tensors) == 2:
            xy_indexing = tensors[1]
        tensors = tuple(tensors[0])
    if indexing is not None:
        if indexing not in ("ij", "xy"):
            raise InvalidArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        xy_indexing = indexing == "xy"
    grids = Tensor.meshgrid(tensors, xy_indexing)
    return grids if candle_style else tuple(grids)


__all__ = sorted(list(_made) + [
    "addmm", "as_tensor", "broadcast_tensors", "clamp", "dropout", "einsum", "empty",
    "empty_like", "gather", "index_select", "log_softmax", "max", "maximum", "meshgrid", "min",
    "minimum", "pow", "roll", "round", "softmax", "transpose"])
del _name
