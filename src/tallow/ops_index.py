"""Index ops (select, gather, scatter, index_add, embedding), slice writes,
in-place fills, padding, flips, rolls and repeats, and cat/stack.

candle's in-place ops (``slice_set``, ``scatter_set``, ``zero_set``, ``one_set``,
``const_set``) validate every argument before writing anything, and write through
``tallow.inplace.write_in_place`` (copy-on-write, the version counter) without
PyTorch's leaf rule, as in candle. PyTorch's in-place methods are in
``ops_inplace.py``.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .checks import same_dtype_device, scalar_for
from .errors import (
    DeviceMismatchError, NarrowOutOfBoundsError, ShapeMismatchError, TallowError,
    UnsupportedDTypeError,
)
from .inplace import prepare_write, source_for, write_in_place  # noqa: F401  (source_for: setitem)
from .layout import Layout
from .op import record
from .shape import broadcast_shapes, elem_count, normalize_dim, parse_shape
from .tensor_base import TensorBase

_contig = Layout.contiguous_of


def _ids_and_dim(ids, dim, index=None):
    """``(ids, dim)`` from candle's order or PyTorch's ``(dim, index)``: the dim is the
    one that is an int, so the two orders cannot be confused. PyTorch's keywords
    (``gather(1, index=ids)``, ``gather(dim=1, index=ids)``) name the ids ``index``."""
    if index is not None:
        return index, ids if dim is None else dim
    if isinstance(ids, (int, np.integer)) and not isinstance(dim, (int, np.integer)):
        return dim, int(ids)
    return ids, dim


def _check_ids(op, t, ids):
    if not ids.dtype.is_int:
        raise UnsupportedDTypeError(f"{op}: indices must be u8, u32 or i64, got {ids.dtype}")
    if ids._storage.bdev is not t._storage.bdev:
        raise DeviceMismatchError(f"{op}: tensor on {t.device}, indices on {ids.device}")


def _check_src(op, t, src):
    same_dtype_device(op, (t, src))


def check_writable(t, op):
    """Before a caller's own in-place write into ``t``: the checks and copy-on-write of
    ``tallow.inplace.prepare_write`` (the caller then bumps the storage's version;
    ``tallow.inplace.write_in_place`` does it all)."""
    prepare_write(t, op)


def _fresh_copy(t):
    """A contiguous private copy of ``t``'s elements (a storage, not a tensor)."""
    return t._storage.copy_strided(t._layout)


