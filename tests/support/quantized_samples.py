"""Test inputs shared by the quantized tests: sample weight matrices with the value
ranges real models have."""

import numpy as np


def sample_matrix(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Rows of varied scale and shape, plus the awkward cases the quantizers branch on."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= rng.uniform(1e-3, 50, (rows, 1)).astype(np.float32)
    if rows >= 6 and cols >= 64:
        x[0, :32] = 0.0  # an all-zero block
        x[1, :] = 0.0  # an all-zero row (every K-quant sub-block degenerate)
        x[2, 32:64] = 3.25  # a constant block
        x[3, :] = np.abs(x[3, :])  # all positive: min clamps to 0
        x[4, :] = -np.abs(x[4, :])  # all negative
        x[5, ::7] = 1e-30  # tiny values whose squares underflow
    return x
