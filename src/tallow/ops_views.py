"""View ops: new layouts over the same storage (a copy only where a view cannot be).

Every view records its op when the input is tracked, so gradients flow back
through it. ``reshape`` of a non-contiguous tensor is the one copy here.
"""

from __future__ import annotations

from .errors import NotContiguousError, ShapeMismatchError
from .candle_index import sequential_getitem
from .getitem import getitem, int_index
from .setitem import index_put_, setitem
from .layout import Layout
from .op import record1
from .shape import elem_count, normalize_dim, parse_shape, parse_shape_with_hole

_contig = Layout.contiguous_of


class ViewOps:
    __slots__ = ()

    def _view(self, layout, name, params=None):
        return self._wrap(self._storage, layout, record1(name, self, params))

    # -- reshape and flatten -----------------------------------------------------
    def reshape(self, *shape):
        """The same elements in ``shape`` (one ``-1`` is inferred): a view when the layout allows, else a copy."""
        lay = self._layout
        shape = parse_shape_with_hole(shape, lay.count, "reshape")
        if shape == lay.shape and lay.contiguous:
            return self
        count = 1
        for d in shape:
            count *= d
        if count != lay.count:
            raise ShapeMismatchError(
                f"reshape: cannot reshape {lay.shape} ({lay.count} elements) into {shape}"
            )
        op = record1("reshape", self, lay.shape)
        view = lay.reshape_view(shape)
        if view is not None:
            return self._wrap(self._storage, view, op)
        return self._wrap(self._storage.copy_strided(lay), _contig(shape), op)

    def flatten_all(self):
        """A 1-D view (or copy) of every element."""
        return self.reshape((self._layout.count,))

    def flatten(self, start_dim=0, end_dim=-1):
        """Merge dims ``start_dim..end_dim`` (inclusive) into one."""
        shape = self._layout.shape
        if not shape:
            return self.reshape((1,))
        s = normalize_dim(start_dim, len(shape), "flatten")
        e = normalize_dim(end_dim, len(shape), "flatten")
        if s > e:
            raise ShapeMismatchError(f"flatten: start dim {start_dim} is after end dim {end_dim}")
        merged = 1
        for d in shape[s:e + 1]:
            merged *= d
        return self.reshape(shape[:s] + (merged,) + shape[e + 1:])

    def flatten_from(self, start_dim):
        """Merge dims ``start_dim..`` into one."""
        return self.flatten(start_dim, -1)

    def flatten_to(self, end_dim):
        """Merge dims ``..end_dim`` into one."""
        return self.flatten(0, end_dim)

    # -- dims -------------------------------------------------------------------------
    def squeeze(self, dim=None):
        """Drop ``dim`` if it has size 1; otherwise return the tensor unchanged (as candle).
        With no dim, drop every size-1 dim (PyTorch's ``squeeze()``)."""
        lay = self._layout
        if dim is None:
            return self.squeeze_dims(range(len(lay.shape)))
        d = normalize_dim(dim, len(lay.shape), "squeeze")
        if lay.shape[d] != 1:
            return self
        return self._view(lay.squeeze(d), "reshape", lay.shape)

    def squeeze_dims(self, dims):
        """Drop the size-1 dims among ``dims`` (others stay)."""
        lay = self._layout
        ds = sorted({normalize_dim(d, len(lay.shape), "squeeze_dims") for d in dims})
        shape = tuple(n for i, n in enumerate(lay.shape) if not (i in ds and n == 1))
        if shape == lay.shape:
            return self
        stride = tuple(s for i, (n, s) in enumerate(zip(lay.shape, lay.stride))
                       if not (i in ds and n == 1))
        return self._view(Layout(shape, stride, lay.start_offset), "reshape", lay.shape)

    def unsqueeze(self, dim):
        """A view with a size-1 dim inserted at ``dim``."""
        lay = self._layout
        d = normalize_dim(dim, len(lay.shape) + 1, "unsqueeze")
        return self._view(lay.unsqueeze(d), "reshape", lay.shape)

    def transpose(self, dim0, dim1):
        """A view with ``dim0`` and ``dim1`` swapped (PyTorch's argument names)."""
        lay = self._layout
        rank = len(lay.shape)
        d1 = normalize_dim(dim0, rank, "transpose")
        d2 = normalize_dim(dim1, rank, "transpose")
        if d1 == d2:
            return self
        return self._view(lay.transpose_cached(d1, d2), "transpose", (d1, d2))

    def t(self):
        """A view with the last two dims swapped."""
        lay = self._layout
        rank = len(lay.shape)
        if rank < 2:
            raise ShapeMismatchError(f"t: expects a tensor of rank >= 2, got shape {self.shape}")
        d1, d2 = rank - 2, rank - 1
        return self._wrap(self._storage, lay.transpose_cached(d1, d2),
                          record1("transpose", self, (d1, d2)))

    @property
    def T(self):
        """A view with every dim reversed (NumPy's ``.T``)."""
        return self.permute(tuple(reversed(range(self.rank))))

    def permute(self, *dims):
        """A view with the dims reordered (``permute(2, 0, 1)`` or ``permute((2, 0, 1))``)."""
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        lay = self._layout
        rank = len(lay.shape)
        ds = tuple(normalize_dim(d, rank, "permute") for d in dims)
        if sorted(ds) != list(range(rank)):
            raise ShapeMismatchError(
                f"permute: {tuple(dims)} is not a permutation of the dims of shape {lay.shape}"
            )
        if ds == tuple(range(rank)):
            return self
        return self._view(lay.permute(ds), "permute", ds)

    def narrow(self, dim, start, length):
        """A view of ``length`` elements from ``start`` along ``dim``."""
        lay = self._layout
        d = normalize_dim(dim, len(lay.shape), "narrow")
        start, length = int(start), int(length)
        if start == 0 and length == lay.shape[d]:
            return self
        return self._view(lay.narrow(d, start, length), "narrow", (d, start, length))

    def _slice_step(self, dim, start, length, step):
        lay = self._layout
        if step == 1:
            return self.narrow(dim, start, length)
        return self._view(lay.slice(dim, start, length, step), "slice_step",
                          (dim, start, length, step))

    def get(self, index):
        """Row ``index`` of dim 0 (negative counts from the end)."""
        return int_index(self, 0, index)

    # -- PyTorch's shape spellings ---------------------------------------------------------
    def view(self, *shape):
        """PyTorch's ``view``: a reshape that never copies. It works whenever the new
        shape can be read with strides of the old layout (PyTorch's rule: a strided
        tensor views too, as long as no new dim spans two non-adjacent runs of
        elements); else it raises, and ``reshape`` (which copies then) is the fix. One
        ``-1`` is inferred."""
        lay = self._layout
        if lay.contiguous:
            return self.reshape(*shape)
        new_shape = parse_shape_with_hole(shape, lay.count, "view")
        if elem_count(new_shape) != lay.count:
            return self.reshape(*shape)  # raises, naming both shapes
        view = lay.strided_view(new_shape)
        if view is None:
            raise NotContiguousError(
                f"view: shape {new_shape} is not compatible with the tensor's shape "
                f"{self.shape} and strides {tuple(self.stride)} (at least one dim spans "
                "across two contiguous runs of elements); use reshape(...) instead, "
                "which copies here")
        return self._wrap(self._storage, view, record1("reshape", self, lay.shape))

    def size(self, dim=None):
        """PyTorch's ``size()``: the shape tuple, or the size of ``dim``."""
        if dim is None:
            return self._layout.shape
        return self._layout.shape[normalize_dim(dim, len(self._layout.shape), "size")]

    @property
    def ndim(self) -> int:
        """The number of dims (= ``rank``)."""
        return len(self._layout.shape)

    def dim(self) -> int:
        """PyTorch's ``dim()``: the number of dims (= ``rank``)."""
        return len(self._layout.shape)

    def numel(self) -> int:
        """PyTorch's ``numel()``: the number of elements (= ``elem_count``)."""
        return self._layout.count

    # -- broadcasting -------------------------------------------------------------------
    def broadcast_as(self, *shape):
        """A view broadcast to ``shape`` (stride 0 on the expanded dims; no copy)."""
        return self._broadcast(parse_shape(shape, "broadcast_as"))

    def _broadcast(self, shape: tuple):
        """``broadcast_as`` of an already parsed shape (the ops' internal path)."""
        lay = self._layout
        if shape == lay.shape:
            return self
        return self._wrap(self._storage, lay.broadcast_cached(shape),
                          record1("broadcast_as", self, lay.shape))

    def broadcast_left(self, *left):
        """A view with the leading dims ``left`` added by broadcasting."""
        left = parse_shape(left, "broadcast_left")
        return self.broadcast_as(left + self._layout.shape)

    def expand(self, *shape):
        """PyTorch's ``expand``: a broadcast view (``-1`` keeps a dim)."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        own = self._layout.shape
        extra = len(shape) - len(own)
        if extra < 0:
            raise ShapeMismatchError(f"expand: cannot expand shape {own} to {tuple(shape)}")
        resolved = tuple(
            own[i - extra] if (n == -1 and i >= extra) else n for i, n in enumerate(shape)
        )
        return self.broadcast_as(resolved)

    def broadcast_to(self, *shape):
        """= ``broadcast_as`` (NumPy's name)."""
        return self.broadcast_as(*shape)

    # -- splitting ------------------------------------------------------------------------
    def chunk(self, chunks, dim=0):
        """PyTorch's chunk: views of ``ceil(size / chunks)`` along ``dim``, the last one
        shorter, so there may be fewer than ``chunks`` pieces (``arange(6).chunk(4)``
        is three pieces of two); an empty dim gives ``chunks`` empty pieces. (candle's
        chunk made exactly ``chunks`` pieces, the first ``size % chunks`` one longer.)"""
        d = normalize_dim(dim, self.rank, "chunk")
        size = self._layout.shape[d]
        chunks = int(chunks)
        if chunks < 1:
            raise ValueError(f"chunk: need at least one chunk, got {chunks}")
        if size == 0:
            return [self.narrow(d, 0, 0) for _ in range(chunks)]
        return self.split(-(-size // chunks), d)

    def split(self, split_size_or_sections, dim=0):
        """PyTorch's split: pieces of one size (the last may be shorter) or given sizes."""
        d = normalize_dim(dim, self.rank, "split")
        size = self._layout.shape[d]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step < 1:
                raise ValueError(f"split: size must be positive, got {step}")
            sizes = [min(step, size - s) for s in range(0, size, step)]
        else:
            sizes = [int(n) for n in split_size_or_sections]
            if sum(sizes) != size or any(n < 0 for n in sizes):
                raise ShapeMismatchError(
                    f"split: sizes {sizes} do not add up to dim {d} of size {size}"
                )
        out, start = [], 0
        for n in sizes:
            out.append(self.narrow(d, start, n))
            start += n
        return out

    # -- indexing ----------------------------------------------------------------------------
    def i(self, index):
        """candle's ``t.i(index)``: each item applied to its dim in turn, so two id
        lists select every pair of their ids (``t[index]`` pairs them, as NumPy)."""
        return sequential_getitem(self, index)

    def __getitem__(self, index):
        return getitem(self, index)

    def __setitem__(self, index, value):
        """``t[index] = value``: an in-place write (refused on tracked tensors)."""
        setitem(self, index, value)

    def index_put_(self, indices, values, accumulate=False):
        """PyTorch's ``index_put_``: ``self[indices] = values`` for a tuple of id or mask
        tensors, or ``+=`` counting every repeated index when ``accumulate``; returns self."""
        return index_put_(self, indices, values, accumulate)
