"""The buffer pool: power-of-two buckets, reuse once no storage holds a buffer.

Sizes round up to a power of two, never below ``MIN_BUCKET`` (16 bytes: every
WGSL element type fits and copies stay 4-byte aligned), so a 2-byte bf16 scalar
gets 16 bytes and a 1025-byte tensor 2048. A size whose power of two would pass
the adapter's max buffer size is rounded to 256 bytes instead.

A storage returns its buffer from ``__del__`` by appending it to a deque (no
lock: ``__del__`` can run in any thread, at any time); the pool moves returned
buffers to its free lists when it next allocates. Free buffers are released
(dropped, down to the cache limit) at ``synchronize()`` and at readbacks, as in
candle, and when the limit is lowered.

The pool keeps a strong reference to the GPU object of every buffer it created
(``_owned``) until it releases the buffer itself. Without it, a storage caught in
cyclic garbage takes its buffer's GPU object into the same collection: the cycle
collector finalizes both, the storage hands the buffer back to the pool while
the wgpu wrapper releases the native buffer, and another thread can take that
buffer from the pool in between -- a bind group over a released buffer, which
aborts the process inside wgpu-native.
"""

from __future__ import annotations

import collections
import itertools

from wgpu import BufferUsage

from ... import config
from ...errors import TallowError
from .lost import raise_if_lost

MIN_BUCKET = 16
DEFAULT_CACHE_LIMIT = config.default("gpu_cache_limit")
_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST
_ids = itertools.count(1)


class PoolBuffer:
    """One GPU buffer: ``size`` bytes (its bucket), ``batch`` = the last command
    batch that referenced it (the pool avoids queue writes into a buffer that the
    current, unsubmitted batch still uses)."""

    __slots__ = ("gpu", "size", "id", "batch", "held")

    def __init__(self, gpu, size):
        self.gpu = gpu
        self.size = size
        self.id = next(_ids)
        self.batch = 0
        self.held = True  # handed out by alloc, not yet returned

    def __repr__(self):
        return f"PoolBuffer(id={self.id}, size={self.size})"


class BufferPool:
    def __init__(self, state):
        self._state = state
        self._device = state.device
        self.max_buffer = state.limits["max-buffer-size"]
        self._free: dict = collections.defaultdict(list)
        self._returned = collections.deque()
        self._count = collections.Counter()  # buffers alive per bucket (held or free)
        self._owned: dict = {}  # PoolBuffer.id -> its GPU object, until trim drops it
        self.active_bytes = 0
        self.cached_bytes = 0
        self.peak_bytes = 0
        self.allocated = 0  # buffers ever created
        self.reused = 0
        self.released = 0
        self.double_releases = 0  # returns of a buffer already returned (ignored)
        self.cache_limit = config.settings.gpu_cache_limit

    # -- sizes -------------------------------------------------------------------------
    def bucket(self, nbytes: int) -> int:
        if nbytes <= MIN_BUCKET:
            return MIN_BUCKET
        size = 1 << (nbytes - 1).bit_length()
        if size > self.max_buffer:
            size = (nbytes + 255) & ~255
            if size > self.max_buffer:
                raise TallowError(
                    f"a tensor of {nbytes} bytes exceeds the adapter's max buffer size "
                    f"({self.max_buffer} bytes)")
        return size

    # -- allocation (the caller holds the commands lock) ------------------------------
    def _drain(self):
        ret = self._returned
        free = self._free
        while ret:
            b = ret.popleft()
            free[b.size].append(b)
            self.active_bytes -= b.size
            self.cached_bytes += b.size

    def alloc(self, nbytes: int, avoid_batch: int = -1) -> PoolBuffer:
        """A buffer of at least ``nbytes``; with ``avoid_batch``, never one that
        batch references (for queue writes, which run before that batch)."""
        if self._returned:
            self._drain()
        size = self.bucket(nbytes)
        lst = self._free.get(size)
        if lst:
            if avoid_batch < 0:
                b = lst.pop()
            else:
                b = None
                for i in range(len(lst) - 1, -1, -1):
                    if lst[i].batch != avoid_batch:
                        b = lst.pop(i)
                        break
            if b is not None and b.gpu._internal is None:
                # Never hand out a buffer whose GPU object is gone (``_owned``
                # should make this impossible; the check costs one attribute read).
                self.cached_bytes -= size
                self._count[size] -= 1
                self._owned.pop(b.id, None)
                b = None
            if b is not None:
                b.held = True
                self.cached_bytes -= size
                self.active_bytes += size
                if self.active_bytes > self.peak_bytes:
                    self.peak_bytes = self.active_bytes
                self.reused += 1
                return b
        try:
            gpu = self._device.create_buffer(size=size, usage=_USAGE)
        except Exception as e:
            raise_if_lost(self._state, f"allocating {size} bytes", e)
            raise
        self.allocated += 1
        self._count[size] += 1
        self.active_bytes += size
        if self.active_bytes > self.peak_bytes:
            self.peak_bytes = self.active_bytes
        buf = PoolBuffer(gpu, size)
        self._owned[buf.id] = gpu
        return buf

    def release(self, buf: PoolBuffer) -> None:
        """Called from a storage's ``__del__``: lock free. A second return of the same
        buffer would put it on a free list twice (two owners, and one of them writing
        into a destroyed buffer after a trim): it is counted and ignored."""
        if not buf.held:
            self.double_releases += 1
            return
        buf.held = False
        self._returned.append(buf)

    def trim(self, limit=None) -> list:
        """Drop free buffers until the cache holds at most ``limit`` bytes (largest
        buckets first); returns the dropped buffers."""
        self._drain()
        limit = self.cache_limit if limit is None else limit
        dropped = []
        if self.cached_bytes <= limit:
            return dropped
        for size in sorted(self._free, reverse=True):
            lst = self._free[size]
            while lst and self.cached_bytes > limit:
                b = lst.pop()
                self.cached_bytes -= size
                self._count[size] -= 1
                dropped.append(b)
            if self.cached_bytes <= limit:
                break
        self.released += len(dropped)
        owned = self._owned
        for b in dropped:
            b.gpu.destroy()
            owned.pop(b.id, None)
        return dropped

    def stats(self) -> dict:
        self._drain()
        per_bucket = {size: n for size, n in sorted(self._count.items()) if n}
        free = {size: len(lst) for size, lst in sorted(self._free.items()) if lst}
        return {
            "active_bytes": self.active_bytes,
            "cached_bytes": self.cached_bytes,
            "peak_bytes": self.peak_bytes,
            "cache_limit": self.cache_limit,
            "buffers_per_bucket": per_bucket,
            "free_per_bucket": free,
            "buffers_allocated": self.allocated,
            "buffers_reused": self.reused,
            "buffers_released": self.released,
            "double_releases": self.double_releases,
        }
