"""Copy-on-write: storages that share one buffer until one of them is written.

``Tensor.clone()`` is free (no allocation: the seed's table says a clone is the same
buffer) and yet independent (PyTorch: a write to either is never seen by the other).
A storage is the *handle* a tensor and all its views hold; ``share_buffer()`` makes a
second handle over the same buffer and puts both in one ``BufferShare``. Before an
in-place write the Tensor layer calls ``own_buffer()`` on the handle it writes
through (tallow.inplace): while another handle of the share is alive, the writer's
handle gets a private copy of the buffer first. The writer's views hold the same
handle, so they follow the writer; the other side keeps the old buffer.

A CPU handle only needs to know whether another handle is alive (weak references).
A GPU buffer goes back to the pool when its last holder dies, so GPU handles also
count holders: that count is kept by ``__del__`` and is exact even when handles die
together in a garbage cycle (weak references are cleared before finalizers run).

While a compiled function records (tallow.compile), a clone copies at once instead
(``CAPTURE.active``): the recorder sees that copy, while a handle swapping its buffer
later would be invisible to it.
"""

from __future__ import annotations

import threading
import weakref


class _Capture(threading.local):
    """``active``: this thread records a compiled function (set by the recorder)."""

    active = False


CAPTURE = _Capture()


class BufferShare:
    """The handles over one buffer: weak references to them and the number of holders."""

    __slots__ = ("handles", "holders")

    def __init__(self):
        self.handles = []
        self.holders = 0

    def join(self, storage) -> None:
        """Add ``storage`` (a handle over this share's buffer)."""
        self.handles.append(weakref.ref(storage))
        self.holders += 1
        storage._cow = self

    def others_alive(self, storage) -> bool:
        """True while a handle other than ``storage`` is alive."""
        for ref in self.handles:
            other = ref()
            if other is not None and other is not storage:
                return True
        return False

    def leave(self, storage) -> bool:
        """Take ``storage`` out of the share; True when no holder is left (it was the
        last one, so the buffer is its own to release)."""
        storage._cow = None
        self.handles = [r for r in self.handles if r() is not None and r() is not storage]
        self.holders -= 1
        return self.holders <= 0


def share_of(storage) -> BufferShare:
    """``storage``'s share, made (with ``storage`` as its first handle) if it has none."""
    share = getattr(storage, "_cow", None)
    if share is None:
        share = BufferShare()
        share.join(storage)
    return share
