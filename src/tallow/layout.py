"""Layouts: how a tensor's elements sit in its storage.

A layout is a shape, a stride per dim (in elements) and a start offset. All the
view arithmetic (narrow, transpose, permute, broadcast, reshape-as-view,
squeeze/unsqueeze) is here, in pure Python, with no backend in it. Layouts are
immutable; contiguous layouts are interned per shape, so the common case costs a
dict lookup.
"""

from __future__ import annotations

from .errors import NarrowOutOfBoundsError, ShapeMismatchError
from .shape import elem_count


def contiguous_stride(shape: tuple) -> tuple:
    stride = []
    acc = 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return tuple(reversed(stride))


def _is_c_contiguous(shape: tuple, stride: tuple) -> bool:
    # Dims of size 1 may have any stride (candle's rule): stepping along them never happens.
    acc = 1
    for d, s in zip(reversed(shape), reversed(stride)):
        if d > 1 and s != acc:
            return False
        acc *= d
    return True


def _is_f_contiguous(shape: tuple, stride: tuple) -> bool:
    acc = 1
    for d, s in zip(shape, stride):
        if d > 1 and s != acc:
            return False
        acc *= d
    return True


def view_stride(old_shape: tuple, old_stride: tuple, new_shape: tuple):
    """Strides that read ``new_shape`` from the elements of ``(old_shape, old_stride)`` in
    row-major order, or None where no strides can (PyTorch's ``computeStride``). The old
    dims are cut into chunks, each contiguous within itself; the new dims must tile
    each chunk exactly, so a new dim never spans two chunks."""
    if elem_count(old_shape) == 0 or not old_shape:
        return contiguous_stride(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        chunk_ends = tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                                       and old_stride[tensor_d - 1] != tensor_numel * chunk_base)
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_stride[view_d] = view_numel * chunk_base
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if tensor_d > 0:
            chunk_base = old_stride[tensor_d - 1]
            tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_stride)


