"""Element types: candle's dtypes plus PyTorch's bool, their NumPy counterparts, and the
one type-promotion rule (PyTorch's ``torch.result_type``).

Kinds: ``bool``; the integers ``u8 u32 i8 i16 i32 i64``; the floats ``f16 bf16 f32
f64``; and candle's small float formats ``f8e4m3 f6e2m3 f6e3m2 f4 f8e8m0``, held one
element per byte (ml_dtypes' NumPy types) with exact casts to and from f32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DTypeMismatchError, UnsupportedDTypeError


class DType:
    """An element type. Compared by identity: there is one object per dtype.

    ``is_int`` holds for bool as well (its values are the integers 0 and 1: it is
    exact, never differentiated, accepted wherever an integer mask is); ``is_bool``
    tells it apart. ``is_small_float`` marks the storage formats below 16 bits.
    """

    __slots__ = ("name", "size_in_bytes", "np", "is_float", "is_int", "is_bool", "is_signed",
                 "is_small_float", "min", "max")

    def __init__(self, name: str, np_dtype, kind: str):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.size_in_bytes = self.np.itemsize
        self.is_float = kind in "fs"
        self.is_int = not self.is_float
        self.is_bool = kind == "b"
        self.is_small_float = kind == "s"
        self.is_signed = kind in "ifs"
        if self.is_bool:
            self.min, self.max = 0, 1
        else:
            info = ml_dtypes.finfo(self.np) if self.is_float else np.iinfo(self.np)
            self.min = info.min
            self.max = info.max

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"tallow.{self.name}"

    def __reduce__(self):
        return (DType.parse, (self.name,))

    @staticmethod
    def parse(value) -> "DType":
        """A dtype from its name ("f32", also "float32"...), a NumPy dtype or a DType."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            found = _BY_NAME.get(value.lower())
            if found is None:
                raise UnsupportedDTypeError(
                    f"unknown dtype {value!r}; expected one of {', '.join(_BY_NAME_CANONICAL)}"
                )
            return found
        if value is bool:
            return bool_
        if value is int:
            return i64
        if value is float:
            return f64  # NumPy's and PyTorch's dtype=float
        return from_numpy_dtype(value)


bool_ = DType("bool", np.bool_, "b")
u8 = DType("u8", np.uint8, "u")
u32 = DType("u32", np.uint32, "u")
i8 = DType("i8", np.int8, "i")
i16 = DType("i16", np.int16, "i")
i32 = DType("i32", np.int32, "i")
i64 = DType("i64", np.int64, "i")
f16 = DType("f16", np.float16, "f")
bf16 = DType("bf16", ml_dtypes.bfloat16, "f")
f32 = DType("f32", np.float32, "f")
f64 = DType("f64", np.float64, "f")
f8e4m3 = DType("f8e4m3", ml_dtypes.float8_e4m3fn, "s")
f6e2m3 = DType("f6e2m3", ml_dtypes.float6_e2m3fn, "s")
f6e3m2 = DType("f6e3m2", ml_dtypes.float6_e3m2fn, "s")
f4 = DType("f4", ml_dtypes.float4_e2m1fn, "s")
f8e8m0 = DType("f8e8m0", ml_dtypes.float8_e8m0fnu, "s")

# PyTorch's names for the same DType objects (``tl.bool`` is set in tallow/__init__.py:
# a module attribute named ``bool`` here would shadow the builtin).
uint8, uint32, int8, int16, int32, int64 = u8, u32, i8, i16, i32, i64
float16, bfloat16, float32, float64 = f16, bf16, f32, f64
float8_e4m3fn, float8_e8m0fnu = f8e4m3, f8e8m0

ALL = (bool_, u8, u32, i8, i16, i32, i64, f16, bf16, f32, f64, f8e4m3, f6e2m3, f6e3m2, f4, f8e8m0)
# The dtypes arithmetic runs in (every float but the small formats).
FLOATS = (f16, bf16, f32, f64)
SMALL_FLOATS = (f8e4m3, f6e2m3, f6e3m2, f4, f8e8m0)
INTS = (u8, u32, i8, i16, i32, i64)

_BY_NAME_CANONICAL = [d.name for d in ALL]
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(
    bool_=bool_, uint8=u8, uint32=u32, int8=i8, int16=i16, int32=i32, int=i32, int64=i64,
    long=i64, short=i16, float16=f16, half=f16, bfloat16=bf16, float32=f32, float=f32,
    float64=f64, double=f64, float8_e4m3fn=f8e4m3, f8e4m3fn=f8e4m3, float6_e2m3fn=f6e2m3,
    float6_e3m2fn=f6e3m2, float4_e2m1fn=f4, float4_e2m1fn_x1=f4, float8_e8m0fnu=f8e8m0,
)
_BY_NP = {d.np: d for d in ALL}
# NumPy types with no tallow twin that still convert losslessly into one.
_WIDENED = {np.dtype(np.uint16): u32}


