"""Element-wise ops: unary, affine/powf/elu/clamp, binary (tensor and scalar),
comparisons, where_cond and casts. Each is one dispatch of a map kernel.

f16 and bf16 compute in f32 and round once; scalars are rounded to the tensor's
dtype first where the CPU backend (NumPy) does that.
"""

from __future__ import annotations

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from ..base import INT_UNARY_OPS
from .kernels import family
from .launch import map_new
from .layouts import ZERO_SCALARS, pad_scalars, scalar_words
from .storage import wrap

METHODS = (
    "unary", "affine", "powf", "elu", "clamp", "binary", "binary_scalar", "cmp",
    "cmp_scalar", "where_cond", "to_dtype",
)

_MAP = ("map.wgsl",)
UNARY = family("unary", [("a", "in", 0), ("y", "out", 0)], math=True, includes=_MAP)
BINARY = family("binary", [("a", "in", 0), ("b", "in", 0), ("y", "out", 0)], math=True, includes=_MAP)
BINARY_SCALAR = family("binary_scalar", [("a", "in", 0), ("y", "out", 0)], math=True,
                       file="binary.wgsl", flags=("SCALAR",), includes=_MAP)
CMP = family("cmp", [("a", "in", 0), ("b", "in", 0), ("y", "out", "u8")], includes=_MAP)
CMP_SCALAR = family("cmp_scalar", [("a", "in", 0), ("y", "out", "u8")], file="cmp.wgsl",
                    flags=("SCALAR",), includes=_MAP)
WHERE = family("where", [("c", "in", 0), ("a", "in", 1), ("b", "in", 1), ("y", "out", 1)],
               main=1, includes=_MAP)
CAST = family("cast", [("a", "in", 0), ("y", "out", 1)], includes=_MAP)

UNARY_CODES = {
    "neg": 0, "abs": 1, "exp": 2, "log": 3, "sin": 4, "cos": 5, "tanh": 6, "sqr": 7,
    "sqrt": 8, "recip": 9, "relu": 10, "gelu": 11, "gelu_erf": 12, "erf": 13, "silu": 14,
    "sigmoid": 15, "floor": 16, "ceil": 17, "round": 18, "sign": 19,
}
AFFINE, POWF, ELU, CLAMP = 20, 21, 22, 23
BINARY_CODES = {
    "add": 0, "sub": 1, "mul": 2, "div": 3, "maximum": 4, "minimum": 5, "pow": 6,
    "rem": 7, "floor_div": 8, "bit_and": 9, "bit_or": 10, "bit_xor": 11,
}
_BITWISE = ("bit_and", "bit_or", "bit_xor")
_INT_DIVISIONS = ("div", "rem", "floor_div")
CMP_CODES = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}
# Per-op pipeline-key caches: (dtype name, op) -> constants tuple.
_UNARY_CONSTS = {name: (("OP", code),) for name, code in UNARY_CODES.items()}
_BINARY_CONSTS = {name: (("OP", code),) for name, code in BINARY_CODES.items()}
_CMP_CONSTS = {name: (("OP", code),) for name, code in CMP_CODES.items()}


def _unsupported(s, op):
    st = s.bdev
    return UnsupportedDTypeError(
        f"{op}: not supported for dtype {s.dtype} on gpu:{st.ordinal} ({st.adapter_name})")


def _map1(s, layout, fam, constants, scalars=ZERO_SCALARS, out_dtype=None):
    state = s.bdev
    pipe = state.kernels.ref(fam, (s.dtype.name,), "main", constants)
    out_dtype = out_dtype or s.dtype
    n = layout.count
    return wrap(state, map_new(state, pipe, ((s, layout),), out_dtype, n, scalars), out_dtype, n)


def unary(s, op, layout):
    consts = _UNARY_CONSTS.get(op)
    if consts is None:
        raise ValueError(f"unknown unary op {op!r}")
    dtype = s.dtype
    if dtype.is_int and (op not in INT_UNARY_OPS or (op == "neg" and dtype is not dt.i64)):
        raise _unsupported(s, op)
    return _map1(s, layout, UNARY, consts)


def affine(s, layout, mul, add):
    dtype = s.dtype
    if dtype.is_int:
        words = scalar_words(dtype, int(mul)) + scalar_words(dtype, int(add))
    else:
        words = scalar_words(dtype, mul, False) + scalar_words(dtype, add, False)
    return _map1(s, layout, UNARY, (("OP", AFFINE),), pad_scalars(words))


