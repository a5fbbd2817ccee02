"""Tensor's constructors: from data / NumPy / DLPack, filled, ranges, identity,
random, triangular masks and meshgrids.

``Constructors`` is mixed into Tensor; its constructors are class methods, so
``tl.Tensor.zeros`` (candle's ``Tensor::zeros``) and ``tl.zeros`` are the same
function. Each returns a plain tensor through ``cls._wrap`` (``tl.Var.zeros`` too).
The helpers below turn data into a storage on a device, for them and for
``Tensor(data)``.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from .checks import scalar_for
from .convert import check_numpy_exact, from_data
from .device import Device, cpu
from .errors import ShapeMismatchError, UnsupportedDTypeError
from .layout import Layout
from .limits import check_allocation
from .shape import elem_count, parse_shape
from .tensor_base import TensorBase

_contig = Layout.contiguous_of


# torch dtypes NumPy's DLPack import refuses -> (raw torch type of the same width, DType).
_TORCH_RAW = {"torch.bfloat16": ("int16", dt.bf16), "torch.float8_e4m3fn": ("uint8", dt.f8e4m3),
              "torch.float8_e8m0fnu": ("uint8", dt.f8e8m0)}


def device_of(device) -> Device:
    """``device`` as a Device (None is the CPU)."""
    return cpu if device is None else Device.parse(device)


def _dtype(dtype, default=dt.f32):
    return default if dtype is None else dt.DType.parse(dtype)


def checked_state(device: Device, dtype, op):
    """The backend state of ``device``, once it has said it supports ``dtype``."""
    state = device._state
    state.check_dtype(dtype, op)
    return state


def storage_from_array(arr: np.ndarray, dtype, device: Device, copy: bool):
    """A storage from an array the caller keeps (``copy=False`` shares its buffer)."""
    return checked_state(device, dtype, "tensor").from_numpy(arr, dtype, copy=copy)


def adopt_array(arr: np.ndarray, dtype, device: Device):
    """A storage from a private array made for it (the CPU takes the buffer over)."""
    state = checked_state(device, dtype, "tensor")
    adopt = getattr(state, "adopt_numpy", None)
    if adopt is not None:
        return adopt(arr, dtype)
    return state.from_numpy(arr, dtype, copy=False)


def storage_of(data, dtype=None, device=None):
    """(storage, layout) of a new tensor holding a copy of ``data``: Python data, a
    NumPy array or a tensor (moved to ``device`` and cast to ``dtype`` when given)."""
    if isinstance(data, TensorBase):
        src = data.to_device(device_of(device)) if device is not None else data
        src = src.to_dtype(dtype) if dtype is not None else src
        s = src.copy() if src is data else src.detach()
        return s._storage, s._layout
    arr, dtype_ = from_data(data, None if dtype is None else dt.DType.parse(dtype))
    dev = device_of(device)
    if dtype is None and dtype_ is dt.i64 and not dev.supports_dtype(dt.i64):
        try:
            dev._state.check_dtype(dt.i64, "tensor")
        except UnsupportedDTypeError as e:
            raise UnsupportedDTypeError(
                f"{e} (Python ints infer to i64: pass dtype=tl.u32)") from None
    return adopt_array(arr, dtype_, dev), _contig(arr.shape)


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


def _sizes(op, *sizes):
    # Sizes are unsigned in candle: negative ones are an OverflowError, as for shapes.
    return parse_shape(sizes, op)


class Constructors:
    """Mixed into Tensor: its constructors, as class methods."""

    __slots__ = ()

    # -- from data ---------------------------------------------------------------------
    @classmethod
    def new(cls, data, device=cpu):
        """A tensor from Python data or a NumPy array (always copied)."""
        return cls._wrap(*storage_of(data, None, device))

    @classmethod
    def from_slice(cls, data, shape, device=None):
        """A copy of ``data`` (a flat sequence or array) viewed as ``shape``."""
        arr, dtype = from_data(data)
        shape = parse_shape((shape,), "from_slice")
        if arr.size != elem_count(shape):
            raise ShapeMismatchError(
                f"from_slice: {arr.size} elements do not fill shape {shape}"
            )
        storage = adopt_array(arr.reshape(-1), dtype, device_of(device))
        return cls._wrap(storage, _contig(shape))

    @classmethod
    def from_vec(cls, array, shape=None, device=None):
        """A tensor over a NumPy array's own buffer (no copy on the CPU)."""
        dtype = check_numpy_exact(array, "from_vec")
        if not array.flags.c_contiguous:
            raise ShapeMismatchError(
                "from_vec: the array must be C-contiguous to share its buffer "
                "(use from_slice to copy a strided array)"
            )
        shape = array.shape if shape is None else parse_shape((shape,), "from_vec")
        if array.size != elem_count(shape):
            raise ShapeMismatchError(
                f"from_vec: {array.size} elements do not fill shape {shape}"
            )
        storage = storage_from_array(array, dtype, device_of(device), copy=False)
        return cls._wrap(storage, _contig(shape))

    @classmethod
    def from_numpy(cls, arr):
        """A CPU tensor over a NumPy array of any tallow dtype (bool, int8/16/32 and
        ml_dtypes' types included): its buffer when C-contiguous, else a copy; uint16
        widens to u32 (a copy)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"from_numpy: expected a NumPy array, got {type(arr).__name__}")
        if arr.flags.c_contiguous and arr.dtype in {d.np for d in dt.ALL}:
            return cls.from_vec(arr, arr.shape)
        return cls.new(arr)

    @classmethod
    def from_dlpack(cls, x):
        """A CPU tensor from any object speaking DLPack (torch, NumPy, JAX, ...), over
        its buffer (no copy) when that is a contiguous CPU one."""
        if isinstance(x, TensorBase):
            return cls.from_numpy(x.numpy())  # tallow's own dtypes, bf16 and f8 included
        try:
            arr = np.from_dlpack(x)
        except (TypeError, BufferError, RuntimeError):
            # NumPy reads no bfloat16 or float8: a torch tensor of them is read through a
            # raw integer view of its bytes (the same memory), retyped with ml_dtypes.
            import torch  # only a torch tensor of those dtypes gets here

            found = _TORCH_RAW.get(str(x.dtype)) if isinstance(x, torch.Tensor) else None
            if found is None:
                raise
            raw, dtype = found
            arr = x.detach().cpu().view(getattr(torch, raw)).numpy().view(dtype.np)
        return cls.from_numpy(arr)

    @classmethod
    def _from_array(cls, arr, dtype, device):
        """A tensor taking over a private array made for it."""
        arr = np.asarray(arr, dtype=dtype.np, order="C")
        return cls._wrap(adopt_array(arr, dtype, device), _contig(arr.shape))

    # -- filled ------------------------------------------------------------------------
    @classmethod
    def zeros(cls, *shape, dtype=dt.f32, device=cpu):
        """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3), dtype=tl.i64, device=...)`` (f32 by default)."""
        shape, (dtype, device) = _split_shape(shape, "zeros", (dtype, device))
        dtype, device = _dtype(dtype), device_of(device)
        state = checked_state(device, dtype, "zeros")
        check_allocation("zeros", shape, dtype, device)
        return cls._wrap(state.zeros(elem_count(shape), dtype), _contig(shape))

    @classmethod
    def ones(cls, *shape, dtype=dt.f32, device=cpu):
        """A tensor of ones: ``ones(2, 3)`` or ``ones((2, 3), dtype, device)`` (f32 by default)."""
        shape, (dtype, device) = _split_shape(shape, "ones", (dtype, device))
        dtype, device = _dtype(dtype), device_of(device)
        state = checked_state(device, dtype, "ones")
        check_allocation("ones", shape, dtype, device)
        return cls._wrap(state.full(elem_count(shape), dtype, 1), _contig(shape))

    @classmethod
    def full(cls, shape, value, dtype=None, device=cpu):
        """A tensor of ``shape`` filled with ``value`` (dtype inferred from the value, as
        torch.full: float -> f32, int -> i64, bool -> bool)."""
        shape = parse_shape((shape,), "full")
        if dtype is None:
            dtype = dt.f32 if isinstance(value, float) else (
                dt.bool_ if isinstance(value, (bool, np.bool_)) else (dt.i64 if isinstance(value, int) else dt.f32))
        dtype = dt.DType.parse(dtype)
        device = device_of(device)
        value = scalar_for("full", value, dtype)
        state = checked_state(device, dtype, "full")
        check_allocation("full", shape, dtype, device)
        return cls._wrap(state.full(elem_count(shape), dtype, value), _contig(shape))

    # -- ranges and identity -----------------------------------------------------------
    @classmethod
    def eye(cls, n, m=None, dtype=None, device=None):
        """The (n, m) identity matrix (m = n by default), f32 unless ``dtype`` is given."""
        n, m = _sizes("eye", n, n if m is None else m)
        arr = np.eye(n, m, dtype=_dtype(dtype).np)
        return cls._from_array(arr, _dtype(dtype), device_of(device))

    @classmethod
    def arange(cls, start, end=None, step=1, dtype=None, device=cpu):
        """``start, start+step, ...`` below ``end`` (numpy's arange; one argument is ``end``).

        All-int arguments give i64, else f32, unless ``dtype`` is given.
        """
        if end is None:
            start, end = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        all_int = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                      for v in (start, end, step))
        device = device_of(device)
        if dtype is None:
            dtype = dt.i64 if all_int else dt.f32
            if all_int and not device.supports_dtype(dt.i64):
                try:
                    device._state.check_dtype(dt.i64, "arange")
                except UnsupportedDTypeError as e:
                    raise UnsupportedDTypeError(
                        f"{e} (integer arguments give i64: pass dtype=tl.u32)") from None
        dtype = dt.DType.parse(dtype)
        if all_int:
            count = len(range(int(start), int(end), int(step)))
        else:
            count = max(0, math.ceil((end - start) / step))
        state = checked_state(device, dtype, "arange")
        check_allocation("arange", (count,), dtype, device)
        return cls._wrap(state.arange(start, step, count, dtype), _contig((count,)))

    @classmethod
    def linspace(cls, start, end, steps, dtype=None, device=None):
        """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (computed in f64, rounded once)."""
        dtype = _dtype(dtype)
        (steps,) = _sizes("linspace", steps)
        arr = np.linspace(float(start), float(end), steps, dtype=np.float64).astype(dtype.np)
        return cls._from_array(arr, dtype, device_of(device))

    # -- random ------------------------------------------------------------------------
    @classmethod
    def rand(cls, *shape, low=0.0, high=1.0, dtype=dt.f32, device=cpu):
        """Uniform random values in ``[low, high)`` from the device's seeded generator."""
        shape, (low, high, dtype, device) = _split_shape(shape, "rand", (low, high, dtype, device))
        dtype, device = _dtype(dtype), device_of(device)
        state = checked_state(device, dtype, "rand")
        check_allocation("rand", shape, dtype, device)
        storage = state.rand_uniform(elem_count(shape), dtype, float(low), float(high))
        return cls._wrap(storage, _contig(shape))

    @classmethod
    def randn(cls, *shape, mean=0.0, std=1.0, dtype=dt.f32, device=cpu):
        """Normal random values (``mean``, ``std``) from the device's seeded generator."""
        shape, (mean, std, dtype, device) = _split_shape(shape, "randn", (mean, std, dtype, device))
        dtype, device = _dtype(dtype), device_of(device)
        state = checked_state(device, dtype, "randn")
        check_allocation("randn", shape, dtype, device)
        storage = state.rand_normal(elem_count(shape), dtype, float(mean), float(std))
        return cls._wrap(storage, _contig(shape))

    # -- masks and grids -----------------------------------------------------------------
    @classmethod
    def tril2(cls, n, dtype=None, device=None):
        """An (n, n) lower-triangular mask of ones (the diagonal included)."""
        (n,) = _sizes("tril2", n)
        dtype = _dtype(dtype)
        return cls._from_array(np.tril(np.ones((n, n), dtype=dtype.np)), dtype, device_of(device))

    @classmethod
    def triu2(cls, n, dtype=None, device=None):
        """An (n, n) upper-triangular mask of ones (the diagonal included)."""
        (n,) = _sizes("triu2", n)
        dtype = _dtype(dtype)
        return cls._from_array(np.triu(np.ones((n, n), dtype=dtype.np)), dtype, device_of(device))

    @staticmethod
    def meshgrid(tensors, xy_indexing=False):
        """Coordinate grids of 1-D tensors ("xy" indexing swaps the first two, as NumPy)."""
        tensors = list(tensors)
        for t in tensors:
            if t.rank != 1:
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

