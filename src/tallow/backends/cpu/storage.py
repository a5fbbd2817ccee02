"""CPU storage: one C-contiguous NumPy array (a flat buffer of one dtype).

A layout over it is read as a NumPy strided view built directly on the buffer
(no copy). The last view built is cached by layout identity: tensors produced by
ops get interned contiguous layouts, so the common case is a tuple compare.

The kernels live in sibling modules (elementwise, reduce, matmul, indexing,
conv), written as functions of the storage and bound here as its methods.
"""

from __future__ import annotations

import numpy as np

from ...layout import Layout
from ..base import BackendStorage

_new = object.__new__
_contig = Layout.contiguous_of


class CpuStorage(BackendStorage):
    __slots__ = ("arr", "dtype", "_vc", "__weakref__")

    def __init__(self, arr: np.ndarray, dtype):
        self.arr = arr
        self.dtype = dtype
        self._vc = None

    @staticmethod
    def from_flat(flat: np.ndarray, dtype) -> "CpuStorage":
        s = _new(CpuStorage)
        s.arr = flat
        s.dtype = dtype
        s._vc = None
        return s

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
        return self.arr.reshape(-1)

    def __array__(self, dtype=None, copy=None):
        flat = self.arr.reshape(-1)
        if dtype is not None and np.dtype(dtype) != flat.dtype:
            return flat.astype(dtype)
        return flat.copy() if copy else flat

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

    # -- copies and in-place writes ------------------------------------------------
    def copy_strided(self, layout):
        from . import parallel

        return wrap(parallel.copy(self.view(layout)), self.dtype)

    def copy_into_inplace(self, dst_layout, src, src_layout):
        np.copyto(self.view(dst_layout), src.view(src_layout))

    def fill_inplace(self, layout, value):
        self.view(layout)[...] = value


def wrap(arr: np.ndarray, dtype) -> CpuStorage:
    """A storage owning a freshly computed array (made C-contiguous if it is not)."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    s = _new(CpuStorage)
    s.arr = arr
    s.dtype = dtype
    s._vc = (_contig(arr.shape), arr)
    return s


def _bind():
    from . import conv, elementwise, fused, indexing, matmul, reduce

    for module in (elementwise, reduce, matmul, indexing, conv, fused):
        for name in module.METHODS:
            setattr(CpuStorage, name, getattr(module, name))


_bind()