class Layout:
    """How a tensor reads its storage: ``shape``, ``stride`` (in elements) and ``start_offset``.

    Views (transpose, narrow, broadcast, indexing) make a new Layout over the same storage.
    """
    __slots__ = ("shape", "stride", "start_offset", "contiguous", "count", "_derived", "__weakref__")

    def __init__(self, shape: tuple, stride: tuple, start_offset: int = 0):
        self.shape = shape
        self.stride = stride
        self.start_offset = start_offset
        self.contiguous = _is_c_contiguous(shape, stride)
        self.count = elem_count(shape)
        self._derived = None

    # -- construction -------------------------------------------------------------
    @staticmethod
    def contiguous_of(shape: tuple, start_offset: int = 0) -> "Layout":
        if start_offset:
            return Layout(shape, contiguous_stride(shape), start_offset)
        lay = _INTERNED.get(shape)
        if lay is None:
            lay = Layout(shape, contiguous_stride(shape), 0)
            if len(_INTERNED) < 4096:
                _INTERNED[shape] = lay
        return lay

    # -- inspection ---------------------------------------------------------------
    @property
    def dims(self) -> tuple:
        return self.shape

    @property
    def rank(self) -> int:
        return len(self.shape)

    def elem_count(self) -> int:
        return self.count

    def is_contiguous(self) -> bool:
        return self.contiguous

    def is_fortran_contiguous(self) -> bool:
        return _is_f_contiguous(self.shape, self.stride)

    def contiguous_offsets(self):
        """``(start, end)`` of the elements in the storage when contiguous, else None."""
        if self.contiguous:
            return self.start_offset, self.start_offset + self.count
        return None

    def extent(self) -> tuple:
        """``(lowest, highest + 1)`` storage index this layout touches (strides are >= 0)."""
        if self.count == 0:
            return self.start_offset, self.start_offset
        hi = self.start_offset
        for d, s in zip(self.shape, self.stride):
            hi += (d - 1) * s
        return self.start_offset, hi + 1

    def has_overlap(self) -> bool:
        """True when two indices map to one storage element (a broadcast or odd strides)."""
        pairs = sorted((s, d) for d, s in zip(self.shape, self.stride) if d > 1)
        span = 1
        for s, d in pairs:
            if s < span:
                return True
            span = s * (d - 1) + span
        return False

    def __eq__(self, other):
        return (
            isinstance(other, Layout)
            and self.shape == other.shape
            and self.stride == other.stride
            and self.start_offset == other.start_offset
        )

    def __hash__(self):
        return hash((self.shape, self.stride, self.start_offset))

    def __repr__(self):
        return f"Layout(shape={list(self.shape)}, stride={list(self.stride)}, start_offset={self.start_offset})"

    # -- views ---------------------------------------------------------------------
    def narrow(self, dim: int, start: int, length: int) -> "Layout":
        size = self.shape[dim]
        if start < 0 or length < 0 or start + length > size:
            raise NarrowOutOfBoundsError(
                f"narrow: start {start} + len {length} exceeds dim {dim} of size {size} "
                f"(shape {self.shape})"
            )
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1:]
        return Layout(shape, self.stride, self.start_offset + start * self.stride[dim])

    def slice(self, dim: int, start: int, length: int, step: int) -> "Layout":
        """Elements ``start, start+step, ...`` (``length`` of them) of ``dim``; step > 0."""
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1:]
        stride = self.stride[:dim] + (self.stride[dim] * step,) + self.stride[dim + 1:]
        offset = self.start_offset + (start * self.stride[dim] if length else 0)
        return Layout(shape, stride, offset)

    def transpose(self, d1: int, d2: int) -> "Layout":
        shape = list(self.shape)
        stride = list(self.stride)
        shape[d1], shape[d2] = shape[d2], shape[d1]
        stride[d1], stride[d2] = stride[d2], stride[d1]
        return Layout(tuple(shape), tuple(stride), self.start_offset)

    def permute(self, dims: tuple) -> "Layout":
        return Layout(
            tuple(self.shape[d] for d in dims),
            tuple(self.stride[d] for d in dims),
            self.start_offset,
        )

    def broadcast_as(self, shape: tuple, op: str = "broadcast_as") -> "Layout":
        """Broadcast to ``shape`` (extra dims on the left, size-1 dims stretched, stride 0)."""
        extra = len(shape) - len(self.shape)
        if extra < 0:
            raise ShapeMismatchError(f"{op}: cannot broadcast shape {self.shape} to {shape}")
        stride = [0] * extra
        for i, (src, s) in enumerate(zip(self.shape, self.stride)):
            dst = shape[extra + i]
            if src == dst:
                stride.append(s)
            elif src == 1:
                stride.append(0)
            else:
                raise ShapeMismatchError(f"{op}: cannot broadcast shape {self.shape} to {shape}")
        return Layout(tuple(shape), tuple(stride), self.start_offset)

    # A layout remembers the last view derived from it: a bias broadcast or a weight
    # transposed on every call then reuses one layout object, and with it the
    # storage's cached NumPy view (and the matmul operand cache).
    def broadcast_cached(self, shape: tuple) -> "Layout":
        """``broadcast_as(shape)``, remembered."""
        c = self._derived
        if c is not None and c[0] == shape:
            return c[1]
        lay = self.broadcast_as(shape)
        self._derived = (shape, lay)
        return lay

    def transpose_cached(self, d1: int, d2: int) -> "Layout":
        """``transpose(d1, d2)``, remembered."""
        key = (d1, d2, None)  # never equal to a shape key
        c = self._derived
        if c is not None and c[0] == key:
            return c[1]
        lay = self.transpose(d1, d2)
        self._derived = (key, lay)
        return lay

    def squeeze(self, dim: int) -> "Layout":
        return Layout(
            self.shape[:dim] + self.shape[dim + 1:],
            self.stride[:dim] + self.stride[dim + 1:],
            self.start_offset,
        )

    def unsqueeze(self, dim: int) -> "Layout":
        # The new size-1 dim takes the stride of the dim it is inserted before (candle's
        # choice, visible in its layouts), 1 when appended last.
        s = self.stride[dim] if dim < len(self.stride) else 1
        return Layout(
            self.shape[:dim] + (1,) + self.shape[dim:],
            self.stride[:dim] + (s,) + self.stride[dim:],
            self.start_offset,
        )

    def reshape_view(self, shape: tuple):
        """The layout of ``shape`` over the same elements when that is a view, else None."""
        if self.contiguous:
            return Layout.contiguous_of(shape, self.start_offset)
        return None

    def strided_view(self, shape: tuple):
        """The layout of ``shape`` over the same elements by PyTorch's ``view`` rule
        (``computeStride``): a strided layout views too whenever each run of merged or
        split dims is contiguous within itself; None where no strides can."""
        if self.contiguous:
            return Layout.contiguous_of(shape, self.start_offset)
        stride = view_stride(self.shape, self.stride, shape)
        return None if stride is None else Layout(shape, stride, self.start_offset)


_INTERNED: dict = {}
