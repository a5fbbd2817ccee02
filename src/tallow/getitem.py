"""``t[index]`` / ``t.i(index)``, as candle-pyo3 does it, plus strided slices.

Ints pick (and drop) a dim, slices narrow it (steps > 1 are strided views, steps
< 0 a reversed copy), ``...`` stands for the remaining dims, ``None`` adds a
size-1 dim, and lists or integer tensors select with ``index_select`` (one dim
at a time, as candle-pyo3).
"""

from __future__ import annotations

import numpy as np

from .errors import DimOutOfRangeError, IndexOutOfRangeError
from .tensor_base import TensorBase


def int_index(t, dim, index):
    size = t._layout.shape[dim]
    i = int(index)
    if i < 0:
        i += size
    if not 0 <= i < size:
        raise IndexOutOfRangeError(
            f"index {index} is out of range for dim {dim} of size {size}"
        )
    return t.narrow(dim, i, 1).squeeze(dim)


def _host_ids(index, size, dim):
    """A list or array of ids as i64 with negative ids counted from the end."""
    arr = np.asarray(index)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        # A bool list is a mask to NumPy and PyTorch, a float one an error: casting
        # either to ids would pick other rows than the user meant.
        raise TypeError(f"index lists must hold integers, got {arr.dtype}")
    if arr.size:
        lo = int(arr.min())
        if lo < -size:
            raise IndexOutOfRangeError(
                f"index {lo} is out of range for dim {dim} of size {size}"
            )
        if int(arr.max()) > np.iinfo(np.int64).max:
            raise IndexOutOfRangeError(
                f"index {int(arr.max())} is out of range for dim {dim} of size {size}"
            )
        arr = arr.astype(np.int64)
        if lo < 0:
            arr = np.where(arr < 0, arr + size, arr)
    return arr


def _select(t, dim, index):
    size = t._layout.shape[dim]
    if not isinstance(index, TensorBase):
        ids = t.new(_host_ids(index, size, dim), device=t.device)
    else:
        ids = index
        if not ids.dtype.is_int:
            raise TypeError(f"an index tensor must have an integer dtype, got {ids.dtype}")
        ids = ids.to_device(t.device)
        # Negative ids count from the end, as in Python.
        if ids.dtype.name == "i64":
            arr = ids._host() if ids.device.kind == "cpu" else None
            if arr is not None and arr.size and arr.min() < 0:
                ids = t.new(_host_ids(arr, size, dim))
            elif arr is None and ids.nelement:
                # On a GPU: wrap on the device (reading the ids back would wait).
                ids = ids.lt(0).where_cond(ids + size, ids)
    shape = ids.shape
    out = t.index_select(ids.flatten_all() if len(shape) != 1 else ids, dim)
    if len(shape) != 1:
        full = t._layout.shape
        out = out.reshape(full[:dim] + shape + full[dim + 1:])
    return out, len(shape)


def getitem(t, index):
    if not isinstance(index, tuple):
        index = (index,)
    n_ellipsis = sum(1 for i in index if i is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(
        1 for i in index
        if i is not None and i is not Ellipsis
    )
    rank = t.rank
    if consumed > rank:
        raise DimOutOfRangeError(
            f"too many indices ({consumed}) for a tensor of rank {rank} (shape {t.shape})"
        )
    out = t
    dim = 0
    for item in index:
        if item is Ellipsis:
            dim += rank - consumed
        elif item is None:
            out = out.unsqueeze(dim)
            dim += 1
        elif isinstance(item, slice):
            size = out._layout.shape[dim]
            start, stop, step = item.indices(size)
            if step > 0:
                length = max(0, (stop - start + step - 1) // step)
                out = out._slice_step(dim, start, length, step)
            else:
                ids = list(range(start, stop, step))
                out = out.index_select(out.new(np.asarray(ids, dtype=np.int64), device=out.device), dim)
            dim += 1
        elif isinstance(item, (list, np.ndarray)) or (
            isinstance(item, TensorBase) and item.rank > 0
        ):
            out, added = _select(out, dim, item)
            dim += added
        elif isinstance(item, bool):
            raise TypeError("boolean indices are not supported")
        elif isinstance(item, TensorBase):
            out = int_index(out, dim, item.item())
        else:
            try:
                i = int(item.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"unsupported index type {type(item).__name__}") from None
            out = int_index(out, dim, i)
    return out
