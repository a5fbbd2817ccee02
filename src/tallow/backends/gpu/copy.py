"""Copies and in-place writes: compact copies of views, writes into regions, fills."""

from __future__ import annotations

from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .launch import map_inplace, map_new
from .kernel_args import pad_scalars, scalar_words


COPY = family("copy", [("a", "in", 0), ("y", "out", 0)], flags=("HAS_SRC",), includes=("map.wgsl",))
COPY_INTO = family("copy_into", [("a", "in", 0), ("y", "atomic", 0)], file="copy.wgsl",
                   flags=("INPLACE", "HAS_SRC"))
FILL_INTO = family("fill_into", [("y", "atomic", 0)], file="copy.wgsl", flags=("INPLACE",))

def check_window(state, storage, what):
    if storage.buf.size > state.max_binding:
        raise TallowError(
            f"{what}: a {storage.buf.size}-byte buffer exceeds the adapter's max storage "
            f"binding size ({state.max_binding} bytes); this op does not split its work")


class GpuCopy:
    """Copy and in-place write methods of ``GpuStorage``."""

    __slots__ = ()

    def copy_strided(self, layout):
        """A new compact buffer with the elements of ``layout`` (always a new buffer)."""
        state = self.bdev
        key = (self.dtype.name,)
        pipe = state.kernels.ref(COPY, key)
        n = layout.count
        buf = map_new(state, pipe, ((self, layout),), self.dtype, n)
        return self._wrap(buf, self.dtype, n)

    def copy_into_inplace(self, dst_layout, src, src_layout):
        state = self.bdev
        if src.buf is self.buf:
            # A buffer cannot be bound for reading and writing in one dispatch.
            src = src.copy_strided(src_layout)
            src_layout = Layout.contiguous_of(src_layout.shape)
        pipe = state.kernels.ref(COPY_INTO, (self.dtype.name,))
        map_inplace(state, pipe, ((src, src_layout),), self, dst_layout)

    def fill_inplace(self, layout, value):
        state = self.bdev
        pipe = state.kernels.ref(FILL_INTO, (self.dtype.name,))
        map_inplace(state, pipe, (), self, layout, pad_scalars(scalar_words(self.dtype, value)))
