"""Tensor: a shared storage plus a layout, and the op that produced it (if tracked).

This module holds what every tensor is (inspection, getting values out, dtype/device
moves, copies) and how results are wrapped (``Tensor._wrap``); the op families live in
``ops_*.py`` mixins and the constructors in ``constructors.py``. Every op validates at
this layer, calls one backend storage method, and wraps the new storage in a tensor
with an interned contiguous layout.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .constructors import Constructors, storage_from_array, storage_of
from .custom_op import CustomOpMethods
from .device import Device, cpu
from .errors import ShapeMismatchError, TallowError
from .layout import Layout
from .op import record1
from .ops_conv import ConvOps
from . import ops_elementwise
from .ops_elementwise import ElementwiseOps
from .ops_index import IndexOps
from .ops_inplace import InplaceOps
from .ops_linalg import LinalgOps
from .ops_reduce import ReduceOps
from .ops_torch import TorchMethods
from .ops_torch_names import TorchNamedOps
from .ops_views import ViewOps
from .numpy_protocol import NumpyProtocol
from .tensor_base import TensorBase, new_id

_contig = Layout.contiguous_of


class Strides(tuple):
    """A tensor's strides: a tuple (candle-pyo3's ``t.stride``), callable as PyTorch's
    ``t.stride()`` / ``t.stride(dim)``."""

    __slots__ = ()

    def __call__(self, dim=None):
        return tuple(self) if dim is None else self[dim]
_new = object.__new__


class Tensor(Constructors, ViewOps, ElementwiseOps, ReduceOps, IndexOps, InplaceOps, LinalgOps,
             ConvOps, CustomOpMethods, TorchNamedOps, TorchMethods, NumpyProtocol,
             TensorBase):
    """An n-dimensional array on a device: ``Tensor(data, dtype=None, device=None)``
    copies Python data, a NumPy array or another tensor."""

    __slots__ = ()
    # NumPy defers its binary operators to ours (``ndarray + tensor`` -> __radd__).
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, device=None):
        self._storage, self._layout = storage_of(data, dtype, device)
        self._op = None
        self._track = False
        self._id = new_id()

    @staticmethod
    def _wrap(storage, layout, op=None) -> "Tensor":
        """The tensor over a new ``storage`` with ``layout``; ``op`` is its recorded op or
        None. Every op's result is made here (a Var's ops give plain tensors too), except
        that ``+ - *`` on equal shapes assemble theirs inline with the same fields
        (``ops_elementwise.operator``)."""
        t = _new(Tensor)
        t._storage = storage
        t._layout = layout
        t._op = op
        t._track = op is not None
        t._id = new_id()
        return t

    # -- inspection -----------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """The dims as a tuple."""
        return self._layout.shape

    @property
    def dims(self) -> tuple:
        """The dims as a tuple (= ``shape``)."""
        return self._layout.shape

    @property
    def stride(self) -> "Strides":
        """The strides, in elements, as a tuple (candle-pyo3's property) that can also be
        called as PyTorch's method: ``t.stride()`` is the tuple, ``t.stride(d)`` one."""
        return Strides(self._layout.stride)

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self._layout.shape)

    @property
    def nelement(self) -> int:
        """The number of elements (a property; PyTorch's ``numel()`` is the method)."""
        return self._layout.count

    @property
    def elem_count(self) -> int:
        """The number of elements."""
        return self._layout.count

    @property
    def dtype(self):
        """The element type (a ``tl.DType``)."""
        return self._storage.dtype

    @property
    def device(self) -> Device:
        """The device the storage lives on."""
        return self._storage.bdev.handle

    @property
    def layout(self) -> Layout:
        """The layout: shape, strides and start offset into the storage."""
        return self._layout

    @property
    def id(self) -> int:
        """A number unique to this tensor object (kept by ``clone``)."""
        return self._id

    @property
    def op(self):
        """The recorded op that produced this tensor (None when untracked)."""
        return self._op

    def is_contiguous(self) -> bool:
        """True when the elements are laid out row-major without gaps."""
        return self._layout.contiguous

    def is_fortran_contiguous(self) -> bool:
        """True when the elements are laid out column-major without gaps."""
        return self._layout.is_fortran_contiguous()

    def storage_and_layout(self):
        """``(storage, layout)``: the shared buffer and how this tensor views it."""
        return self._storage, self._layout

    def track_op(self) -> bool:
        """True when ops on this tensor are recorded (a Var, or a result computed from one)."""
        return self._track

    def is_variable(self) -> bool:
        """True for a ``tl.Var``."""
        return False

    def _dims_n(self, n):
        shape = self._layout.shape
        if len(shape) != n:
            raise ShapeMismatchError(f"dims{n}: expected rank {n}, got shape {shape}")
        return shape[0] if n == 1 else shape

    def dims0(self):
        """Check the tensor is rank 0 and return ``()``."""
        self._dims_n(0)
        return ()

    def dims1(self):
        """The one dim of a rank-1 tensor (else ``ShapeMismatchError``)."""
        return self._dims_n(1)

    def dims2(self):
        """The dims of a rank-2 tensor (else ``ShapeMismatchError``)."""
        return self._dims_n(2)

    def dims3(self):
        """The dims of a rank-3 tensor (else ``ShapeMismatchError``)."""
        return self._dims_n(3)

    def dims4(self):
        """The dims of a rank-4 tensor (else ``ShapeMismatchError``)."""
        return self._dims_n(4)

    def dims5(self):
        """The dims of a rank-5 tensor (else ``ShapeMismatchError``)."""
        return self._dims_n(5)

    # -- values out -------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (a view of the buffer on the CPU; a copy from a GPU).

        On the CPU writes to the array show in the tensor, as with PyTorch's ``numpy()``.
        """
        s = self._storage
        writable = getattr(s, "to_numpy_writable", None)
        return writable(self._layout) if writable is not None else s.to_numpy(self._layout)

    def _host(self) -> np.ndarray:
        """The values on the host for reading inside tallow (a view on the CPU; unlike
        ``numpy()``, handing it out is not expected, so the buffer stays unshared)."""
        return self._storage.to_numpy(self._layout)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def _pyvalues(self):
        arr = self._host()
        if self._storage.dtype in (dt.f16, dt.bf16):
            arr = arr.astype(np.float32)
        return arr.tolist()

    def values(self):
        """A Python scalar (rank 0) or nested lists of Python numbers."""
        return self._pyvalues()

    tolist = values

    def _rank_checked(self, rank: int, what: str):
        if self.rank != rank:
            raise ShapeMismatchError(f"{what}: expected a rank-{rank} tensor, got shape {self.shape}")
        return self._pyvalues()

    def to_scalar(self):
        """The value of a rank-0 tensor as a Python number."""
        return self._rank_checked(0, "to_scalar")

    def to_vec0(self):
        """The value of a rank-0 tensor as a Python number."""
        return self._rank_checked(0, "to_vec0")

    def to_vec1(self):
        """A rank-1 tensor's values as a list."""
        return self._rank_checked(1, "to_vec1")

    def to_vec2(self):
        """A rank-2 tensor's values as nested lists."""
        return self._rank_checked(2, "to_vec2")

    def to_vec3(self):
        """A rank-3 tensor's values as nested lists."""
        return self._rank_checked(3, "to_vec3")

    def item(self):
        """The value of a one-element tensor (any rank) as a Python number."""
        if self._layout.count != 1:
            raise ShapeMismatchError(
                f"item: the tensor has {self.nelement} elements (shape {self.shape}), not 1; "
                "reduce it first (.sum(), .mean()) or read them all with .tolist() or "
                ".numpy()")
        return self.flatten_all()._pyvalues()[0]

    def __dlpack__(self, *args, **kwargs):
        """DLPack export: the buffer itself for a contiguous CPU tensor (a copy otherwise)."""
        arr = np.asarray(self.numpy(), order="C")
        dtype = self._storage.dtype
        if dtype in _TORCH_DLPACK:
            # NumPy's DLPack export knows no bfloat16 or float8; PyTorch's does (same buffer).
            try:
                import torch
            except ImportError:
                raise BufferError(f"__dlpack__: exporting {dtype} needs PyTorch installed") from None
            bits, name = _TORCH_DLPACK[dtype]
            raw = torch.from_numpy(arr.view(bits))
            return raw.view(getattr(torch, name)).__dlpack__(*args, **kwargs)
        if dtype.is_small_float:
            raise BufferError(
                f"__dlpack__: DLPack exporters here (NumPy, PyTorch) have no {dtype} of one "
                "byte per element; convert with to_dtype(tl.f32) or share numpy()")
        return arr.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: the exported array is a host copy on other devices

    def to_torch(self):
        """A PyTorch CPU tensor with a copy of the values (u32 becomes int64; the 6- and
        4-bit floats, which PyTorch lacks, become float32, exactly)."""
        import torch

        arr = np.asarray(self._host(), order="C")
        dtype = self._storage.dtype
        if dtype in _TORCH_DLPACK:
            bits, name = _TORCH_DLPACK[dtype]
            return torch.from_numpy(arr.view(bits).copy()).view(getattr(torch, name))
        if dtype.is_small_float:
            return torch.from_numpy(arr.astype(np.float32))
        if dtype is dt.u32:
            return torch.from_numpy(arr.astype(np.int64))
        return torch.from_numpy(arr.copy())

    def __repr__(self):
        arr = self._host()
        if self._storage.dtype is dt.bf16:
            arr = arr.astype(np.float32)
        body = np.array2string(arr, separator=", ", threshold=200, edgeitems=3)
        # candle omits the CPU; the contract shows every tensor's device.
        return f"{body}\nTensor[{list(self.shape)}, {self.dtype}, {self.device}]"

    def __str__(self):
        """A rank-0 tensor prints as its value on one line (``0.25``); others as repr."""
        if not self._layout.shape:
            arr = self._host()
            if self._storage.dtype is dt.bf16:
                arr = arr.astype(np.float32)
            return str(arr[()])
        return self.__repr__()

    def __format__(self, spec):
        """``f"{loss:.4f}"``: a format spec formats the value of a one-element tensor."""
        if not spec:
            return str(self)
        if self._layout.count != 1:
            raise TypeError(
                f"format spec {spec!r} needs a one-element tensor, got shape {self.shape}")
        return format(self.item(), spec)

    def __len__(self):
        if not self._layout.shape:
            raise TypeError("len() of a rank-0 tensor")
        return self._layout.shape[0]

    def __iter__(self):
        if not self._layout.shape:
            raise TypeError("iteration over a rank-0 tensor")
        for i in range(self._layout.shape[0]):
            yield self.get(i)

    def __bool__(self):
        if self._layout.count != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.nelement} elements is ambiguous"
            )
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if not self._storage.dtype.is_int or self._layout.count != 1:
            raise TypeError("only single-element integer tensors can be used as an index")
        return int(self.item())

    __hash__ = object.__hash__

    def __reduce__(self):
        return (_rebuild, (np.asarray(self._host(), order="C").copy(), str(self.dtype), str(self.device)))

    # -- dtype and device moves -----------------------------------------------------
    def to_dtype(self, dtype) -> "Tensor":
        """The values converted to ``dtype`` (self when already that dtype); float to int truncates and saturates, as Rust's ``as``."""
        dtype = dt.DType.parse(dtype)
        s = self._storage
        if dtype is s.dtype:
            return self
        s.bdev.check_dtype(dtype, "to_dtype")
        out = s.to_dtype(self._layout, dtype)
        return self._wrap(out, _contig(self._layout.shape), record1("to_dtype", self, s.dtype))

    def to_device(self, device) -> "Tensor":
        """The tensor on ``device`` (self when already there)."""
        device = Device.parse(device)
        s = self._storage
        if device._state is s.bdev:
            return self
        arr = np.asarray(s.to_numpy(self._layout), order="C")
        out = storage_from_array(arr, s.dtype, device, copy=True)
        return self._wrap(out, _contig(self._layout.shape), record1("to_device", self, self.device))

    def cpu(self) -> "Tensor":
        """``to_device(tl.cpu)``."""
        return self.to_device(cpu)

    def gpu(self, ordinal: int = 0) -> "Tensor":
        """``to_device(tl.Device.gpu(ordinal))``."""
        return self.to_device(Device.gpu(ordinal))

    def cuda(self, device=None) -> "Tensor":
        """PyTorch's ``cuda()``: tallow has no CUDA backend, so this raises with the call
        to write instead (``x.to("gpu")``, the WebGPU device)."""
        raise TallowError(
            "cuda(): tallow has no CUDA backend; its GPU device is 'gpu' (WebGPU): write "
            "x.to('gpu') or x.gpu(), and model.to('gpu') for a model")

    def to(self, *args, **kwargs) -> "Tensor":
        """Dtype and/or device conversion, with candle-pyo3's argument rules."""
        device = dtype = other = None

        def put(slot, value, what):
            if slot is not None:
                raise ValueError(f"to: cannot specify multiple {what}")
            return value

        for arg in args:
            if isinstance(arg, Tensor):
                other = put(other, arg, "output tensors")
            elif isinstance(arg, Device):
                device = put(device, arg, "devices")
            elif isinstance(arg, dt.DType):
                dtype = put(dtype, arg, "dtypes")
            elif isinstance(arg, str):
                try:
                    d = Device.parse(arg)
                except TallowError as device_error:
                    try:
                        d = dt.DType.parse(arg)
                    except TallowError:
                        if arg.strip().lower().partition(":")[0] in ("cuda", "metal", "mps"):
                            raise device_error from None  # says which device to use instead
                        raise TypeError(f"to: {arg!r} is neither a device nor a dtype") from None
                    dtype = put(dtype, d, "dtypes")
                else:
                    device = put(device, d, "devices")
            else:
                raise TypeError(f"to: unsupported argument type {type(arg).__name__}")
        for key, value in kwargs.items():
            if key == "dtype":
                dtype = put(dtype, dt.DType.parse(value), "dtypes")
            elif key == "device":
                device = put(device, Device.parse(value), "devices")
            elif key == "other":
                if not isinstance(value, Tensor):
                    raise TypeError("to: other must be a Tensor")
                other = put(other, value, "output tensors")
            else:
                raise TypeError(f"to: unexpected keyword argument {key!r}")
        if other is not None:
            if device is not None:
                raise ValueError("to: cannot specify both an output tensor and a device")
            if dtype is not None:
                raise ValueError("to: cannot specify both an output tensor and a dtype")
            device, dtype = other.device, other.dtype
        if device is None and dtype is None:
            raise TypeError("to: no valid dtype or device specified")
        out = self
        if device is not None:
            out = out.to_device(device)
        if dtype is not None:
            out = out.to_dtype(dtype)
        return out

    # -- copies -------------------------------------------------------------------------
    def contiguous(self) -> "Tensor":
        """Self when already contiguous, else a contiguous copy."""
        if self._layout.contiguous:
            return self
        return self._copy_op("contiguous")

    def force_contiguous(self) -> "Tensor":
        """Always a compact contiguous copy of just this tensor's elements."""
        return self._copy_op("force_contiguous")

    def copy(self) -> "Tensor":
        """An independent, compact, contiguous copy (never shares the buffer)."""
        return self._copy_op("copy")

    def _copy_op(self, name):
        out = self._storage.copy_strided(self._layout)
        return self._wrap(out, _contig(self._layout.shape), record1(name, self))

    def detach(self) -> "Tensor":
        """The same storage and layout, with no op: nothing behind it is tracked."""
        if not self._track:
            return self
        return self._wrap(self._storage, self._layout)

    def clone(self) -> "Tensor":
        """PyTorch's clone, free as candle's: a write to either tensor is never seen by
        the other, yet nothing is copied now. The clone gets its own storage handle over
        the same buffer (copy-on-write: the first side written in place gets a private
        copy, backends/shared_buffer.py); layout, op and id stay, as in candle, so
        gradients flow through it to this tensor."""
        t = object.__new__(type(self))
        s = self._storage
        share = getattr(s, "share_buffer", None)
        t._storage = share() if share is not None else s
        t._layout, t._op, t._track, t._id = self._layout, self._op, self._track, self._id
        return t

    __copy__ = clone

    def equal(self, other) -> bool:
        """True when ``other`` is a tensor of the same shape with equal values
        (``torch.equal``: dtypes promote, so a bool True equals a u8 1)."""
        if not isinstance(other, Tensor) or other.shape != self.shape:
            return False
        mine, theirs = self._host(), other.to_device(self.device)._host()
        if other.dtype is not self.dtype:
            common = dt.promote_types(self.dtype, other.dtype).np
            mine, theirs = mine.astype(common), theirs.astype(common)
        return bool(np.array_equal(mine, theirs))

    # ``quantize`` (tallow.quantized.qtensor) and ``backward`` / ``sorted_nodes``
    # (tallow.backprop) are methods of Tensor defined by the modules built on it, as
    # candle's backprop.rs and quantized/ add their own ``impl Tensor`` blocks: Tensor
    # imports neither (``import tallow`` loads both).


# ``+ - *`` on Tensor assemble their result inline (a Python call less on every
# chained op's path; the same fields as ``_wrap``).
for _name in ops_elementwise.SYMBOLS:
    setattr(Tensor, f"__{_name}__", ops_elementwise.operator(_name, Tensor))
del _name


# dtypes exported through a PyTorch view of the same bytes: (raw NumPy type, torch dtype).
_TORCH_DLPACK = {dt.bf16: (np.int16, "bfloat16"), dt.f8e4m3: (np.uint8, "float8_e4m3fn"),
                 dt.f8e8m0: (np.uint8, "float8_e8m0fnu")}


def _rebuild(arr, dtype, device):
    return Tensor(arr, dtype=dtype, device=device)

