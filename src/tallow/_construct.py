"""The one place Tensor objects are assembled (kept tiny: it is on every op's path)."""

from __future__ import annotations

import itertools

_new = object.__new__
_next_id = itertools.count(1).__next__

TENSOR = None  # tallow.tensor.Tensor, set when that module loads


def make(storage, layout, op=None):
    """A new Tensor over ``storage`` with ``layout``; ``op`` is its recorded op or None."""
    t = _new(TENSOR)
    t._storage = storage
    t._layout = layout
    t._op = op
    t._track = op is not None
    t._id = _next_id()
    return t


def new_id() -> int:
    return _next_id()
