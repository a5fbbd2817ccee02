"""Tensor constructors: filled, ranges, identity, random, from data / NumPy / DLPack,
triangular masks and meshgrids.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from ._construct import make
from .device import Device, cpu
from .layout import Layout
from .shape import elem_count, parse_shape

_contig = Layout.contiguous_of


def _dev(device) -> Device:
    return cpu if device is None else Device.parse(device)


def _dtype(dtype, default=dt.f32):
    return default if dtype is None else dt.DType.parse(dtype)


def _checked_state(device, dtype, op):
    state = device._state
    state.check_dtype(dtype, op)
    return state


def _shape_args(shape, op):
    return parse_shape(shape if len(shape) != 1 else (shape[0],), op)


def zeros(*shape, dtype=dt.f32, device=cpu):
    """A tensor of zeros: ``zeros((2, 3))`` or ``zeros(2, 3)``; f32 on the CPU unless ``dtype``/``device`` say otherwise."""
    shape, (dtype, device) = _split_shape(shape, "zeros", (dtype, device))
    dtype, device = _dtype(dtype), _dev(device)
    state = _checked_state(device, dtype, "zeros")
    return make(state.zeros(elem_count(shape), dtype), _contig(shape))


def ones(*shape, dtype=dt.f32, device=cpu):
    """A tensor of ones: ``ones((2, 3))`` or ``ones(2, 3)``; f32 on the CPU unless ``dtype``/``device`` say otherwise."""
    shape, (dtype, device) = _split_shape(shape, "ones", (dtype, device))
    dtype, device = _dtype(dtype), _dev(device)
    state = _checked_state(device, dtype, "ones")
    return make(state.full(elem_count(shape), dtype, 1), _contig(shape))


def full(shape, value, dtype=None, device=cpu):
    """A tensor of ``shape`` filled with ``value``.

    Without ``dtype``: a float gives f32, a bool u8, an int i64.
    """
    shape = parse_shape((shape,), "full")
    if dtype is None:
        dtype = dt.f32 if isinstance(value, float) else (
            dt.u8 if isinstance(value, bool) else (dt.i64 if isinstance(value, int) else dt.f32))
    dtype = dt.DType.parse(dtype)
    device = _dev(device)
    from .checks import scalar_for

    value = scalar_for("full", value, dtype)
    state = _checked_state(device, dtype, "full")
    return make(state.full(elem_count(shape), dtype, value), _contig(shape))


def _split_shape(args, op, keywords):
    """The shape and the other arguments of ``f(*shape, **keywords)``.

    ``f(2, 3)`` and ``f((2, 3))`` are a shape alone; after a tuple or list shape, further
    positional arguments take the keywords' places in order, so the contract's
    ``f(shape, a, b)`` spelling works too (``tl.rand((2, 3), 0.0, 2.0)``).
    """
    if len(args) >= 2 and isinstance(args[0], (tuple, list)):
        rest = args[1:]
        if len(rest) > len(keywords):
            raise TypeError(f"{op}: takes a shape and at most {len(keywords)} more "
                            f"positional arguments, got {len(rest)}")
        return parse_shape((args[0],), op), tuple(rest) + tuple(keywords[len(rest):])
    return parse_shape(tuple(args), op), tuple(keywords)


def zeros_like(t, dtype=None, device=None):
    """Zeros of ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return zeros(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None):
    """Ones of ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return ones(t.shape, dtype=dtype or t.dtype, device=device or t.device)


def full_like(t, value, dtype=None, device=None):
    """``value`` in ``t``'s shape, in ``t``'s dtype and on its device unless given."""
    return full(t.shape, value, dtype=dtype or t.dtype, device=device or t.device)


def _sizes(op, *sizes):
    # Sizes are unsigned in candle: negative ones are an OverflowError, as for shapes.
    return parse_shape(sizes, op)


def eye(n, m=None, dtype=None, device=None):
    """The (n, m) identity matrix (m defaults to n), f32 unless ``dtype`` is given."""
    n, m = _sizes("eye", n, n if m is None else m)
    arr = np.eye(n, m, dtype=_dtype(dtype).np)
    return from_array(arr, _dtype(dtype), _dev(device))


def arange(start, end=None, step=1, dtype=None, device=cpu):
    """``start, start+step, ...`` below ``end`` (numpy's arange; one argument is ``end``).

    All-int arguments give i64, else f32, unless ``dtype`` is given.
    """
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    all_int = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                  for v in (start, end, step))
    if dtype is None:
        dtype = dt.i64 if all_int else dt.f32
    dtype = dt.DType.parse(dtype)
    if all_int:
        count = len(range(int(start), int(end), int(step)))
    else:
        count = max(0, math.ceil((end - start) / step))
    device = _dev(device)
    state = _checked_state(device, dtype, "arange")
    return make(state.arange(start, step, count, dtype), _contig((count,)))


def linspace(start, end, steps, dtype=None, device=None):
    """``steps`` evenly spaced values from ``start`` to ``end``, both included (NumPy's linspace), f32 unless ``dtype`` is given."""
    dtype = _dtype(dtype)
    (steps,) = _sizes("linspace", steps)
    arr = np.linspace(float(start), float(end), steps, dtype=np.float64).astype(dtype.np)
    return from_array(arr, dtype, _dev(device))


def rand(*shape, low=0.0, high=1.0, dtype=dt.f32, device=cpu):
    """Uniform random values in ``[low, high)`` of the given shape (f32 unless ``dtype`` is given)."""
    shape, (low, high, dtype, device) = _split_shape(shape, "rand", (low, high, dtype, device))
    dtype, device = _dtype(dtype), _dev(device)
    state = _checked_state(device, dtype, "rand")
    return make(state.rand_uniform(elem_count(shape), dtype, float(low), float(high)), _contig(shape))


def randn(*shape, mean=0.0, std=1.0, dtype=dt.f32, device=cpu):
    """Normal random values with ``mean`` and ``std`` of the given shape (f32 unless ``dtype`` is given)."""
    shape, (mean, std, dtype, device) = _split_shape(shape, "randn", (mean, std, dtype, device))
    dtype, device = _dtype(dtype), _dev(device)
    state = _checked_state(device, dtype, "randn")
    return make(state.rand_normal(elem_count(shape), dtype, float(mean), float(std)), _contig(shape))


def rand_like(t, low=0.0, high=1.0):
    """Uniform random values in ``[low, high)`` of ``t``'s shape, dtype and device."""
    return rand(t.shape, low=low, high=high, dtype=t.dtype, device=t.device)


def randn_like(t, mean=0.0, std=1.0):
    """Normal random values of ``t``'s shape, dtype and device."""
    return randn(t.shape, mean=mean, std=std, dtype=t.dtype, device=t.device)


def from_array(arr, dtype, device):
    """A tensor taking over a private array made for it."""
    from .tensor import adopt_array

    arr = np.asarray(arr, dtype=dtype.np, order="C")
    return make(adopt_array(arr, dtype, device), _contig(arr.shape))


def tensor(data, dtype=None, device=None):
    """A tensor from nested lists, a scalar, a NumPy array or another tensor (``Tensor(data)``).

    ``dtype`` and ``device`` convert the data; without them the data's own dtype is kept
    (Python floats give f32) and the tensor is on the CPU.
    """
    from .tensor import Tensor

    return Tensor(data, dtype=dtype, device=device)


def from_numpy(arr):
    """A CPU tensor over a NumPy array: its buffer when C-contiguous, else a copy."""
    from .tensor import Tensor

    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(arr).__name__}")
    if arr.flags.c_contiguous and arr.dtype in {d.np for d in dt.ALL}:
        return Tensor.from_vec(arr, arr.shape)
    return Tensor(arr)


def from_dlpack(x):
    """A CPU tensor from any object speaking DLPack (torch, NumPy, JAX, ...)."""
    try:
        arr = np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError):
        import torch

        if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16:
            arr = x.detach().cpu().view(torch.int16).numpy().view(dt.bf16.np)
        else:
            raise
    return from_numpy(arr)


