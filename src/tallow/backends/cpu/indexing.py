"""Index kernels: index_select, gather, scatter (set / add) and index_add.

As in candle, an id equal to the id dtype's maximum (u32::MAX, i64::MAX) selects
nothing and yields zeros (and is skipped by scatters); any other id outside the
dim raises ``IndexOutOfRangeError``: nothing wraps, nothing is read or written
out of bounds, and an in-place scatter checks every id before writing.
"""

from __future__ import annotations

import numpy as np

from ...errors import IndexOutOfRangeError


def _ids(ids_storage, ids_layout, size, op, dim):
    """(intp ids with sentinels replaced by 0, mask of sentinels or None)."""
    raw = ids_storage.view(ids_layout)
    sentinel = None
    if raw.dtype == np.uint32:
        sentinel = np.uint32(0xFFFFFFFF)
    elif raw.dtype == np.int64:
        sentinel = np.int64(np.iinfo(np.int64).max)
    mask = None
    if sentinel is not None and raw.size:
        hit = raw == sentinel
        if hit.any():
            mask = hit
    ids = raw.astype(np.intp)
    if mask is not None:
        ids[mask] = 0
    if ids.size:
        bad = (ids < 0) | (ids >= size)
        if mask is not None:
            bad &= ~mask
        if bad.any():
            first = raw[bad].ravel()[0]
            raise IndexOutOfRangeError(
                f"{op}: index {int(first)} is out of range for dim {dim} of size {size}"
            )
    return ids, mask


def _full_index(idx, dim, shape):
    """Open-grid index arrays addressing ``dst[..., idx, ...]`` for every element of idx."""
    grids = list(np.indices(idx.shape, sparse=True))
    grids[dim] = idx
    return tuple(grids)


class CpuIndexing:
    """Indexing methods of ``CpuStorage``: index_select, gather, scatter, index_add."""

    __slots__ = ()

    def index_select(self, layout, ids, ids_layout, dim):
        x = self.view(layout)
        idx, mask = _ids(ids, ids_layout, x.shape[dim], "index_select", dim)
        out = np.take(x, idx, axis=dim)
        if mask is not None:
            sel = [slice(None)] * out.ndim
            sel[dim] = mask
            out[tuple(sel)] = 0
        return self._wrap(out, self.dtype)

    def gather(self, layout, ids, ids_layout, dim):
        x = self.view(layout)
        idx, mask = _ids(ids, ids_layout, x.shape[dim], "gather", dim)
        # take_along_axis needs equal sizes off the gathered dim: view the source
        # through the ids' extents there (candle allows the ids to be smaller).
        sel = tuple(slice(0, n) if d != dim else slice(None) for d, n in enumerate(idx.shape))
        out = np.take_along_axis(x[sel], idx, axis=dim)
        if mask is not None:
            out[mask] = 0
        return self._wrap(np.ascontiguousarray(out), self.dtype)

    def scatter_inplace(self, layout, ids, ids_layout, src, src_layout, dim, accumulate):
        dst = self.view(layout)
        idx, mask = _ids(ids, ids_layout, dst.shape[dim], "scatter_add" if accumulate else "scatter", dim)
        values = src.view(src_layout)
        values = values[tuple(slice(0, n) for n in idx.shape)]
        index = _full_index(idx, dim, dst.shape)
        if mask is not None:
            keep = ~mask
            index = tuple(np.broadcast_to(g, idx.shape)[keep] for g in index)
            values = values[keep]
        if accumulate:
            np.add.at(dst, index, values)
        else:
            dst[index] = values
        self.mark_written()

    def index_add_inplace(self, layout, ids, ids_layout, src, src_layout, dim):
        dst = self.view(layout)
        idx, mask = _ids(ids, ids_layout, dst.shape[dim], "index_add", dim)
        values = src.view(src_layout)
        if mask is not None:
            keep = ~mask
            idx = idx[keep]
            sel = [slice(None)] * values.ndim
            sel[dim] = keep
            values = values[tuple(sel)]
        sel = [slice(None)] * dst.ndim
        sel[dim] = idx
        np.add.at(dst, tuple(sel), values)
        self.mark_written()
