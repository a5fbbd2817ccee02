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

_VERSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def version(storage) -> int:
    """How many in-place writes ``storage`` has had."""
    return _VERSIONS.get(storage, 0) if _VERSIONS else 0


def bump(storage) -> None:
    """Note an in-place write to ``storage``."""
    _VERSIONS[storage] = _VERSIONS.get(storage, 0) + 1


def versions_of(args):
    """The versions of the args' storages, or None when every one is 0 (the common case)."""
    if not _VERSIONS:
        return None
    vs = tuple(_VERSIONS.get(a._storage, 0) for a in args)
    return vs if any(vs) else None


def check_unchanged(op) -> None:
    """Raise StaleGraphError if an input of the recorded ``op`` was written since."""
    if not _VERSIONS:
        return
    recorded = getattr(op, "versions", None) or (0,) * len(op.args)
    for i, (a, then) in enumerate(zip(op.args, recorded)):
        now = _VERSIONS.get(a._storage, 0)
        if now != then:
            what = "the Var" if a.is_variable() else "a view of a Var (or a tensor)"
            raise StaleGraphError(
                f"backward: {what} with id {a.id} (shape {a.shape}, {a.dtype}) was modified in "
                f"place (Var.set or another in-place write: version {then} -> {now}) after the "
                f"op '{op.name}' used it as input {i}; its gradient would mix old and new "
                "values. Run the forward pass again after changing the Var.")