def tril2(n, dtype=None, device=None):
    """An (n, n) lower-triangular mask of ones (the diagonal included)."""
    (n,) = _sizes("tril2", n)
    dtype = _dtype(dtype)
    return from_array(np.tril(np.ones((n, n), dtype=dtype.np)), dtype, _dev(device))


def triu2(n, dtype=None, device=None):
    """An (n, n) upper-triangular mask of ones (the diagonal included)."""
    (n,) = _sizes("triu2", n)
    dtype = _dtype(dtype)
    return from_array(np.triu(np.ones((n, n), dtype=dtype.np)), dtype, _dev(device))


def meshgrid(tensors, xy_indexing=False):
    """Coordinate grids of 1-D tensors ("xy" indexing swaps the first two, as NumPy)."""
    tensors = list(tensors)
    for t in tensors:
        if t.rank != 1:
            from .errors import ShapeMismatchError

            raise ShapeMismatchError(f"meshgrid: expects 1-D tensors, got shape {t.shape}")
    sizes = [t.shape[0] for t in tensors]
    if xy_indexing and len(tensors) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    n = len(tensors)
    for i, t in enumerate(tensors):
        axis = i
        if xy_indexing and n >= 2 and i < 2:
            axis = 1 - i
        shape = [1] * n
        shape[axis] = t.shape[0]
        out.append(t.reshape(tuple(shape)).broadcast_as(tuple(sizes)))
    return out
