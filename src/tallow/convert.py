"""From Python data and NumPy arrays to (array, dtype), with candle-pyo3's inference.

Python data: floats (or a mix of floats and ints) -> f32; ints -> i64 (as NumPy
and PyTorch: candle-pyo3's u32 wraps on the first negative result); bools -> bool.
NumPy arrays keep their dtype (bool, int8/16/32 included); uint16, which tallow
lacks, widens losslessly to u32.
"""

from __future__ import annotations

import numpy as np

from . import bf16_numpy, dtype as dt
from .errors import ShapeMismatchError, UnsupportedDTypeError, ValueNotRepresentableError


def infer_python(data):
    """(np.ndarray, DType) for a scalar or (nested) list/tuple of numbers."""
    try:
        arr = np.array(data)
    except (ValueError, OverflowError) as e:
        if isinstance(e, OverflowError) or "int" in str(e):
            arr = np.array(data, dtype=object)
        else:
            raise ShapeMismatchError(f"tensor: data is not rectangular ({e})") from None
    kind = arr.dtype.kind
    if kind == "b":
        return arr, dt.bool_
    if kind == "f":
        return arr.astype(np.float32), dt.f32
    if kind in "iu":
        if kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise OverflowError("tensor: an integer does not fit in i64")
        return arr.astype(np.int64), dt.i64
    if kind == "O":
        flat = arr.ravel().tolist()
        if all(isinstance(v, int) for v in flat):
            raise OverflowError("tensor: an integer does not fit in i64")
        raise TypeError("tensor: data must be numbers (or nested lists of numbers)")
    raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} data of kind {arr.dtype}")


def from_data(data, dtype=None):
    """(C-contiguous np.ndarray, DType) for any accepted input, always a copy."""
    if isinstance(data, np.ndarray):
        if dtype is None:
            dtype = dt.from_numpy_dtype(data.dtype, allow_widening=True)
        if data.dtype == np.float64 and dtype is dt.bf16:
            return bf16_numpy.from_f64(data), dtype  # rounded once, as to_dtype
        return np.array(data, dtype=dtype.np, order="C", copy=True), dtype
    if isinstance(data, np.generic):
        return from_data(np.asarray(data), dtype)
    if hasattr(data, "__array__") and not isinstance(data, (list, tuple)):
        return from_data(np.asarray(data), dtype)
    if dtype is None:
        arr, dtype = infer_python(data)
        return np.asarray(arr, order="C"), dtype
    try:
        arr = np.array(data, dtype=dtype.np if dtype is not dt.bf16 else np.float32)
    except (ValueError, OverflowError) as e:
        _explain_conversion_failure(data, dtype, e)
    if arr.dtype.kind == "O":
        raise TypeError("tensor: data must be numbers (or nested lists of numbers)")
    return np.asarray(arr.astype(dtype.np, copy=False), order="C"), dtype


def check_numpy_exact(array, op: str):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{op}: expected a NumPy array, got {type(array).__name__}")
    try:
        return dt.from_numpy_dtype(array.dtype)
    except UnsupportedDTypeError as e:
        raise UnsupportedDTypeError(f"{op}: {e}") from None


def _explain_conversion_failure(data, dtype, err):
    """Raise the real cause of a failed conversion of Python data to ``dtype``."""
    try:
        plain = np.array(data)
    except (ValueError, OverflowError):
        raise ShapeMismatchError(f"tensor: data is not rectangular ({err})") from None
    if plain.dtype.kind == "f" and dtype.is_int:
        bad = plain[~np.isfinite(plain)]
        if bad.size:
            raise ValueNotRepresentableError(
                f"tensor: {bad.ravel()[0]} cannot be stored as {dtype} (integer dtypes hold "
                "no NaN or infinity)") from None
    raise ValueNotRepresentableError(
        f"tensor: a value cannot be stored as {dtype} ({err})") from None
