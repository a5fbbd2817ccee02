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
from ..shared_buffer import CAPTURE, share_of
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

    # ``_cow`` (the BufferShare of a clone's handles, backends/shared_buffer.py) is
    # left unset until a clone shares the buffer.
    __slots__ = ("bdev", "buf", "dtype", "count", "_cow", "__weakref__")

    def __init__(self, bdev, buf, dtype, count):
        self.bdev = bdev
        self.buf = buf
        self.dtype = dtype
        self.count = count

    def __del__(self):
        try:
            share = getattr(self, "_cow", None)
            if share is not None and not share.leave(self):
                return  # another handle still holds the buffer
            self.bdev.pool.release(self.buf)
        except Exception:  # interpreter shutdown
            pass

    # -- copy-on-write (backends/shared_buffer.py) ------------------------------------
    def share_buffer(self) -> "GpuStorage":
        """A second handle over this buffer (a clone's), copied only when written (at
        once while a compiled function records: shared_buffer.CAPTURE)."""
        if CAPTURE.active:
            return self.copy_strided(Layout.contiguous_of((self.count,)))
        s = new_storage(self.bdev, self.buf, self.dtype, self.count)
        share_of(self).join(s)
        return s

    def own_buffer(self) -> None:
        """Before an in-place write: a private copy of the buffer if another handle
        holds it (the writer's views hold this handle and follow it)."""
        share = getattr(self, "_cow", None)
        if share is None:
            return
        if share.holders > 1:
            fresh = self.copy_strided(Layout.contiguous_of((self.count,)))
            self.buf, fresh.buf = fresh.buf, self.buf
            # ``fresh`` now holds the shared buffer in this handle's place; it drops
            # out of the share when it is collected on return.
            share.join(fresh)
        share.leave(self)

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


