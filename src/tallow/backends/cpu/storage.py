"""CPU storage: one C-contiguous NumPy array (a flat buffer of one dtype).

A layout over it is read as a NumPy strided view built directly on the buffer
(no copy). The last view built is cached by layout identity: tensors produced by
ops get interned contiguous layouts, so the common case is a tuple compare.

Writes are tracked so derived data can be cached safely (see ``matmul``'s
transposed-operand cache): every in-place write through tallow bumps a version,
and a buffer that may be written from outside tallow (one given to ``from_vec``,
or handed out writable through ``np.asarray(storage)`` / ``Tensor.numpy()``) is
marked *shared* and never cached from. The metadata is created on first need,
so fresh op results pay nothing for it.

``CpuStorage`` is ``CpuCore`` (the buffer, its views and write tracking) plus
one mixin per family of ops, each in its own module (``elementwise``, ``reduce``,
``matmul``, ``indexing``, ``conv``, ``copy``, ``fused``, ``quantized``); every op
returns a new storage through ``self._wrap``. The same modules, with the same
roles, make up ``GpuStorage``.
"""

from __future__ import annotations

import numpy as np

from ...layout import Layout
from ..base import BackendStorage
from ..shared_buffer import CAPTURE, share_of
from . import parallel
from .conv import CpuConv
from .copy import CpuCopy
from .elementwise import CpuElementwise
from .fused import CpuFused
from .indexing import CpuIndexing
from .losses import CpuLosses
from .matmul import CpuMatmul
from .quantized import CpuQuantized
from .reduce import CpuReduce

_new = object.__new__
_contig = Layout.contiguous_of


class WriteState:
    """Version of a buffer's contents, whether outside code may write it, caches."""

    __slots__ = ("version", "shared", "cache")

    def __init__(self, shared=False):
        self.version = 0
        self.shared = shared
        self.cache = None


class CpuCore:
    """The buffer, its strided views and its write tracking; ops come from the mixins."""

    # ``_ws`` (a WriteState) is left unset until something needs it; so is ``_cow``
    # (the BufferShare of a clone's handles, backends/shared_buffer.py).
    __slots__ = ("arr", "dtype", "_vc", "_ws", "_cow", "__weakref__")

    def __init__(self, arr: np.ndarray, dtype):
        self.arr = arr
        self.dtype = dtype
        self._vc = None

    @staticmethod
    def from_flat(flat: np.ndarray, dtype, shared: bool = False) -> "CpuStorage":
        """A storage over a flat C-contiguous array; ``shared``: outside code may write it."""
        s = _new(CpuStorage)
        s.arr = flat
        s.dtype = dtype
        s._vc = None
        if shared:
            s._ws = WriteState(shared=True)
        return s

    @staticmethod
    def adopt(arr: np.ndarray, dtype) -> "CpuStorage":
        """A storage owning a freshly made array nobody else holds (a C-contiguous copy
        is made first if it is not contiguous)."""
        return CpuCore._wrap(None, arr, dtype)

    # -- write tracking ------------------------------------------------------------
    def write_state(self) -> WriteState:
        ws = getattr(self, "_ws", None)
        if ws is None:
            ws = self._ws = WriteState()
        return ws

    def mark_written(self) -> None:
        ws = self.write_state()
        ws.version += 1
        ws.cache = None

    def mark_shared(self) -> None:
        """Outside code may now write the buffer: it must be this handle's alone."""
        self.own_buffer()
        ws = self.write_state()
        ws.shared = True
        ws.cache = None

    # -- copy-on-write (backends/shared_buffer.py) ----------------------------------
    def share_buffer(self) -> "CpuStorage":
        """A second handle over this buffer (a clone's), copied only when written.

        A buffer outside code may write (``from_vec``, a ``numpy()`` handed out) is
        copied now: such a write would otherwise show through both handles. So is one
        cloned while a compiled function records (shared_buffer.CAPTURE)."""
        ws = getattr(self, "_ws", None)
        if CAPTURE.active or (ws is not None and ws.shared):
            return self.copy_strided(_contig((self.arr.size,)))
        s = _new(CpuStorage)
        s.arr = self.arr
        s.dtype = self.dtype
        s._vc = None
        share_of(self).join(s)
        return s

    def own_buffer(self) -> None:
        """Before an in-place write: a private copy of the buffer if another handle
        shares it (the writer's views hold this handle and follow it)."""
        share = getattr(self, "_cow", None)
        if share is None:
            return
        copy = share.others_alive(self)
        share.leave(self)
        if copy:
            self.arr = self.arr.copy()
            self._vc = None
            if getattr(self, "_ws", None) is not None:
                self._ws = WriteState()  # a new buffer: no outside writer, no cache

    # -- identity ------------------------------------------------------------------
    @property
    def count(self) -> int:
        return self.arr.size

    @property
    def nbytes(self) -> int:
        return self.arr.nbytes

    @property
    def buffer_size(self) -> int:
        return self.arr.nbytes

    @property
    def ptr(self) -> int:
        return self.arr.__array_interface__["data"][0]

    @property
    def buf(self) -> np.ndarray:
        """The flat, writable element buffer."""
        self.mark_shared()
        return self.arr.reshape(-1)

    def __array__(self, dtype=None, copy=None):
        flat = self.arr.reshape(-1)
        if dtype is not None and np.dtype(dtype) != flat.dtype:
            return flat.astype(dtype)
        if copy:
            return flat.copy()
        self.mark_shared()
        return self.arr.reshape(-1)  # (mark_shared may have given this handle a new buffer)

    def __repr__(self):
        return f"CpuStorage({self.dtype}, count={self.count})"

    # -- views ---------------------------------------------------------------------
    def view(self, layout) -> np.ndarray:
        vc = self._vc
        if vc is not None and vc[0] is layout:
            return vc[1]
        arr = self.arr
        if layout.contiguous and layout.start_offset == 0 and layout.count == arr.size:
            v = arr.reshape(layout.shape)
        elif layout.count == 0:
            v = np.empty(layout.shape, arr.dtype)
        else:
            item = arr.itemsize
            v = np.ndarray(
                layout.shape, arr.dtype, buffer=arr, offset=layout.start_offset * item,
                strides=tuple(s * item for s in layout.stride),
            )
        self._vc = (layout, v)
        return v

    def to_numpy(self, layout):
        return self.view(layout)

    def to_numpy_writable(self, layout):
        """A view handed to outside code, which may write it (marks the buffer shared)."""
        self.mark_shared()
        return self.view(layout)

    def _wrap(self, arr: np.ndarray, dtype) -> "CpuStorage":
        """A new storage owning an op's freshly computed result (made C-contiguous if
        it is not). Ops return through it; ``self`` is not read. (A plain method,
        not a staticmethod: CPython's fast path for method calls applies.)"""
        if not arr.flags.c_contiguous:
            arr = parallel.copy(arr)
        s = _new(CpuStorage)
        s.arr = arr
        s.dtype = dtype
        s._vc = (_contig(arr.shape), arr)
        return s


# The protocol class comes last: its NotImplementedError defaults (optional ops)
# must not shadow the mixins' methods.
class CpuStorage(CpuCore, CpuElementwise, CpuReduce, CpuMatmul, CpuIndexing, CpuConv, CpuCopy,
                 CpuFused, CpuQuantized, CpuLosses, BackendStorage):
    """A CPU storage: a flat C-contiguous NumPy array of one dtype."""

    __slots__ = ()