def powf(s, layout, exponent):
    if not s.dtype.is_float:
        raise _unsupported(s, "powf")
    return _map1(s, layout, UNARY, (("OP", POWF),), pad_scalars(scalar_words(s.dtype, exponent, False)))


def elu(s, layout, alpha):
    if not s.dtype.is_float:
        raise _unsupported(s, "elu")
    return _map1(s, layout, UNARY, (("OP", ELU),), pad_scalars(scalar_words(s.dtype, alpha, False)))


def clamp(s, layout, low, high):
    dtype = s.dtype
    flags = (1 if low is not None else 0) | (2 if high is not None else 0)
    words = (scalar_words(dtype, low if low is not None else 0)
             + scalar_words(dtype, high if high is not None else 0) + (flags, 0))
    return _map1(s, layout, UNARY, (("OP", CLAMP),), pad_scalars(words))


def _check_div(s, layout, op="div"):
    """Integer division refuses a zero divisor, as on the CPU: one small readback."""
    from .ops_check import first_zero

    if first_zero(s, layout) is not None:
        raise ZeroDivisionError(f"{op}: integer division by zero")


def binary(s, op, lhs_layout, rhs, rhs_layout):
    consts = _BINARY_CONSTS.get(op)
    if consts is None:
        raise ValueError(f"unknown binary op {op!r}")
    dtype = s.dtype
    if dtype.is_int:
        if op == "pow":
            raise _unsupported(s, "pow")
        if op in _INT_DIVISIONS:
            _check_div(rhs, rhs_layout, op)
    elif op in _BITWISE:
        raise _unsupported(s, op)
    state = s.bdev
    pipe = state.kernels.ref(BINARY, (dtype.name,), "main", consts)
    n = lhs_layout.count
    buf = map_new(state, pipe, ((s, lhs_layout), (rhs, rhs_layout)), dtype, n)
    return wrap(state, buf, dtype, n)


def binary_scalar(s, op, layout, scalar, scalar_on_left):
    code = BINARY_CODES.get(op)
    if code is None:
        raise ValueError(f"unknown binary op {op!r}")
    dtype = s.dtype
    if dtype.is_int:
        if op == "pow":
            raise _unsupported(s, "pow")
        if op in _INT_DIVISIONS:
            if scalar_on_left:
                _check_div(s, layout, op)
            elif scalar == 0:
                raise ZeroDivisionError(f"{op}: integer division by zero")
    elif op in _BITWISE:
        raise _unsupported(s, op)
    # NumPy rounds the scalar to a half dtype, except for pow (computed in f32).
    words = pad_scalars(scalar_words(dtype, scalar, op != "pow"))
    consts = (("OP", code), ("SCALAR_LEFT", bool(scalar_on_left)))
    return _map1(s, layout, BINARY_SCALAR, consts, words)


def cmp(s, op, lhs_layout, rhs, rhs_layout):
    state = s.bdev
    pipe = state.kernels.ref(CMP, (s.dtype.name,), "main", _CMP_CONSTS[op])
    n = lhs_layout.count
    buf = map_new(state, pipe, ((s, lhs_layout), (rhs, rhs_layout)), dt.u8, n)
    return wrap(state, buf, dt.u8, n)


def cmp_scalar(s, op, layout, scalar):
    words = pad_scalars(scalar_words(s.dtype, scalar))
    return _map1(s, layout, CMP_SCALAR, _CMP_CONSTS[op], words, out_dtype=dt.u8)


def where_cond(s, layout, on_true, true_layout, on_false, false_layout):
    state = s.bdev
    dtype = on_true.dtype
    pipe = state.kernels.ref(WHERE, (s.dtype.name, dtype.name))
    n = layout.count
    ops = ((s, layout), (on_true, true_layout), (on_false, false_layout))
    return wrap(state, map_new(state, pipe, ops, dtype, n), dtype, n)


def to_dtype(s, layout, dtype):
    state = s.bdev
    state.check_dtype(dtype, "to_dtype")
    n = layout.count
    if dtype is s.dtype:
        return s.copy_strided(layout)
    pipe = state.kernels.ref(CAST, (s.dtype.name, dtype.name))
    return wrap(state, map_new(state, pipe, ((s, layout),), dtype, n), dtype, n)
