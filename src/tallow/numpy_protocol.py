"""Tensors inside NumPy's functions: ``np.mean(t)``, ``np.sum(t, axis=0)``,
``np.concatenate([t, u])``, ``np.allclose(t, a)``...

A tensor given to a NumPy function stands for its values. ``__array_function__``
hands the function each tensor as ``np.asarray(t)`` (the tensor's own buffer on the
CPU, a host copy from a GPU) and returns NumPy's result as it is: a NumPy array or
scalar, what the function gives for an array of the same values. Without it, NumPy's
wrappers call a method of the same name with NumPy's keywords (``np.mean`` calls
``t.mean(axis=None, dtype=None, out=None)``), which tallow's PyTorch-style methods
do not take. Ufuncs (``np.exp(t)``) need no hook: they read ``__array__``.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .tensor_base import TensorBase


def _as_arrays(x):
    """``x`` with every tensor in it (nested in lists, tuples, dicts) as an array."""
    if isinstance(x, TensorBase):
        return np.asarray(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_as_arrays(v) for v in x)
    if isinstance(x, dict):
        return {k: _as_arrays(v) for k, v in x.items()}
    return x


class NumpyProtocol:
    """Mixed into Tensor: NumPy's function protocol and ``astype``."""

    __slots__ = ()

    def __array_function__(self, func, types, args, kwargs):
        return func(*_as_arrays(args), **_as_arrays(kwargs))

    def astype(self, dtype):
        """NumPy's ``astype``: the values converted to ``dtype`` (a tallow dtype, a NumPy
        dtype or type, or a name), as ``to_dtype``."""
        return self.to_dtype(dt.DType.parse(dtype))
