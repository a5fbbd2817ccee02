"""The op graph, and the table of element-wise ops.

A tensor is *tracked* when it is a ``Var`` or has a recorded op. An op record
keeps its input tensors alive (that is the graph's memory cost) plus the
non-tensor parameters backward needs. Plain tensors record nothing, so code
without a Var pays nothing and needs no ``no_grad`` mode; inside ``tl.no_grad()``
ops over Vars record nothing either (an optimiser's update, evaluation).

``OPS`` (at the end) defines each element-wise op once: its name, family, the
dtypes it takes, its code in the GPU kernels and whether it is differentiable.
The Tensor methods, the backend protocol's op lists, the CPU kernels' tables,
the GPU codes and the WGSL constants (``OP_NEG``...) are derived from it.
"""

from __future__ import annotations

from . import versions
from .grad_mode import GRAD_MODE

_new_op = object.__new__


class Op:
    """A recorded op: its ``name`` (the backward rule's key), input tensors ``args``,
    non-tensor ``params`` and the clock of in-place writes when it was recorded
    (``versions``: ``versions.WRITES``, checked by backward).

    ``Op(...)`` is None inside ``tl.no_grad()``: every site that records writes
    ``Op(...) if <an input is tracked> else None``, so building nothing there
    is what makes the result a plain tensor (grad_mode.py)."""

    __slots__ = ("name", "args", "params", "versions")

    def __new__(cls, name, args, params=None):
        return _new_op(cls) if GRAD_MODE.enabled else None

    def __init__(self, name: str, args: tuple, params=None):
        self.name = name
        self.args = args
        self.params = params
        # Backward refuses the op if an input is written after this time (versions.py).
        self.versions = versions.WRITES

    def __repr__(self):
        shapes = [list(a.shape) for a in self.args]
        return f"Op({self.name}, inputs={shapes}, params={self.params!r})"


# Every op records through these: ``record(name, args, params)`` is the Op when an
# input is tracked, else None; record1/record2 are the same for one and two inputs,
# without building a tuple first (they are on every op's path).

def record1(name, a, params=None):
    return Op(name, (a,), params) if a._track else None


def record2(name, a, b, params=None):
    return Op(name, (a, b), params) if (a._track or b._track) else None


def record(name, args, params=None):
    for a in args:
        if a._track:
            return Op(name, tuple(args), params)
    return None


# -- the element-wise op table ---------------------------------------------------------------

class OpDef:
    """One element-wise op: ``family`` is "unary" (``Tensor.<name>()``), "unary_param"
    (a unary op with scalar parameters: affine, powf, elu, clamp), "binary" or "cmp";
    ``dtypes`` is "float" (float dtypes only), "signed" (floats and i64), "int"
    (integer dtypes only) or "any";
    ``gpu_code`` its number in the GPU kernels' ``switch`` (WGSL constant ``OP_<NAME>``)."""

    __slots__ = ("name", "family", "dtypes", "gpu_code", "differentiable")

    def __init__(self, name, family, dtypes, gpu_code, differentiable):
        self.name = name
        self.family = family
        self.dtypes = dtypes
        self.gpu_code = gpu_code
        self.differentiable = differentiable

    def __repr__(self):
        return (f"OpDef({self.name!r}, {self.family}, dtypes={self.dtypes}, gpu_code={self.gpu_code}, "
                f"differentiable={self.differentiable})")


_U, _P, _B, _C = "unary", "unary_param", "binary", "cmp"

OPS = {d.name: d for d in (
    # name          family dtypes    gpu  differentiable
    OpDef("neg",      _U, "signed", 0, True),
    OpDef("abs",      _U, "any",    1, True),
    OpDef("exp",      _U, "float",  2, True),
    OpDef("log",      _U, "float",  3, True),
    OpDef("sin",      _U, "float",  4, True),
    OpDef("cos",      _U, "float",  5, True),
    OpDef("tanh",     _U, "float",  6, True),
    OpDef("sqr",      _U, "any",    7, True),
    OpDef("sqrt",     _U, "float",  8, True),
    OpDef("recip",    _U, "float",  9, True),
    OpDef("relu",     _U, "any",    10, True),
    OpDef("gelu",     _U, "float",  11, True),
    OpDef("gelu_erf", _U, "float",  12, True),
    OpDef("erf",      _U, "float",  13, True),
    OpDef("silu",     _U, "float",  14, True),
    OpDef("sigmoid",  _U, "float",  15, True),
    OpDef("floor",    _U, "float",  16, True),
    OpDef("ceil",     _U, "float",  17, True),
    OpDef("round",    _U, "float",  18, True),
    OpDef("sign",     _U, "any",    19, True),
    OpDef("affine",   _P, "any",    20, True),
    OpDef("powf",     _P, "float",  21, True),
    OpDef("elu",      _P, "float",  22, True),
    OpDef("clamp",    _P, "any",    23, True),
    OpDef("add",      _B, "any",    0, True),
    OpDef("sub",      _B, "any",    1, True),
    OpDef("mul",      _B, "any",    2, True),
    OpDef("div",      _B, "any",    3, True),
    OpDef("maximum",  _B, "any",    4, True),
    OpDef("minimum",  _B, "any",    5, True),
    OpDef("pow",      _B, "float",  6, True),
    # Python's % and // (floored: the remainder takes the divisor's sign) and the
    # bitwise ops behind & | ^ (integer dtypes; floats are refused by the backends).
    OpDef("rem",       _B, "any",   7, True),
    OpDef("floor_div", _B, "any",   8, False),
    OpDef("bit_and",   _B, "int",   9, False),
    OpDef("bit_or",    _B, "int",   10, False),
    OpDef("bit_xor",   _B, "int",   11, False),
    OpDef("eq",       _C, "any",    0, False),
    OpDef("ne",       _C, "any",    1, False),
    OpDef("lt",       _C, "any",    2, False),
    OpDef("le",       _C, "any",    3, False),
    OpDef("gt",       _C, "any",    4, False),
    OpDef("ge",       _C, "any",    5, False),
)}


def _names(family, dtypes=None):
    return tuple(d.name for d in OPS.values()
                 if d.family == family and (dtypes is None or d.dtypes in dtypes))


UNARY_OPS = _names(_U)
# Unary ops defined on integer dtypes too (the others are float-only; "neg" on
# signed integers only).
INT_UNARY_OPS = _names(_U, ("any", "signed"))
BINARY_OPS = _names(_B)
CMP_OPS = _names(_C)


def gpu_codes(family) -> dict:
    """name -> code in the GPU kernels, for one family ("unary" includes "unary_param")."""
    fams = (_U, _P) if family == _U else (family,)
    return {d.name: d.gpu_code for d in OPS.values() if d.family in fams}


def wgsl_constants() -> str:
    """``const OP_<NAME> = <code>u;`` for every op: the names the WGSL kernels switch on."""
    return "\n".join(f"const OP_{d.name.upper()}: u32 = {d.gpu_code}u;" for d in OPS.values())
