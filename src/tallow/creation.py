"""The module-level constructors: ``tl.tensor``, ``tl.zeros``, ``tl.cat``, ...

The ones without a tensor argument are Tensor's own class methods under a short name
(``tl.zeros`` = ``tl.Tensor.zeros``, defined in ``constructors.py``); the ``*_like``
ones take their shape, dtype and device from a tensor.
"""

from __future__ import annotations

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
    """Zeros of ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None) -> Tensor:
    """Ones of ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def full_like(t, value, dtype=None, device=None) -> Tensor:
    """``value`` in ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return full(t.shape, value, dtype=dtype or t.dtype, device=device or t.device)


def rand_like(t, low=0.0, high=1.0) -> Tensor:
    """Uniform random values in ``[low, high)`` of ``t``'s shape, dtype and device."""
    return rand(t.shape, low=low, high=high, dtype=t.dtype, device=t.device)


def randn_like(t, mean=0.0, std=1.0) -> Tensor:
    """Normal random values of ``t``'s shape, dtype and device."""
    return randn(t.shape, mean=mean, std=std, dtype=t.dtype, device=t.device)
