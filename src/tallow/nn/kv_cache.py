"""Key/value caches for autoregressive attention, as candle-nn's ``kv_cache``.

``KvCache(dim, max_seq_len)`` keeps every key and value appended along ``dim`` (the
sequence dimension, 2 for ``(batch, heads, seq, head_dim)``) up to ``max_seq_len``
positions; ``append(k, v)`` writes the new positions in place and returns the keys
and values so far. Its buffers start small and double as positions are used (capped
at ``max_seq_len``), so a long context costs memory only once it is filled.

``RotatingKvCache(dim, max_seq_len)`` keeps the last ``max_seq_len`` positions (a
sliding window, as Mistral's): once full, each append overwrites the oldest
positions. ``append`` returns the window in the order the positions came, oldest
first; an append of ``max_seq_len`` positions or more at once returns all of them
(candle's rule: a prompt longer than the window still attends to the whole prompt)
and keeps the last ``max_seq_len``.
"""

from __future__ import annotations

from ..creation import zeros
from ..errors import ShapeMismatchError
from ..tensor_class import Tensor

_FIRST_CAPACITY = 256  # positions; buffers then double as needed


class Cache:
    """One growing buffer along ``dim`` (candle-nn's ``Cache``): ``append(x)`` returns
    everything appended so far."""

    def __init__(self, dim: int, max_seq_len: int):
        if max_seq_len <= 0:
            raise ValueError(f"Cache: max_seq_len must be positive, got {max_seq_len}")
        self.dim, self.max_seq_len = int(dim), int(max_seq_len)
        self.all_data = None
        self.current_seq_len = 0

    def current_data(self):
        """The positions stored so far (a view of the buffer), or None when empty."""
        if self.all_data is None or self.current_seq_len == 0:
            return None
        return self.all_data.narrow(self.dim, 0, self.current_seq_len)

    def reset(self) -> None:
        self.all_data = None
        self.current_seq_len = 0

    def truncate(self, seq_len: int) -> None:
        """Keep the first ``seq_len`` positions (to generate again from there)."""
        if not 0 <= seq_len <= self.current_seq_len:
            raise ShapeMismatchError(
                f"Cache.truncate: {seq_len} is outside the {self.current_seq_len} cached "
                "positions")
        self.current_seq_len = int(seq_len)

    def _fits(self, src) -> bool:
        ad, d = self.all_data, self.dim
        return (ad.dtype == src.dtype and ad.device == src.device
                and all(a == b for i, (a, b) in enumerate(zip(ad.shape, src.shape)) if i != d))

    def append(self, src):
        d = self.dim % len(src.shape)
        seq = src.shape[d]
        total = self.current_seq_len + seq
        if total > self.max_seq_len:
            raise ShapeMismatchError(
                f"Cache.append: {self.current_seq_len} cached + {seq} new positions exceed "
                f"max_seq_len {self.max_seq_len}; reset() or truncate() the cache, or use "
                "RotatingKvCache for a sliding window")
        if self.all_data is not None and not self._fits(src):
            if self.current_seq_len:
                raise ShapeMismatchError(
                    f"Cache.append: new entries of shape {src.shape} ({src.dtype}) do not "
                    f"match the cached {self.all_data.shape} ({self.all_data.dtype}) outside "
                    f"dim {d}; reset() the cache for a new batch")
            self.all_data = None
        capacity = 0 if self.all_data is None else self.all_data.shape[d]
        if capacity < total:
            cap = capacity or min(_FIRST_CAPACITY, self.max_seq_len)
            while cap < total:
                cap *= 2
            shape = list(src.shape)
            shape[d] = min(cap, self.max_seq_len)
            grown = zeros(tuple(shape), dtype=src.dtype, device=src.device)
            if self.current_seq_len:
                grown.slice_set(self.current_data(), d, 0)
            self.all_data = grown
        self.all_data.slice_set(src, d, self.current_seq_len)
        self.current_seq_len = total
        return self.all_data.narrow(d, 0, total)


