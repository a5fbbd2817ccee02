"""Shapes and dimensions: parsing user shapes, resolving dims, broadcasting.

Shapes are plain tuples of ints. Every rule about them lives here, once.
"""

from __future__ import annotations

import operator

from .errors import DimOutOfRangeError, ShapeMismatchError
from .limits import check_shape


class D:
    """Dims counted from the end, as candle's ``D::Minus1`` / ``D::Minus2``."""

    Minus1 = -1
    Minus2 = -2

    @staticmethod
    def Minus(n: int) -> int:
        return -n


def _as_index(value, what: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}") from None


def parse_shape(args, op: str = "shape") -> tuple:
    """A shape from ``(2, 3)``, ``[2, 3]``, ``2`` or varargs ``2, 3``.

    Negative sizes raise OverflowError, as candle's Python binding does (a size is
    unsigned there).
    """
    if len(args) == 1 and not isinstance(args[0], int):
        args = args[0]
    if isinstance(args, int) or hasattr(args, "__index__"):
        args = (args,)
    shape = tuple(_as_index(d, f"{op}: a dimension") for d in args)
    for d in shape:
        if d < 0:
            raise OverflowError(f"{op}: negative dimension {d} in shape {shape}")
    check_shape(op, shape)
    return shape


def parse_shape_with_hole(args, count: int, op: str = "reshape") -> tuple:
    """A shape with at most one ``-1`` hole, resolved so its product is ``count``."""
    if len(args) == 1 and not isinstance(args[0], int):
        args = args[0]
    if isinstance(args, int) or hasattr(args, "__index__"):
        args = (args,)
    dims = [_as_index(d, f"{op}: a dimension") for d in args]
    holes = [i for i, d in enumerate(dims) if d == -1]
    if len(holes) > 1:
        raise ShapeMismatchError(f"{op}: at most one -1 is allowed in shape {tuple(dims)}")
    for d in dims:
        if d < -1:
            raise ShapeMismatchError(
                f"{op}: invalid dimension {d} in shape {tuple(dims)} (only -1 may stand for a hole)"
            )
    if holes:
        known = 1
        for i, d in enumerate(dims):
            if i != holes[0]:
                known *= d
        if known == 0 or count % known:
            raise ShapeMismatchError(
                f"{op}: cannot reshape {count} elements into {tuple(dims)}"
            )
        dims[holes[0]] = count // known
    check_shape(op, dims)
    return tuple(dims)


def elem_count(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def normalize_dim(dim, rank: int, op: str) -> int:
    """``dim`` in ``0..rank-1``; negative dims count from the end."""
    d = _as_index(dim, f"{op}: dim")
    if d < 0:
        d += rank
    if not 0 <= d < rank:
        raise DimOutOfRangeError(f"{op}: dim {dim} out of range for a rank-{rank} tensor")
    return d


def normalize_dims(dims, rank: int, op: str) -> tuple:
    """A sorted tuple of distinct dims from an int or an iterable of ints."""
    if isinstance(dims, int) or hasattr(dims, "__index__"):
        return (normalize_dim(dims, rank, op),)
    out = tuple(normalize_dim(d, rank, op) for d in dims)
    if len(set(out)) != len(out):
        raise ShapeMismatchError(f"{op}: repeated dim in {tuple(dims)}")
    return tuple(sorted(out))


def broadcast_shapes(lhs: tuple, rhs: tuple, op: str) -> tuple:
    """NumPy's broadcasting rule: align right, sizes equal or one of them 1."""
    if lhs == rhs:
        return lhs
    key = (lhs, rhs)
    found = _BROADCAST_CACHE.get(key)
    if found is not None:
        return found
    out = _broadcast(lhs, rhs, op)
    if len(_BROADCAST_CACHE) < 4096:
        _BROADCAST_CACHE[key] = out
    return out


_BROADCAST_CACHE: dict = {}


def _broadcast(lhs: tuple, rhs: tuple, op: str) -> tuple:
    n = max(len(lhs), len(rhs))
    a = (1,) * (n - len(lhs)) + lhs
    b = (1,) * (n - len(rhs)) + rhs
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ShapeMismatchError(
                f"{op}: shapes {lhs} and {rhs} cannot be broadcast together"
            )
    return tuple(out)