def from_numpy_dtype(np_dtype, allow_widening: bool = False) -> DType:
    """The DType holding NumPy's ``np_dtype`` exactly (or by lossless widening)."""
    npd = np.dtype(np_dtype)
    found = _BY_NP.get(npd)
    if found is None and allow_widening:
        # A byte-swapped array (a big-endian .npy) converts to native order on copy.
        native = npd.newbyteorder("=") if npd.byteorder not in "=|" else npd
        found = _BY_NP.get(native) or _WIDENED.get(native)
    if found is None:
        raise UnsupportedDTypeError(
            f"NumPy dtype {npd} has no tallow dtype (supported: {', '.join(_BY_NAME_CANONICAL)})"
        )
    return found


# -- type promotion: PyTorch's torch.result_type -----------------------------------------
#
# Two tensor dtypes promote by ``promote_types`` (PyTorch's table: bool < integers <
# floats; u8 with a signed integer needs the next signed width; f16 with bf16 is f32).
# A Python scalar is "weak": it only decides the kind (an int scalar turns a bool tensor
# into i64, a float scalar turns an integer tensor into f32) and never widens a tensor
# of its own kind (f16 + 2.0 is f16, u8 + 1 is u8). A rank-0 tensor is weak in the same
# way against a tensor of rank >= 1, as in PyTorch.

def _promote_pair(a: DType, b: DType) -> DType:
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_small_float or b.is_small_float:
        raise DTypeMismatchError(
            f"no type promotion between {a} and {b} (as in PyTorch, the 8-, 6- and 4-bit "
            "float formats promote with nothing: convert explicitly with to_dtype)")
    if a.is_float and b.is_float:
        if {a, b} == {f16, bf16}:
            return f32
        return a if a.size_in_bytes >= b.size_in_bytes else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    # Two integer types: NumPy's table, which is PyTorch's (u8 + i8 -> i16); PyTorch
    # refuses u32 with other integers, NumPy's choice (u32 + i32 -> i64) is taken.
    return _BY_NP[np.promote_types(a.np, b.np)]


_PROMOTED: dict = {}


def promote_types(a: DType, b: DType) -> DType:
    """The dtype two tensors of dtypes ``a`` and ``b`` compute in (``torch.promote_types``)."""
    if a is b:
        return a
    key = (a, b)
    found = _PROMOTED.get(key)
    if found is None:
        found = _PROMOTED[key] = _promote_pair(a, b)
    return found


def _combine(higher, lower):
    """PyTorch's combine_categories: ``higher`` (a stronger operand class) wins unless
    ``lower`` is of a higher kind, in which case the two promote."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_float:
        return higher
    if higher.is_bool or lower.is_float:
        return promote_types(higher, lower)
    return higher


def scalar_dtype(value, default_float: DType = None) -> DType:
    """The dtype a Python scalar stands for in promotion: bool, i64, or the default float."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return i64
    return default_float or f32


def result_type(*operands) -> DType:
    """``torch.result_type`` over operands given as DTypes (tensors of rank >= 1),
    ``(DType, rank)`` pairs, tensors, or Python scalars (weak)."""
    dim = zero = weak = None
    for x in operands:
        if isinstance(x, DType):
            dim = x if dim is None else promote_types(dim, x)
            continue
        if isinstance(x, tuple):
            d, rank = x
        elif hasattr(x, "_storage"):
            d, rank = x._storage.dtype, x._layout.rank
        else:
            d = scalar_dtype(x)
            weak = d if weak is None else promote_types(weak, d)
            continue
        if rank:
            dim = d if dim is None else promote_types(dim, d)
        else:
            zero = d if zero is None else promote_types(zero, d)
    return _combine(_combine(dim, zero), weak)


def result_type_tensors(a, b) -> DType:
    """The dtype of a binary op on two tensors (the op path's promotion: equal dtypes
    return at once)."""
    da = a._storage.dtype
    db = b._storage.dtype
    if da is db:
        return da
    ra = a._layout.rank
    rb = b._layout.rank
    if bool(ra) == bool(rb):
        return promote_types(da, db)
    strong, weak = (da, db) if ra else (db, da)
    return _combine(strong, weak)


def result_type_scalar(d: DType, value) -> DType:
    """The dtype of ``tensor (op) scalar`` for a tensor of dtype ``d``."""
    return _combine(d, scalar_dtype(value))
