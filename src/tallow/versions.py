"""Version counters of buffers written in place, so backward can refuse stale graphs.

An op recorded for autograd keeps its inputs (their storage and layout), not a
copy of their values. ``Var.set`` and the other in-place writes change those
values; a backward pass over a graph recorded before the write would then mix
old and new values without a word (PyTorch raises on its version counter).

Every in-place write to a buffer calls ``bump(storage)``; a recorded op notes
``versions_of(args)``; backward compares them with ``version(storage)`` now and
raises ``StaleGraphError`` naming the tensor that changed. Buffers never written
in place have no entry, so recording costs one dictionary check while no Var was
ever set.
"""

from __future__ import annotations

import weakref

from .errors import StaleGraphError

# id(storage) -> in-place writes. A plain dict (C-speed lookups on every recorded op
# and every backward node); an entry is removed by a finalizer when its storage dies,
# before the id can be reused.
_VERSIONS: dict = {}


def version(storage) -> int:
    """How many in-place writes ``storage`` has had."""
    return _VERSIONS.get(id(storage), 0) if _VERSIONS else 0


def bump(storage) -> None:
    """Note an in-place write to ``storage``."""
    key = id(storage)
    n = _VERSIONS.get(key)
    if n is None:
        weakref.finalize(storage, _VERSIONS.pop, key, None)
        n = 0
    _VERSIONS[key] = n + 1


def versions_of(args):
    """The versions of the args' storages, or None when every one is 0 (the common case
    until an optimiser's first step; after it, every op over a weight has a version).
    (A list made into a tuple: a generator cost twice as much per recorded op.)"""
    if not _VERSIONS:
        return None
    get = _VERSIONS.get
    vs = tuple([get(id(a._storage), 0) for a in args])
    return vs if any(vs) else None


def check_unchanged(op) -> None:
    """Raise StaleGraphError if an input of the recorded ``op`` was written since."""
    if not _VERSIONS:
        return
    recorded = getattr(op, "versions", None)
    get = _VERSIONS.get
    if versions_of(op.args) == recorded:  # (None on both sides: every version 0)
        return
    for i, a in enumerate(op.args):
        now = get(id(a._storage), 0)
        then = recorded[i] if recorded else 0
        if now != then:
            what = "the Var" if a.is_variable() else "a view of a Var (or a tensor)"
            raise StaleGraphError(
                f"backward: {what} with id {a.id} (shape {a.shape}, {a.dtype}) was modified in "
                f"place (Var.set or another in-place write: version {then} -> {now}) after the "
                f"op '{op.name}' used it as input {i}; its gradient would mix old and new "
                "values. Run the forward pass again after changing the Var.")
