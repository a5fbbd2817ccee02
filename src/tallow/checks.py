"""Validation shared by every op: dtypes and devices of operands, scalar operands.

Validation happens at the Tensor layer, before any backend work, so nothing is
half-done when an error is raised.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import DeviceMismatchError, DTypeMismatchError, ShapeMismatchError


def same_dtype_device(op: str, tensors) -> None:
    """Every tensor on the first one's device and of its dtype (the device is checked
    first, as candle's storage ops do)."""
    first = tensors[0]._storage
    for t in tensors[1:]:
        s = t._storage
        if s.bdev is not first.bdev:
            raise DeviceMismatchError(
                f"{op}: device mismatch, {first.device} vs {s.device} "
                "(move one with to_device)"
            )
        if s.dtype is not first.dtype:
            raise DTypeMismatchError(
                f"{op}: dtype mismatch, {first.dtype} vs {s.dtype} "
                "(convert explicitly with to_dtype)"
            )


def binary_mismatch(op: str, lhs, rhs) -> None:
    """Raise the right error for two operands that differ in dtype or device."""
    same_dtype_device(op, (lhs, rhs))


def same_shape(op: str, lhs, rhs) -> None:
    if lhs._layout.shape != rhs._layout.shape:
        raise ShapeMismatchError(
            f"{op}: shape mismatch, lhs {lhs._layout.shape} vs rhs {rhs._layout.shape} "
            f"(use broadcast_{op} to broadcast)"
        )


def is_scalar(value) -> bool:
    return isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, complex)


def scalar_for(op: str, value, dtype):
    """``value`` as a Python number that fits ``dtype``, or an error saying why not."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, (int, float)):
        raise TypeError(f"{op}: unsupported operand {type(value).__name__}")
    if dtype.is_float:
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise DTypeMismatchError(
                f"{op}: a non-integral scalar {value!r} with a {dtype} tensor "
                "(convert the tensor with to_dtype first)"
            )
        value = int(value)
    if not dtype.min <= value <= dtype.max:
        raise OverflowError(f"{op}: scalar {value} does not fit dtype {dtype}")
    return value
