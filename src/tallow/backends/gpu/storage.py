"""GPU storage: a pool buffer, its dtype and element count.

``GpuStorage`` is ``GpuCore`` (the buffer, readback, pool return) plus one mixin
per family of ops, in modules named as the CPU backend's (``elementwise``,
``reduce``, ``matmul``, ``indexing``, ``conv``, ``copy``, ``fused``,
``quantized``). Every op takes an output buffer from the pool, encodes its
dispatch and returns a new storage at once (through ``self._wrap``); nothing
waits except readbacks (``to_numpy``). A storage returns its buffer to the pool
when it is garbage (``__del__``).
"""

from __future__ import annotations

import numpy as np

from ...layout import Layout
from ..base import BackendStorage
from .conv import GpuConv
from .copy import GpuCopy
from .elementwise import GpuElementwise
from .fused import GpuFused
from .indexing import GpuIndexing
from .matmul import GpuMatmul
from .quantized import GpuQuantized
from .reduce import GpuReduce

_new = object.__new__


class GpuCore:
    """A pool buffer of one device, its dtype and element count; ops come from the mixins."""

    __slots__ = ("bdev", "buf", "dtype", "count", "__weakref__")

    def __init__(self, bdev, buf, dtype, count):
        self.bdev = bdev
        self.buf = buf
        self.dtype = dtype
        self.count = count

    def __del__(self):
        try:
            self.bdev.pool.release(self.buf)
        except Exception:  # interpreter shutdown
            pass

    @property
    def ptr(self) -> int:
        return self.buf.id

    @property
    def buffer_size(self) -> int:
        return self.buf.size

    def __repr__(self):
        return f"GpuStorage({self.dtype}, count={self.count}, buffer={self.buf.size} bytes, gpu:{self.bdev.ordinal})"

    # -- readback -----------------------------------------------------------------------
    def to_numpy(self, layout):
        """A copy of the elements of ``layout``: reads the layout's extent when it is
        compact enough, else compacts on the GPU first and reads that."""
        dtype = self.dtype
        npd = dtype.np
        isz = dtype.size_in_bytes
        shape = layout.shape
        n = layout.count
        if n == 0:
            return np.empty(shape, npd)
        cmd = self.bdev.commands
        if layout.contiguous:
            raw = cmd.read(self.buf, layout.start_offset * isz, n * isz)
            return raw.view(npd).reshape(shape)
        lo, hi = layout.extent()
        if hi - lo <= 2 * n + 4096:
            raw = cmd.read(self.buf, lo * isz, (hi - lo) * isz).view(npd)
            view = np.lib.stride_tricks.as_strided(
                raw[layout.start_offset - lo:], shape, tuple(s * isz for s in layout.stride))
            return np.array(view, copy=True)
        compact = self.copy_strided(layout)
        return compact.to_numpy(Layout.contiguous_of(shape))

    def _wrap(self, buf, dtype, count) -> "GpuStorage":
        """A new storage of this device over an op's freshly written output buffer."""
        return new_storage(self.bdev, buf, dtype, count)


# The protocol class comes last: its NotImplementedError defaults (optional ops)
# must not shadow the mixins' methods.
class GpuStorage(GpuCore, GpuElementwise, GpuReduce, GpuMatmul, GpuIndexing, GpuConv, GpuCopy,
                 GpuFused, GpuQuantized, BackendStorage):
    """A GPU storage: a pool buffer holding ``count`` elements of one dtype."""

    __slots__ = ()


def new_storage(bdev, buf, dtype, count) -> GpuStorage:
    """A storage of device state ``bdev`` over pool buffer ``buf``."""
    s = _new(GpuStorage)
    s.bdev = bdev
    s.buf = buf
    s.dtype = dtype
    s.count = count
    return s


