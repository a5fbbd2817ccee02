"""What a compiled function's recordings are keyed by, and how arguments and results
are taken apart into tensors and the rest.

Arguments are walked through tuples, lists and dicts: the tensors are the leaves a
replay substitutes; everything else (numbers, strings, None, dtypes...) is part of
the key, so a different non-tensor argument records again. A tensor's part of the
key is what the recorded calls depend on: its layout (shape, strides, offset), dtype,
device and whether it is tracked (a Var), plus which arguments share a buffer.
"""

from __future__ import annotations

from ..errors import CaptureError
from ..tensor_base import TensorBase


class Leaf:
    """Placeholder for the n-th tensor in a flattened structure."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return f"<tensor {self.n}>"

    def __eq__(self, other):
        return isinstance(other, Leaf) and other.n == self.n

    def __hash__(self):
        return hash(("leaf", self.n))


def flatten(obj, leaves: list, where: str):
    """``obj`` with every tensor replaced by a ``Leaf`` (tensors appended to ``leaves``);
    containers become tuples tagged with their kind so the structure is hashable."""
    if isinstance(obj, TensorBase):
        leaves.append(obj)
        return Leaf(len(leaves) - 1)
    if isinstance(obj, tuple):
        return ("tuple", tuple(flatten(x, leaves, where) for x in obj))
    if isinstance(obj, list):
        return ("list", tuple(flatten(x, leaves, where) for x in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, flatten(v, leaves, where)) for k, v in obj.items()))
    try:
        hash(obj)
    except TypeError:
        raise CaptureError(
            f"compile: {where} holds an unhashable {type(obj).__name__}, which cannot key a "
            "recording; pass tensors, numbers, strings or tuples of them") from None
    return ("const", obj)


def unflatten(tree, leaves):
    """The structure ``flatten`` described, with ``leaves`` put back."""
    if isinstance(tree, Leaf):
        return leaves[tree.n]
    kind, body = tree
    if kind == "const":
        return body
    if kind == "tuple":
        return tuple(unflatten(x, leaves) for x in body)
    if kind == "list":
        return [unflatten(x, leaves) for x in body]
    return {k: unflatten(v, leaves) for k, v in body}


def tensor_key(t):
    lay = t._layout
    s = t._storage
    return (lay.shape, lay.stride, lay.start_offset, s.count, s.dtype.name, s.bdev.handle.kind,
            s.bdev.handle.ordinal, t._track)


def signature(args, kwargs):
    """``(key, leaves)`` for a call: the hashable key of the argument structure and
    tensor properties, and the tensors in order."""
    leaves: list = []
    tree = flatten((args, kwargs), leaves, "an argument")
    first = {}
    aliases = tuple(first.setdefault(id(t._storage), i) for i, t in enumerate(leaves))
    key = (tree, tuple(tensor_key(t) for t in leaves), aliases)
    return key, leaves