class IndexOps:
    __slots__ = ()

    # -- selection -----------------------------------------------------------------------
    def index_select(self, ids=None, dim=None, *, index=None):
        """The slices at the 1-D ``ids`` along ``dim`` (an id equal to the dtype's max selects zeros, as candle).
        PyTorch's order, ``index_select(dim, ids)``, is accepted too."""
        ids, dim = _ids_and_dim(ids, dim, index)
        d = normalize_dim(dim, self.rank, "index_select")
        _check_ids("index_select", self, ids)
        if ids.rank != 1:
            raise ShapeMismatchError(f"index_select: ids must be 1-D, got shape {ids.shape}")
        shape = self.shape[:d] + (ids.shape[0],) + self.shape[d + 1:]
        out = self._storage.index_select(self._layout, ids._storage, ids._layout, d)
        return self._wrap(out, _contig(shape), record("index_select", (self, ids), d))

    def embedding(self, ids):
        """Rows of this (vocab, hidden) table for ``ids`` of any shape."""
        if self.rank != 2:
            raise ShapeMismatchError(f"embedding: the table must be 2-D, got shape {self.shape}")
        flat = ids.flatten_all() if ids.rank != 1 else ids
        rows = self.index_select(flat, 0)
        return rows.reshape(ids.shape + (self.shape[1],)) if ids.rank != 1 else rows

    def gather(self, ids=None, dim=None, *, index=None):
        """Values at ``ids`` along ``dim`` (``out[i][j] = self[ids[i][j]][j]`` for dim 0); ids have self's rank.
        PyTorch's order, ``gather(dim, ids)``, is accepted too."""
        ids, dim = _ids_and_dim(ids, dim, index)
        d = normalize_dim(dim, self.rank, "gather")
        _check_ids("gather", self, ids)
        if ids.rank != self.rank or any(
            i != d and n > m for i, (n, m) in enumerate(zip(ids.shape, self.shape))
        ):
            raise ShapeMismatchError(
                f"gather: ids shape {ids.shape} does not fit tensor shape {self.shape} on dim {d}"
            )
        out = self._storage.gather(self._layout, ids._storage, ids._layout, d)
        return self._wrap(out, _contig(ids.shape), record("gather", (self, ids), d))

    # -- scatters --------------------------------------------------------------------------
    def _check_scatter(self, op, ids, src, d):
        _check_ids(op, self, ids)
        _check_src(op, self, src)
        if not (ids.rank == src.rank == self.rank):
            raise ShapeMismatchError(
                f"{op}: ids {ids.shape}, src {src.shape} and tensor {self.shape} must have one rank"
            )
        for i, (n_ids, n_src, n_dst) in enumerate(zip(ids.shape, src.shape, self.shape)):
            if n_ids > n_src or (i != d and n_ids > n_dst):
                raise ShapeMismatchError(
                    f"{op}: ids shape {ids.shape} does not fit src {src.shape} / tensor "
                    f"{self.shape} on dim {d}"
                )

    def _scattered_copy(self, name, ids, src, dim, accumulate):
        d = normalize_dim(dim, self.rank, name)
        self._check_scatter(name, ids, src, d)
        out = _fresh_copy(self)
        lay = _contig(self.shape)
        out.scatter_inplace(lay, ids._storage, ids._layout, src._storage, src._layout, d, accumulate)
        return self._wrap(out, lay, record(name, (self, ids, src), d))

    def scatter_add(self, ids, src, dim):
        """A copy of self with ``src`` added at ``ids`` along ``dim``."""
        return self._scattered_copy("scatter_add", ids, src, dim, True)

    def scatter(self, ids, src, dim):
        """A copy of self with ``src`` written at ``ids`` along ``dim``."""
        return self._scattered_copy("scatter", ids, src, dim, False)

    def scatter_set(self, ids, src, dim):
        """In place: write ``src`` at ``ids`` along ``dim`` into this tensor's storage."""
        d = normalize_dim(dim, self.rank, "scatter_set")
        self._check_scatter("scatter_set", ids, src, d)
        lay = self._layout
        write_in_place(self, "scatter_set", lambda s: s.scatter_inplace(
            lay, ids._storage, ids._layout, src._storage, src._layout, d, False), graph_rule=False)

    def index_add(self, ids, src, dim):
        """A copy of self with ``src``'s slices added at rows ``ids`` of ``dim``."""
        d = normalize_dim(dim, self.rank, "index_add")
        _check_ids("index_add", self, ids)
        _check_src("index_add", self, src)
        if ids.rank != 1:
            raise ShapeMismatchError(f"index_add: ids must be 1-D, got shape {ids.shape}")
        want = self.shape[:d] + (ids.shape[0],) + self.shape[d + 1:]
        if src.shape != want:
            raise ShapeMismatchError(f"index_add: src shape {src.shape}, expected {want}")
        out = _fresh_copy(self)
        lay = _contig(self.shape)
        out.index_add_inplace(lay, ids._storage, ids._layout, src._storage, src._layout, d)
        return self._wrap(out, lay, record("index_add", (self, ids, src), d))

    # -- slice writes ------------------------------------------------------------------------
    def _region(self, op, dim, offset, src):
        d = normalize_dim(dim, self.rank, op)
        _check_src(op, self, src)
        if src.rank != self.rank or any(
            i != d and a != b for i, (a, b) in enumerate(zip(src.shape, self.shape))
        ):
            raise ShapeMismatchError(
                f"{op}: src shape {src.shape} does not match {self.shape} off dim {d}"
            )
        offset = int(offset)
        if offset < 0 or offset + src.shape[d] > self.shape[d]:
            raise NarrowOutOfBoundsError(
                f"{op}: offset {offset} + {src.shape[d]} exceeds dim {d} of size {self.shape[d]}"
            )
        return d, offset

    def slice_set(self, src, dim, offset):
        """In place: write ``src`` into this tensor at ``offset`` along ``dim``."""
        d, offset = self._region("slice_set", dim, offset, src)
        if self._storage is src._storage:
            raise TallowError("slice_set: self and src share their storage")
        region = self._layout.narrow(d, offset, src.shape[d])
        write_in_place(self, "slice_set", lambda s: s.copy_into_inplace(region, src._storage, src._layout),
                       graph_rule=False)

    def slice_scatter(self, src, dim, start):
        """A copy of self with ``src`` written at ``start`` along ``dim``."""
        d, start = self._region("slice_scatter", dim, start, src)
        out = _fresh_copy(self)
        lay = _contig(self.shape)
        out.copy_into_inplace(lay.narrow(d, start, src.shape[d]), src._storage, src._layout)
        return self._wrap(out, lay, record("slice_scatter", (self, src), (d, start)))

    def slice_scatter0(self, src, start):
        """A copy of self with ``src`` written at ``start`` along dim 0."""
        return self.slice_scatter(src, 0, start)

    def slice_assign(self, ranges, src):
        """A copy of self with the block ``ranges`` (one per dim) replaced by ``src``."""
        if len(ranges) > self.rank:
            raise ShapeMismatchError(f"slice_assign: {len(ranges)} ranges for rank {self.rank}")
        starts, lens = [], []
        for d, r in enumerate(list(ranges) + [slice(None)] * (self.rank - len(ranges))):
            size = self.shape[d]
            if isinstance(r, (slice, range)):
                # A Python range is candle's Rust range (it would unpack as two of its values).
                if isinstance(r, range):
                    a, b, step = r.start, r.stop, r.step
                else:
                    a, b, step = r.indices(size)
                if step != 1:
                    raise ShapeMismatchError("slice_assign: ranges must have step 1")
            elif isinstance(r, int):
                a, b = r, r + 1
            else:
                a, b = r
                a = 0 if a is None else a
                b = size if b is None else b
            if not 0 <= a <= b <= size:
                raise NarrowOutOfBoundsError(f"slice_assign: range {r} outside dim {d} of size {size}")
            starts.append(a)
            lens.append(max(0, b - a))
        _check_src("slice_assign", self, src)
        if tuple(lens) != src.shape:
            raise ShapeMismatchError(
                f"slice_assign: src shape {src.shape} does not match the range shape {tuple(lens)}"
            )
        out = _fresh_copy(self)
        lay = _contig(self.shape)
        region = lay
        for d, (a, n) in enumerate(zip(starts, lens)):
            region = region.narrow(d, a, n)
        out.copy_into_inplace(region, src._storage, src._layout)
        return self._wrap(out, lay, record("slice_assign", (self, src), (tuple(starts), tuple(lens))))

    def zero_set(self):
        """In place: fill this tensor's elements with zeros (candle)."""
        lay = self._layout
        write_in_place(self, "zero_set", lambda s: s.fill_inplace(lay, 0), graph_rule=False)

    def one_set(self):
        """In place: fill this tensor's elements with ones (candle)."""
        lay = self._layout
        write_in_place(self, "one_set", lambda s: s.fill_inplace(lay, 1), graph_rule=False)

    def const_set(self, value):
        """In place: fill this tensor's elements with ``value`` (candle; no graph check)."""
        value = scalar_for("const_set", value, self.dtype)
        lay = self._layout
        write_in_place(self, "const_set", lambda s: s.fill_inplace(lay, value), graph_rule=False)

    # -- masks ------------------------------------------------------------------------------------
    def masked_fill(self, mask, value):
        """A copy with ``value`` where ``mask`` (broadcast to self's shape) is nonzero."""
        if not isinstance(mask, TensorBase):
            mask = self.new(mask, device=self.device)
        if isinstance(value, TensorBase):
            value = value.to_dtype(self.dtype).to_device(self.device)
        else:
            value = self.full((), scalar_for("masked_fill", value, self.dtype), dtype=self.dtype,
                              device=self.device)
        return mask.to_device(self.device).ne(0).where_cond(value, self)

    def where(self, condition, other):
        """PyTorch's ``x.where(condition, other)``: self where ``condition`` is nonzero,
        else ``other`` (a tensor or a scalar)."""
        if not isinstance(condition, TensorBase):
            condition = self.new(condition, device=self.device)
        if not condition.dtype.is_int:
            condition = condition.ne(0)
        return condition.where_cond(self, other)

    def nonzero(self):
        """The i64 coordinates ``(n, rank)`` of the nonzero elements (PyTorch's ``nonzero``)."""
        coords = np.argwhere(np.asarray(self.numpy()) != 0).astype(np.int64)
        return self.new(coords.reshape(-1, self.rank), device=self.device)

    def multinomial(self, num_samples, replacement=False):
        """i64 indices drawn from each row of this tensor (1-D or 2-D, non-negative
        weights that need not sum to 1), as PyTorch's ``multinomial``. Without
        replacement an index is drawn at most once per row (Gumbel top-k)."""
        if self.rank not in (1, 2):
            raise ShapeMismatchError(f"multinomial: probs must be 1-D or 2-D, got shape {self.shape}")
        num_samples = int(num_samples)
        n = self.shape[-1]
        if not replacement and num_samples > n:
            raise ValueError(
                f"multinomial: cannot draw {num_samples} samples without replacement from {n} categories")
        if num_samples < 1:
            raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
        p = self.detach()
        if not p.dtype.is_float:
            p = p.to_dtype(dt.f32)
        device = p.device
        rows = p.shape[:-1]
        if replacement:
            cdf = p.cumsum(-1)
            total = cdf.narrow(-1, n - 1, 1)
            u = self.rand(rows + (num_samples,), dtype=p.dtype, device=device).broadcast_mul(total)
            # The index is the number of cumulative weights at or below the draw.
            below = cdf.unsqueeze(-2) <= u.unsqueeze(-1)
            return below.sum(-1).clamp(0, n - 1)
        u = self.rand(p.shape, dtype=p.dtype, device=device).clamp(1e-12, None)
        keys = p.log() - (-u.log()).log()
        return keys.topk(num_samples, -1).indices

    def masked_select(self, mask):
        """The elements where ``mask`` (broadcast to self's shape) is nonzero, as 1-D."""
        if not isinstance(mask, TensorBase):
            mask = self.new(mask, device=self.device)
        mask = mask.ne(0).to_device(self.device)
        shape = broadcast_shapes(self.shape, mask.shape, "masked_select")
        return self.broadcast_as(shape)[mask.broadcast_as(shape).contiguous()]

    # -- padding, flips, rolls, repeats -------------------------------------------------------
    def pad_with_zeros(self, dim, left, right):
        """Pad ``dim`` with ``left``/``right`` zeros."""
        d = normalize_dim(dim, self.rank, "pad_with_zeros")
        if left == 0 and right == 0:
            return self
        parts = []
        if left:
            parts.append(self.zeros(self.shape[:d] + (left,) + self.shape[d + 1:], self.dtype, self.device))
        parts.append(self)
        if right:
            parts.append(self.zeros(self.shape[:d] + (right,) + self.shape[d + 1:], self.dtype, self.device))
        return self.cat(parts, d)

    def pad_with_same(self, dim, left, right):
        """Pad ``dim`` with ``left``/``right`` copies of its first/last slice."""
        d = normalize_dim(dim, self.rank, "pad_with_same")
        size = self.shape[d]
        if left == 0 and right == 0:
            return self
        if size == 0:
            raise ShapeMismatchError("pad_with_same: cannot pad an empty dim")
        parts = []
        if left:
            first = self.narrow(d, 0, 1)
            parts.append(first.broadcast_as(self.shape[:d] + (left,) + self.shape[d + 1:]))
        parts.append(self)
        if right:
            last = self.narrow(d, size - 1, 1)
            parts.append(last.broadcast_as(self.shape[:d] + (right,) + self.shape[d + 1:]))
        return self.cat(parts, d)

    def flip(self, dims):
        """A copy with the order of ``dims`` (an int or a sequence) reversed."""
        if isinstance(dims, int):
            dims = [dims]
        out = self
        for dim in dims:
            d = normalize_dim(dim, self.rank, "flip")
            n = self.shape[d]
            if n > 1:
                ids = self.arange(n - 1, -1, -1, dtype="i64", device=self.device)
                out = out.index_select(ids, d)
        return out

    def roll(self, shift, dim):
        """Rotate ``dim`` by ``shift`` positions (elements leaving the end come back at the start)."""
        d = normalize_dim(dim, self.rank, "roll")
        size = self.shape[d]
        if size == 0:
            return self
        shift = int(shift) % size
        if shift == 0:
            return self
        a = self.narrow(d, 0, size - shift)
        b = self.narrow(d, size - shift, shift)
        return self.cat([b, a], d)

    def repeat(self, *shape):
        """Tile the tensor ``shape[i]`` times along dim i (extra leading dims allowed)."""
        reps = parse_shape(shape, "repeat")
        t = self
        if len(reps) < t.rank:
            raise ShapeMismatchError(f"repeat: {reps} has fewer dims than shape {self.shape}")
        own = (1,) * (len(reps) - t.rank) + t.shape
        t = t.reshape(own)
        inter = []
        target = []
        for r, n in zip(reps, own):
            inter += [1, n]
            target += [r, n]
        tiled = t.reshape(tuple(inter)).broadcast_as(tuple(target))
        return tiled.reshape(tuple(r * n for r, n in zip(reps, own)))

    # -- joining ----------------------------------------------------------------------------
    @staticmethod
    def cat(tensors, dim=0):
        """Concatenate along ``dim`` (shapes equal off ``dim``); tensors of several
        dtypes are joined in their promoted dtype, as ``torch.cat``."""
        tensors = list(tensors)
        if not tensors:
            raise ShapeMismatchError("cat: needs at least one tensor")
        first = tensors[0]
        d = normalize_dim(dim, first.rank, "cat")
        d0 = first._storage.dtype
        if any(t._storage.dtype is not d0 for t in tensors):
            common = dt.result_type(*(t._storage.dtype for t in tensors))
            tensors = [t.to_dtype(common) for t in tensors]
            first = tensors[0]
        same_dtype_device("cat", tensors)
        for t in tensors[1:]:
            if t.rank != first.rank or any(
                i != d and a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
            ):
                raise ShapeMismatchError(
                    f"cat: shapes {[tuple(x.shape) for x in tensors]} differ off dim {d}"
                )
        if len(tensors) == 1:
            return first
        sizes = tuple(t.shape[d] for t in tensors)
        shape = first.shape[:d] + (sum(sizes),) + first.shape[d + 1:]
        out = first._storage.bdev.zeros(elem_count(shape), first.dtype)
        lay = _contig(shape)
        offset = 0
        for t, n in zip(tensors, sizes):
            if n:
                out.copy_into_inplace(lay.narrow(d, offset, n), t._storage, t._layout)
            offset += n
        return first._wrap(out, lay, record("cat", tensors, (d, sizes)))

    @staticmethod
    def stack(tensors, dim=0):
        """Join equal-shaped tensors along a new dim ``dim``."""
        tensors = list(tensors)
        if not tensors:
            raise ShapeMismatchError("stack: needs at least one tensor")
        d = normalize_dim(dim, tensors[0].rank + 1, "stack")
        for t in tensors[1:]:
            if t.shape != tensors[0].shape:
                raise ShapeMismatchError(
                    f"stack: shapes {[tuple(x.shape) for x in tensors]} are not all equal"
                )
        return IndexOps.cat([t.unsqueeze(d) for t in tensors], d)
