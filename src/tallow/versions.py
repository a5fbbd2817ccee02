"""Version counters of buffers written in place, so backward can refuse stale graphs.

An op recorded for autograd keeps its inputs (their storage and layout), not a
copy of their values. ``Var.set`` and the other in-place writes change those
values; a backward pass over a graph recorded before the write would then mix
old and new values without a word (PyTorch raises on its version counter).

Every in-place write to a buffer calls ``bump(storage)``, which counts the write
on the buffer and on a clock of all writes (``WRITES``); a recorded op notes the
clock (one attribute read), and backward raises ``StaleGraphError`` naming the
tensor written after that time. While nothing was written since an op was
recorded (a training step's backward, between two optimiser steps), its check
is one comparison. Buffers never written in place have no entry.
"""

from __future__ import annotations

import weakref

from .errors import StaleGraphError

# id(storage) -> (in-place writes, WRITES at the last one). A plain dict (C-speed
# lookups); an entry is removed by a finalizer when its storage dies, before the id
# can be reused.
_VERSIONS: dict = {}
# In-place writes so far, to any buffer: the clock ops record (``Op.versions``).
WRITES = 0


def version(storage) -> int:
    """How many in-place writes ``storage`` has had."""
    entry = _VERSIONS.get(id(storage)) if _VERSIONS else None
    return entry[0] if entry else 0


def bump(storage) -> None:
    """Note an in-place write to ``storage``."""
    global WRITES
    WRITES += 1
    key = id(storage)
    entry = _VERSIONS.get(key)
    if entry is None:
        weakref.finalize(storage, _VERSIONS.pop, key, None)
        entry = (0, 0)
    _VERSIONS[key] = (entry[0] + 1, WRITES)


def check_unchanged(op) -> None:
    """Raise StaleGraphError if an input of the recorded ``op`` was written since."""
    recorded = getattr(op, "versions", None) or 0  # WRITES when the op was recorded
    if recorded == WRITES:  # nothing written anywhere since
        return
    get = _VERSIONS.get
    for i, a in enumerate(op.args):
        entry = get(id(a._storage))
        if entry is not None and entry[1] > recorded:
            what = "the Var" if a.is_variable() else "a view of a Var (or a tensor)"
            raise StaleGraphError(
                f"backward: {what} with id {a.id} (shape {a.shape}, {a.dtype}) was modified in "
                f"place (Var.set or another in-place write: now at version {entry[0]}) after "
                f"the op '{op.name}' used it as input {i}; its gradient would mix old and new "
                "values. Run the forward pass again after changing the Var.")
