"""Size limits checked before any work: a shape too large fails with a clear error.

A dimension or an element count above 2^63 - 1 cannot be indexed (NumPy's and
the GPU kernels' index types); a new buffer larger than the machine's memory (the
CPU) or the adapter's largest buffer (the GPU) can never be allocated. Without
these checks NumPy reported "array is too big" or "Maximum allowed dimension
exceeded", or an empty tensor of a 2^64-long dim failed only when read back.
"""

from __future__ import annotations

import math
import os

from .errors import ShapeTooLargeError

MAX_INDEX = 2**63 - 1


def check_shape(op: str, shape) -> None:
    """Every dim and the element count fit a signed 64-bit index."""
    for d in shape:
        if d > MAX_INDEX:
            raise ShapeTooLargeError(
                f"{op}: dimension {d} of shape {tuple(shape)} exceeds the limit of "
                f"{MAX_INDEX} (2^63 - 1)")
    count = math.prod(shape)
    if count > MAX_INDEX:
        raise ShapeTooLargeError(
            f"{op}: shape {tuple(shape)} has {count} elements, more than the limit of "
            f"{MAX_INDEX} (2^63 - 1)")


def memory_bytes() -> int | None:
    """The machine's physical memory in bytes, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_allocation(op: str, shape, dtype, device) -> None:
    """A new buffer of ``shape`` and ``dtype`` on ``device`` is possible at all."""
    check_shape(op, shape)
    nbytes = math.prod(shape) * dtype.size_in_bytes
    if device.kind == "cpu":
        limit, what = memory_bytes(), "the machine's memory"
    else:
        limit = device._state.limits.get("max-buffer-size") if hasattr(
            device._state, "limits") else None
        what = f"the largest buffer of {device}"
    if limit is not None and nbytes > limit:
        raise ShapeTooLargeError(
            f"{op}: shape {tuple(shape)} of {dtype} needs {nbytes} bytes, more than "
            f"{what} ({limit} bytes)")
