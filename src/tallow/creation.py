"""The module-level constructors: ``tl.tensor``, ``tl.zeros``, ``tl.cat``, ...

The ones without a tensor argument are Tensor's own class methods under a short name
(``tl.zeros`` = ``tl.Tensor.zeros``, defined in ``constructors.py``); the ``*_like``
ones take their shape, dtype and device from a tensor.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .checks import is_scalar
from .device import Device, cpu
from .shape import parse_shape
from .tensor_class import Tensor

zeros = Tensor.zeros
ones = Tensor.ones
full = Tensor.full
eye = Tensor.eye
arange = Tensor.arange
linspace = Tensor.linspace
rand = Tensor.rand
randn = Tensor.randn
tril2 = Tensor.tril2
triu2 = Tensor.triu2
meshgrid = Tensor.meshgrid
from_numpy = Tensor.from_numpy
from_dlpack = Tensor.from_dlpack
cat = Tensor.cat
stack = Tensor.stack


def tensor(data, dtype=None, device=None) -> Tensor:
    """A tensor holding a copy of ``data`` (a scalar, nested lists, an array, a tensor)."""
    return Tensor(data, dtype=dtype, device=device)


def zeros_like(t, dtype=None, device=None) -> Tensor:
    """Zeros of ``t``'s shape (and dtype/device unless given)."""
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None) -> Tensor:
    """Ones of ``t``'s shape (and dtype/device unless given)."""
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def full_like(t, value, dtype=None, device=None) -> Tensor:
    """``value`` in ``t``'s shape (and dtype/device unless given)."""
    return full(t.shape, value, dtype=dtype or t.dtype, device=device or t.device)


def rand_like(t, low=0.0, high=1.0) -> Tensor:
    """``rand`` with ``t``'s shape, dtype and device."""
    return rand(t.shape, low=low, high=high, dtype=t.dtype, device=t.device)


def randn_like(t, mean=0.0, std=1.0) -> Tensor:
    """``randn`` with ``t``'s shape, dtype and device."""
    return randn(t.shape, mean=mean, std=std, dtype=t.dtype, device=t.device)


def where(condition, input=None, other=None):
    """PyTorch's ``where``: ``input`` where ``condition`` is nonzero, else ``other``
    (tensors or scalars, broadcast together, their dtypes promoted as
    ``torch.result_type``). ``where(condition)`` alone gives the coordinates of the
    nonzero elements, one i64 tensor per dim."""
    if not isinstance(condition, Tensor):
        condition = Tensor(condition)
    if input is None and other is None:
        coords = condition.nonzero()
        return tuple(coords[:, d] for d in range(condition.rank))
    if input is None or other is None:
        raise TypeError("where: give both input and other, or neither")
    if not condition.dtype.is_int:
        condition = condition.ne(0)
    if is_scalar(input) and is_scalar(other):
        # Two scalars: the dtype a tensor of them would infer (float -> f32, else i64).
        common = dt.result_type(input, other)
        input = full((), input, dtype=common, device=condition.device)
    else:
        common = dt.result_type(input, other)
    if isinstance(input, Tensor):
        input = input.to_dtype(common)
    if isinstance(other, Tensor):
        other = other.to_dtype(common)
    return condition.where_cond(input, other)


# -- random integers (PyTorch's names) --------------------------------------------------

def _device(device) -> Device:
    return cpu if device is None else Device.parse(device)


def _int_dtype(dtype):
    return dt.i64 if dtype is None else dt.DType.parse(dtype)


def _uniform_dtype(device):
    """The widest float the device has, for random draws turned into integers."""
    return dt.f64 if device.supports_dtype(dt.f64) else dt.f32


def randint(low, high=None, size=(), dtype=None, device=cpu) -> Tensor:
    """Integers drawn uniformly from ``low..high-1`` (PyTorch's ``randint``; one bound is
    ``high``, from 0). i64 unless ``dtype`` is given; seeded by ``device.set_seed`` /
    ``tl.manual_seed``."""
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    shape = parse_shape((size,), "randint")
    dtype, device = _int_dtype(dtype), _device(device)
    span = high - low
    draw = rand(shape, low=0.0, high=float(span), dtype=_uniform_dtype(device), device=device)
    # The cast truncates (the draws are >= 0); the clamp catches a draw rounded up to span.
    ints = draw.clamp(0, span - 1).to_dtype(dt.i64 if device.supports_dtype(dt.i64) else dt.u32)
    if low:
        ints = ints + low
    return ints.to_dtype(dtype)


def randperm(n, dtype=None, device=cpu) -> Tensor:
    """A random permutation of ``0..n-1`` (i64 unless ``dtype`` is given)."""
    (n,) = parse_shape((n,), "randperm")
    dtype, device = _int_dtype(dtype), _device(device)
    keys = rand((n,), dtype=_uniform_dtype(device), device=device)
    return keys.arg_sort_last_dim().to_dtype(dtype)


def multinomial(probs, num_samples, replacement=False) -> Tensor:
    """i64 indices drawn from each row of ``probs`` (1-D or 2-D, non-negative weights
    that need not sum to 1), as PyTorch's ``multinomial``; see ``Tensor.multinomial``."""
    return probs.multinomial(num_samples, replacement)
