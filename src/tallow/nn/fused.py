"""A backend's optional fused ops, run from the nn layer: one kernel when the storage
has it and no input is tracked, else None and the caller composes the op."""

from __future__ import annotations

from ..backends.base import BackendStorage
from ..layout import Layout
from ..tensor_class import Tensor

_contig = Layout.contiguous_of

# storage class -> set of fused op names that raised NotImplementedError
_MISSING: dict = {}


def fused(name, x, *args, shape=None):
    """Run the backend's fused op ``name`` on ``x``'s storage; None when it has none.

    ``args`` are passed after ``x``'s layout. The result is a contiguous tensor of
    ``shape`` (default: ``x``'s shape).
    """
    s = x._storage
    missing = _MISSING.get(type(s))
    if missing is not None and name in missing:
        return None
    fn = getattr(s, name, None)
    if fn is None:
        return None
    try:
        out = fn(x._layout, *args)
    except NotImplementedError:
        _MISSING.setdefault(type(s), set()).add(name)
        return None
    return Tensor._wrap(out, _contig(x._layout.shape if shape is None else shape))


def has_fused(x, name) -> bool:
    """Whether ``x``'s backend has its own kernel for the fused op ``name`` (rather than
    the protocol's default, which leaves the op to be composed)."""
    s = x._storage
    fn = getattr(type(s), name, None)
    if fn is None or fn is getattr(BackendStorage, name, None):
        return False
    return name not in _MISSING.get(type(s), ())