class _PairOfCaches:
    """Keys and values as two caches of one kind, appended together."""

    k_cache = v_cache = None

    @property
    def current_seq_len(self) -> int:
        return self.k_cache.current_seq_len

    def k(self):
        return self.k_cache.current_data()

    def v(self):
        return self.v_cache.current_data()

    def append(self, k, v):
        """Store ``k`` and ``v`` after the cached positions; return all keys and values."""
        if k.shape[self.k_cache.dim] != v.shape[self.v_cache.dim]:
            raise ShapeMismatchError(
                f"{type(self).__name__}.append: keys {k.shape} and values {v.shape} have "
                "different sequence lengths")
        return self.k_cache.append(k), self.v_cache.append(v)

    def reset(self) -> None:
        self.k_cache.reset()
        self.v_cache.reset()


class KvCache(_PairOfCaches):
    """Keys and values of one attention layer (candle-nn's ``KvCache``)."""

    def __init__(self, dim: int, max_seq_len: int):
        self.k_cache, self.v_cache = Cache(dim, max_seq_len), Cache(dim, max_seq_len)

    @property
    def max_seq_len(self) -> int:
        return self.k_cache.max_seq_len

    def truncate(self, seq_len: int) -> None:
        self.k_cache.truncate(seq_len)
        self.v_cache.truncate(seq_len)


class RotatingCache:
    """A ring buffer of the last ``max_seq_len`` positions along ``dim`` (candle-nn's
    ``RotatingCache``); ``offset`` is where the next position is written."""

    def __init__(self, dim: int, max_seq_len: int):
        if max_seq_len <= 0:
            raise ValueError(f"RotatingCache: max_seq_len must be positive, got {max_seq_len}")
        self.dim, self.max_seq_len = int(dim), int(max_seq_len)
        self.all_data = None
        self.offset = 0
        self.current_seq_len = 0  # positions appended in all, also those dropped

    def reset(self) -> None:
        self.all_data = None
        self.offset = self.current_seq_len = 0

    def current_data(self):
        """The window, oldest position first, or None when empty."""
        if self.all_data is None or self.current_seq_len == 0:
            return None
        d, n = self.dim, self.max_seq_len
        if self.current_seq_len < n:
            return self.all_data.narrow(d, 0, self.current_seq_len)
        if self.offset == 0:
            return self.all_data
        return Tensor.cat([self.all_data.narrow(d, self.offset, n - self.offset),
                    self.all_data.narrow(d, 0, self.offset)], d)

    def append(self, src):
        d = self.dim % len(src.shape)
        self.dim = d
        seq, n = src.shape[d], self.max_seq_len
        if self.all_data is None:
            shape = list(src.shape)
            shape[d] = n
            self.all_data = zeros(tuple(shape), dtype=src.dtype, device=src.device)
        self.current_seq_len += seq
        if seq >= n:
            self.all_data.slice_set(src.narrow(d, seq - n, n), d, 0)
            self.offset = 0
            return src
        room = n - self.offset
        if seq <= room:
            self.all_data.slice_set(src, d, self.offset)
            self.offset = (self.offset + seq) % n
        else:  # across the end of the ring: two writes
            self.all_data.slice_set(src.narrow(d, 0, room), d, self.offset)
            self.all_data.slice_set(src.narrow(d, room, seq - room), d, 0)
            self.offset = seq - room
        return self.current_data()


class RotatingKvCache(_PairOfCaches):
    """Keys and values over a sliding window of ``max_seq_len`` positions (candle-nn's
    ``RotatingKvCache``); ``current_seq_len`` counts every position appended since the
    last reset, also those the window dropped."""

    def __init__(self, dim: int, max_seq_len: int):
        self.k_cache = RotatingCache(dim, max_seq_len)
        self.v_cache = RotatingCache(dim, max_seq_len)

    @property
    def offset(self) -> int:
        return self.k_cache.offset
