"""The activation rows of a quantized product, as every quantized kernel takes them.

(The products split their rows over the backend's pool: :mod:`.native.pool`.)
"""

from __future__ import annotations


import numpy as np


def activation_rows(x, n: int, k: int):
    """``x`` (..., k) of a product with an (n, k) weight as contiguous f32 rows
    ``(m, k)``, with its leading shape; ValueError when the last dim is not ``k``."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1:] != (k,):
        raise ValueError(f"matmul_t: x has shape {x.shape}, expected (..., {k}) for a "
                         f"({n}, {k}) weight")
    return np.ascontiguousarray(x.reshape(-1, k)), x.shape[:-1]
