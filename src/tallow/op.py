"""The op graph: what produced a tensor, recorded only when an input is tracked.

A tensor is *tracked* when it is a ``Var`` or has a recorded op. An op record
keeps its input tensors alive (that is the graph's memory cost) plus the
non-tensor parameters backward needs. Plain tensors record nothing, so code
without a Var pays nothing and needs no ``no_grad`` mode.
"""

from __future__ import annotations

from .versions import versions_of


class Op:
    __slots__ = ("name", "args", "params", "versions")

    def __init__(self, name: str, args: tuple, params=None):
        self.name = name
        self.args = args
        self.params = params
        # The inputs' in-place write counts, checked by backward (see versions.py).
        self.versions = versions_of(args)

    def __repr__(self):
        shapes = [list(a.shape) for a in self.args]
        return f"Op({self.name}, inputs={shapes}, params={self.params!r})"


def record1(name, a, params=None):
    return Op(name, (a,), params) if a._track else None


def record2(name, a, b, params=None):
    return Op(name, (a, b), params) if (a._track or b._track) else None


def record(name, args, params=None):
    for a in args:
        if a._track:
            return Op(name, tuple(args), params)
    return None
