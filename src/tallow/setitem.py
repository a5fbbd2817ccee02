"""``t[index] = value`` and ``t.index_put_(indices, values, accumulate)``: writes
into the tensor's storage, with NumPy's meaning of the index (``getitem.py``).

A basic index (ints, forward slices, ``None``, ``...``) writes through the view
it makes. Any other index is read (``index_items.read_index``: every id checked
before anything is written) and turned into the row-major positions of the
elements it selects, in the order NumPy's ``t[index]`` returns them; the value,
cast to the tensor's dtype, is broadcast to that shape and scattered there. A
position named twice takes the last value written to it (NumPy's rule for
``a[[0, 0]] = [1, 2]``); with ``accumulate=True`` every value is added
(``index_put_``, as PyTorch).

The positions come from NumPy itself, indexing one zero-stride ``arange`` per
dim, so the selection is NumPy's for every mix of index kinds and costs memory
in proportion to the selection, not to the tensor.

On a tensor of a recorded graph (computed from a ``Var``), or with a value that is,
the write is recorded as PyTorch records it (tracked_writes.py).
"""

from __future__ import annotations

import math

import numpy as np

from .checks import is_scalar, scalar_for
from .flat_scatter import scatter_flat
from .getitem import basic_view
from .grad_mode import GRAD_MODE
from .index_items import GAP, Ids, read_index, bare_bool_view
from .inplace import update_in_place
from .ops_index import check_writable, source_for
from .tensor_base import TensorBase
from .tracked_writes import placed, read_apart
from .versions import bump


def _check_writable(t, op):
    """The in-place checks (and copy-on-write) before a write; an empty tensor has
    nothing to write (its strides may read as a broadcast's)."""
    if t.nelement:
        check_writable(t, op)


def _is_basic(items, has_arrays) -> bool:
    """True when the read index makes a view of the tensor (no array, no negative step)."""
    if has_arrays:
        return False
    return all(not isinstance(i, slice) or (i.step or 1) > 0 for i in items)


def _numpy_index(items, shape):
    """The read items as a NumPy index over ``shape`` (device ids read back)."""
    out, dim = [], 0
    for item in items:
        if item is None or item is GAP:
            out.append(None if item is None else Ellipsis)
            continue
        if isinstance(item, Ids):
            out.append(item.on_host(shape[dim], dim))
        else:
            out.append(item)
        dim += 1
    return tuple(out)


def selected_positions(shape, items):
    """Row-major positions of the elements ``items`` select, shaped as NumPy's result."""
    index = _numpy_index(items, shape)
    rank = len(shape)
    pos = None
    step = 1
    for d in range(rank - 1, -1, -1):
        along = np.arange(shape[d], dtype=np.int64) * step
        view = np.broadcast_to(along.reshape((-1,) + (1,) * (rank - 1 - d)), shape)
        part = view[index]
        pos = part if pos is None else pos + part
        step *= shape[d]
    if pos is None:  # rank 0
        pos = np.zeros((), dtype=np.int64)[index]
    return np.asarray(pos, dtype=np.int64)


def _scalar_value(value, dtype):
    """A scalar cast as PyTorch casts one into a tensor: a float into an integer
    tensor truncates toward zero."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not dtype.is_float and math.isfinite(value):
        value = math.trunc(value)
    return scalar_for("__setitem__", value, dtype)


def _scatter(t, positions, value, accumulate, op):
    """Write (or add) ``value`` broadcast to ``positions``' shape at those positions."""
    src = source_for(t, value, positions.shape, op).flatten_all().contiguous()
    if positions.size == 0:
        return
    flat = t.flatten_all() if t.is_contiguous() else t.copy().flatten_all()
    scatter_flat(flat, positions.reshape(-1), src, accumulate)
    if flat._storage is not t._storage:
        t._storage.copy_into_inplace(t._layout, flat._storage, flat.reshape(t.shape)._layout)
    bump(t._storage)


def _recorded(t, value) -> bool:
    """True when the write must be recorded: ``t`` or ``value`` is in a recorded graph."""
    return GRAD_MODE.enabled and (t._track or (isinstance(value, TensorBase) and value._track))


def _record_write(t, index, value, accumulate, op):
    """The write as PyTorch records it on a tensor of a graph (tracked_writes.py)."""
    items, _ = read_index(t, index)
    positions = selected_positions(t.shape, items)
    if isinstance(value, TensorBase) and value._storage is t._storage:
        value = read_apart(value)  # ``h[0] += 1`` writes the view h[0] back into h
    elif is_scalar(value):
        value = _scalar_value(value, t.dtype)
    update_in_place(t, op, lambda old: placed(old, positions, value, accumulate))


def setitem(t, index, value):
    """``t[index] = value``: write into t's storage (value broadcast, cast to t's dtype)."""
    view = bare_bool_view(t, index)
    if view is not None:  # writes through the view (nothing for a bare False)
        setitem(view, Ellipsis, value)
        return
    if _recorded(t, value):
        _record_write(t, index, value, False, "__setitem__")
        return
    _check_writable(t, "__setitem__")
    items, has_arrays = read_index(t, index)
    if _is_basic(items, has_arrays):
        view = basic_view(t, items)
        if is_scalar(value):
            t._storage.fill_inplace(view._layout, _scalar_value(value, t.dtype))
        else:
            src = source_for(t, value, view.shape, "__setitem__")
            t._storage.copy_into_inplace(view._layout, src._storage, src._layout)
        bump(t._storage)
        return
    positions = selected_positions(t.shape, items)
    if is_scalar(value):
        value = _scalar_value(value, t.dtype)
    _scatter(t, positions, value, False, "__setitem__")


def index_put_(t, indices, values, accumulate=False):
    """PyTorch's ``index_put_``: ``t[indices] = values``, or ``+=`` with every repeated
    index counted when ``accumulate`` is true; returns ``t``."""
    if not isinstance(indices, tuple):
        indices = tuple(indices) if isinstance(indices, list) else (indices,)
    for i in indices:
        if not isinstance(i, (TensorBase, np.ndarray, list)):
            raise TypeError(
                f"index_put_: indices must be a tuple of tensors (ids or masks), got a "
                f"{type(i).__name__}; use t[index] = v for ints and slices")
    if _recorded(t, values):
        _record_write(t, indices, values, bool(accumulate), "index_put_")
        return t
    _check_writable(t, "index_put_")
    items, _ = read_index(t, indices)
    positions = selected_positions(t.shape, items)
    if is_scalar(values):
        values = _scalar_value(values, t.dtype)
    _scatter(t, positions, values, bool(accumulate), "index_put_")
    return t
