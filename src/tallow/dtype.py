"""Element types: the seven dtypes of candle and their NumPy counterparts."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import UnsupportedDTypeError


class DType:
    """An element type. Compared by identity: there is one object per dtype."""

    __slots__ = ("name", "size_in_bytes", "np", "is_float", "is_int", "min", "max")

    def __init__(self, name: str, np_dtype, is_float: bool):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.size_in_bytes = self.np.itemsize
        self.is_float = is_float
        self.is_int = not is_float
        info = ml_dtypes.finfo(self.np) if is_float else np.iinfo(self.np)
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
        return from_numpy_dtype(value)


u8 = DType("u8", np.uint8, False)
u32 = DType("u32", np.uint32, False)
i64 = DType("i64", np.int64, False)
f16 = DType("f16", np.float16, True)
bf16 = DType("bf16", ml_dtypes.bfloat16, True)
f32 = DType("f32", np.float32, True)
f64 = DType("f64", np.float64, True)

# PyTorch's names for the same DType objects.
uint8, uint32, int64 = u8, u32, i64
float16, bfloat16, float32, float64 = f16, bf16, f32, f64

ALL = (u8, u32, i64, f16, bf16, f32, f64)
FLOATS = (f16, bf16, f32, f64)
INTS = (u8, u32, i64)

_BY_NAME_CANONICAL = [d.name for d in ALL]
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(
    uint8=u8, uint32=u32, int64=i64, float16=f16, half=f16, bfloat16=bf16,
    float32=f32, float=f32, float64=f64, double=f64,
)
_BY_NP = {d.np: d for d in ALL}
# NumPy types with no tallow twin that still convert losslessly into one.
_WIDENED = {
    np.dtype(np.bool_): u8, np.dtype(np.int8): i64, np.dtype(np.int16): i64,
    np.dtype(np.int32): i64, np.dtype(np.uint16): u32,
}


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
