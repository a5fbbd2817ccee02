"""Values written (or added) at flat positions of a 1-D contiguous tensor: the write
behind ``t[index] = v`` and ``index_put_``.

On the CPU it is one scatter (NumPy's assignment, ``np.add.at`` to accumulate).
A GPU's scatter kernel walks one column of ids per invocation, in order; a 1-D
tensor is a single column, so the whole write would run on one invocation, and
lavapipe ends a shader loop after 65,535 turns without a word. Here the
positions are spread over many columns of a zero-stride view of the tensor
(every column addresses the same elements), each column walking at most
``WALK`` ids:

* a write keeps only the last value for each position (NumPy's rule), so the
  columns touch distinct elements and run at once;
* an add splits the ids into layers of distinct positions (the k-th occurrence of
  every position in layer k), run one after another, so each position adds its
  values in their order; past ``MAX_LAYERS`` layers (one position named many
  times) the adds run in order on one column, ``LOOP_LIMIT`` ids per dispatch.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .layout import Layout

WALK = 64
MAX_LAYERS = 16
LOOP_LIMIT = 65535


def _ids_dtype(t):
    return dt.i64 if t.device.supports_dtype(dt.i64) else dt.u32


def _sentinel(ids_dtype):
    """The id every scatter skips (candle's "no id")."""
    return np.iinfo(ids_dtype.np).max


def _by_position(positions):
    """``(order, starts)``: a stable sort of the positions and where each run of equal
    positions starts in it; None when the positions already ascend strictly."""
    if positions.size < 2 or bool(np.all(positions[1:] > positions[:-1])):
        return None
    order = np.argsort(positions, kind="stable")
    ranked = positions[order]
    starts = np.ones(positions.size, dtype=bool)
    starts[1:] = ranked[1:] != ranked[:-1]
    return order, starts


def _last_of_each(positions):
    """Indices of each position's last occurrence (None when every position is
    named once)."""
    found = _by_position(positions)
    if found is None:
        return None
    order, starts = found
    last = np.ones(positions.size, dtype=bool)
    last[:-1] = starts[1:]
    if last.all():
        return None
    return np.sort(order[last])


def _occurrences(positions):
    """For each id, how many earlier ids name the same position."""
    found = _by_position(positions)
    if found is None:
        return np.zeros(positions.size, dtype=np.int64)
    order, starts = found
    index = np.arange(positions.size)
    rank_sorted = index - np.maximum.accumulate(np.where(starts, index, 0))
    rank = np.empty(positions.size, dtype=np.int64)
    rank[order] = rank_sorted
    return rank


def _take(src, picks):
    return src.index_select(src.new(picks.astype(_ids_dtype(src).np), device=src.device), 0)


def _scatter_columns(flat, positions, src, accumulate):
    """One dispatch: ``positions`` (distinct) spread over columns of ``WALK`` ids."""
    m = positions.size
    cols = -(-m // WALK)
    walk = -(-m // cols)
    pad = walk * cols - m
    ids_dtype = _ids_dtype(flat)
    ids = np.full(walk * cols, _sentinel(ids_dtype), dtype=ids_dtype.np)
    ids[:m] = positions
    ids_t = flat.new(ids.reshape(walk, cols), device=flat.device)
    values = src.pad_with_zeros(0, 0, pad) if pad else src
    values = values.reshape(walk, cols).contiguous()
    n = flat.shape[0]
    # Every column addresses the whole tensor (stride 0 across columns).
    view = Layout((n, cols), (1, 0), flat._layout.start_offset)
    flat._storage.scatter_inplace(view, ids_t._storage, ids_t._layout,
                                  values._storage, values._layout, 0, accumulate)


def _scatter_in_order(flat, positions, src, accumulate):
    """The ids in order on one column, ``LOOP_LIMIT`` per dispatch."""
    ids_dtype = _ids_dtype(flat)
    for start in range(0, positions.size, LOOP_LIMIT):
        part = positions[start:start + LOOP_LIMIT]
        ids_t = flat.new(part.astype(ids_dtype.np), device=flat.device)
        values = src.narrow(0, start, part.size).contiguous()
        flat._storage.scatter_inplace(flat._layout, ids_t._storage, ids_t._layout,
                                      values._storage, values._layout, 0, accumulate)


def scatter_flat(flat, positions, src, accumulate):
    """Write (or add, with ``accumulate``) ``src[i]`` at ``flat[positions[i]]``.

    ``flat`` is a 1-D contiguous tensor whose storage is written; ``positions`` host
    i64 ids, every one in range; ``src`` a 1-D contiguous tensor of ``flat``'s dtype
    and device, one value per id. A position named twice keeps the last value
    (added up with ``accumulate``)."""
    if positions.size == 0:
        return
    if flat.device.kind == "cpu":
        ids_t = flat.new(positions, device=flat.device)
        flat._storage.scatter_inplace(flat._layout, ids_t._storage, ids_t._layout,
                                      src._storage, src._layout, 0, accumulate)
        return
    if not accumulate:
        keep = _last_of_each(positions)
        if keep is not None:
            positions, src = positions[keep], _take(src, keep)
        _scatter_columns(flat, positions, src, False)
        return
    layer = _occurrences(positions)
    layers = int(layer.max()) + 1
    if layers == 1:
        _scatter_columns(flat, positions, src, True)
    elif layers <= MAX_LAYERS:
        for k in range(layers):
            picks = np.flatnonzero(layer == k)
            _scatter_columns(flat, positions[picks], _take(src, picks), True)
    else:
        _scatter_in_order(flat, positions, src, True)
