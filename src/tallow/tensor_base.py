"""TensorBase: the fields every tensor has, in a module that imports nothing.

``Tensor`` is assembled from the op families (``ops_*.py``) and the constructors
(``constructors.py``); those mixins recognise a tensor argument with
``isinstance(x, TensorBase)`` and build their results with ``self._wrap(...)``
(defined by ``Tensor``), so none of them imports the class that is made of them.
"""

from __future__ import annotations

import itertools

# Tensor ids: unique per tensor object, as candle's TensorId (gradients are keyed by them).
new_id = itertools.count(1).__next__


class TensorBase:
    """A storage (shared by views), a layout into it, the op that produced it (None
    when untracked), whether it is tracked (a Var, or an op over one) and its id."""

    __slots__ = ("_storage", "_layout", "_op", "_track", "_id", "__weakref__")
