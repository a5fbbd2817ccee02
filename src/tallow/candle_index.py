"""``t.i(index)``: candle's indexing, each item applied to its dim in turn.

candle's ``i`` (a name PyTorch and NumPy do not have, so it keeps candle's
meaning) narrows, selects or ``index_select``s one dim per item, so two id lists
give every pair of their ids (an outer product), where ``t[...]`` (NumPy's
advanced indexing, ``getitem.py``) pairs them. Ints pick (and drop) a dim,
slices narrow it (steps > 1 are strided views, steps < 0 a reversed copy),
``...`` stands for the remaining dims, ``None`` adds a size-1 dim, and a bool
or u8 tensor, a NumPy bool array or a list of bools is a mask over the dims it
covers, flattened into one dim.

The helpers here (one dim's ids on the host or the device, one dim's select) are
shared with ``getitem.py``.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .errors import DimOutOfRangeError, IndexOutOfRangeError
from .index_items import checked_ids
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


_SIGNED = ("i64", "i32", "i16", "i8")
# The dtypes whose max index_select reads as candle's "no id" (a slice of zeros).
_NO_ID = ("u32", "i64")


def ids_on(t, arr, device):
    """Host ids (i64) as a tensor on ``device``: u32 where it has no i64 (ids here are
    non-negative and below the indexed size)."""
    if not device.supports_dtype(dt.i64):
        arr = arr.astype(np.uint32)
    return t.new(arr, device=device)


def slice_dim(t, dim, item: slice):
    """``t`` sliced along ``dim`` by a Python slice: a view for a positive step, a
    selection of the ids for a negative one (NumPy's reversed slices)."""
    start, stop, step = item.indices(t._layout.shape[dim])
    if step > 0:
        return t._slice_step(dim, start, max(0, (stop - start + step - 1) // step), step)
    ids = np.arange(start, stop, step, dtype=np.int64)
    return t.index_select(ids_on(t, ids, t.device), dim)


def select_ids(t, dim, index):
    """``t`` with ``dim`` replaced by the dims of ``index`` (ids of any shape), and
    how many dims they are."""
    size = t._layout.shape[dim]
    if not isinstance(index, TensorBase):
        ids = ids_on(t, _host_ids(index, size, dim), t.device)
    else:
        ids = index
        if not ids.dtype.is_int:
            raise TypeError(f"an index tensor must have an integer dtype, got {ids.dtype}")
        ids = ids.to_device(t.device)
        if ids.device.kind == "cpu":
            arr = ids._host()
            # Negative ids count from the end, as in Python; an id past the end raises
            # here (index_select would read its dtype's max as "no id" and give zeros).
            if arr.size and (arr.min() < 0 or arr.max() >= size):
                ids = ids_on(t, checked_ids(arr, size, dim), t.device)
        elif ids.nelement:
            # On a GPU, on the device (reading the ids back would wait): wrap negative
            # ids, and turn every id past the end into one index_select's check
            # raises for (its dtype's max is its "no id").
            given = ids
            if ids.dtype.name in _SIGNED:
                ids = ids.lt(0).where_cond(ids + size, ids)
            if ids.dtype.name in _NO_ID:
                ids = ids.masked_fill(ids.ge(size), size)
            try:
                return _select_flat(t, dim, ids)
            except IndexOutOfRangeError:
                # Name the id as given (read back: this is the error path).
                checked_ids(np.asarray(given.numpy()), size, dim)
                raise
    return _select_flat(t, dim, ids)


def _select_flat(t, dim, ids):
    shape = ids.shape
    out = t.index_select(ids.flatten_all() if len(shape) != 1 else ids, dim)
    if len(shape) != 1:
        full = t._layout.shape
        out = out.reshape(full[:dim] + shape + full[dim + 1:])
    return out, len(shape)


def _as_mask(t, item):
    """``item`` as a u8 mask tensor when it is a boolean mask, else None."""
    if isinstance(item, TensorBase):
        return item if item.dtype.name in ("u8", "bool") and item.rank > 0 else None
    if isinstance(item, np.ndarray):
        return t.new(item.astype(np.uint8)) if item.dtype == np.bool_ and item.ndim > 0 else None
    if isinstance(item, list) and item and all(isinstance(v, (bool, np.bool_)) for v in _leaves(item)):
        return t.new(np.asarray(item, dtype=np.uint8))
    return None


def _leaves(items):
    for v in items:
        if isinstance(v, list):
            yield from _leaves(v)
        else:
            yield v


def _mask_select(t, dim, mask):
    """The elements of ``t`` where ``mask`` (covering dims dim..dim+k) is nonzero."""
    k = mask.rank
    covered = t._layout.shape[dim:dim + k]
    if mask.shape != covered:
        raise IndexOutOfRangeError(
            f"boolean mask of shape {mask.shape} does not match the dims it indexes "
            f"({covered}, dims {dim}..{dim + k - 1} of shape {t.shape})"
        )
    # The result's length depends on the mask's values: they are read on the host
    # (as PyTorch synchronises for x[mask]).
    ids = np.flatnonzero(np.asarray(mask.numpy())).astype(np.int64)
    shape = t._layout.shape
    n = 1
    for size in covered:
        n *= size
    flat = t.reshape(shape[:dim] + (n,) + shape[dim + k:]) if k != 1 else t
    return flat.index_select(ids_on(t, ids, t.device), dim)


def _consumes(t, item) -> int:
    """How many of the indexed tensor's dims an index item uses."""
    if item is None or item is Ellipsis:
        return 0
    mask = _as_mask(t, item)
    return mask.rank if mask is not None else 1


def sequential_getitem(t, index):
    """candle's ``t.i(index)``: each item applied to its dim in turn."""
    if not isinstance(index, tuple):
        index = (index,)
    n_ellipsis = sum(1 for i in index if i is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(_consumes(t, i) for i in index)
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
            out = slice_dim(out, dim, item)
            dim += 1
        elif isinstance(item, (list, np.ndarray)) or (
            isinstance(item, TensorBase) and item.rank > 0
        ):
            mask = _as_mask(t, item)
            if mask is not None:
                out = _mask_select(out, dim, mask.to_device(out.device))
                dim += 1
            else:
                out, added = select_ids(out, dim, item)
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
