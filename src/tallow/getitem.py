"""``t[index]``: NumPy's indexing (basic and advanced), on every device.

Basic indices — ints, slices, ``None``, ``...`` — make views: an int picks (and
drops) a dim, a slice narrows it (steps > 1 are strided views, steps < 0 a
reversed copy), ``None`` adds a size-1 dim.

Any array index (an int list, a NumPy int array, an integer tensor, or a boolean
mask, which counts as the int arrays of its nonzero positions) makes the index
advanced, with NumPy's rules: the arrays (and the ints beside them, as 0-d
arrays) broadcast together and select pointwise, so ``x[[0, 1], [1, 0]]`` is
``[x[0, 1], x[1, 0]]``; the broadcast dims stand where the arrays stood when the
arrays are adjacent, and in front when a slice, ``None`` or ``...`` separates
them. The result is a new tensor.

It runs as one ``index_select``: the basic items first (a view), then the
indexed dims brought together and merged into one, whose flat ids are the
arrays' row-major combination. So gradients flow (``index_select``'s backward
adds into the input), and a GPU tensor is indexed on the GPU.
"""

from __future__ import annotations

import numpy as np

from .candle_index import ids_on, int_index, select_ids, slice_dim
from .index_items import FULL, GAP, Ids, broadcast_ids, read_index, bare_bool_view

__all__ = ["getitem", "int_index"]


def basic_view(t, items):
    """``t`` through the basic items (ints, slices, None; an ``Ids`` keeps its dim
    whole): a view, except that a negative-step slice copies."""
    out = t
    dim = 0
    for item in items:
        if item is None:
            out = out.unsqueeze(dim)
            dim += 1
        elif item is GAP:
            continue
        elif item is FULL:
            dim += 1  # a dim that ``...`` covers
        elif isinstance(item, slice):
            out = slice_dim(out, dim, item)
            dim += 1
        elif isinstance(item, Ids):
            dim += 1
        else:
            out = int_index(out, dim, item)
    return out


def advanced_plan(items):
    """Where the arrays go: ``(view_items, array_dims, array_items, adjacent)``: the
    items with every int turned into a 0-d array (NumPy counts ints as arrays once
    any array is present), the dims the arrays index in the basic view, and whether
    they stand next to each other in the index (then their dims stay in place)."""
    view_items, dims, arrays = [], [], []
    dim = 0
    adjacent = True
    last = None  # the position in ``items`` of the previous array
    for pos, item in enumerate(items):
        view_items.append(item)
        if item is GAP:
            continue
        if isinstance(item, int):
            item = view_items[-1] = Ids(host=np.asarray(item, dtype=np.int64))
        if isinstance(item, Ids):
            adjacent = adjacent and (last is None or last == pos - 1)
            last = pos
            dims.append(dim)
            arrays.append(item)
        dim += 1
    return view_items, dims, arrays, adjacent


def merged_ids(hosts, sizes):
    """Row-major flat ids over the dims of ``sizes`` for the broadcast ``hosts``."""
    flat = np.zeros(hosts[0].shape, dtype=np.int64)
    for ids, n in zip(hosts, sizes):
        flat = flat * n + ids
    return flat


def getitem(t, index):
    view = bare_bool_view(t, index)
    if view is not None:
        return view
    items, has_arrays = read_index(t, index, keep_tensor_ids=True)
    if not has_arrays:
        return basic_view(t, items)
    view_items, dims, arrays, adjacent = advanced_plan(items)
    view = basic_view(t, view_items)
    k = len(dims)
    if k == 1 and arrays[0].device_ids is not None:
        # One id tensor: index with it as it is (on a GPU, reading it back would wait).
        out, _ = select_ids(view, dims[0], arrays[0].device_ids)
        return out
    shape = view.shape
    sizes = [shape[d] for d in dims]
    hosts = broadcast_ids(arrays, sizes, dims)
    if adjacent:
        at = dims[0]
    else:
        at = 0
        view = view.permute(tuple(dims) + tuple(d for d in range(len(shape)) if d not in dims))
    vshape = view.shape
    merged = 1
    for n in sizes:
        merged *= n
    if k > 1:
        view = view.reshape(vshape[:at] + (merged,) + vshape[at + k:])
    flat = merged_ids(hosts, sizes)
    out = view.index_select(ids_on(view, flat.reshape(-1), view.device), at)
    rest = vshape[at + k:]
    return out.reshape(vshape[:at] + flat.shape + rest)
