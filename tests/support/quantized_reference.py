"""candle's quantized matmul, row by row on candle's scalar block routines: the oracle
of the quantized matmul tests (CPU kernels, QTensor)."""

import numpy as np
from gguf import GGMLQuantizationType
from gguf import quants as gq

from tallow.quantized import ggml_type

from . import candle_ref, ggml_ref

# The block formats with a quantized dot product (the float ones are plain products).
QUANTIZED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "Q8K"]


def reference_matmul(name, x, w_raw):
    """candle's k_quants::matmul, row by row: quantize x to the dot type (ggml's reference
    quantizers), then vec_dot_unopt."""
    t = ggml_type(name)
    dot = t.dot_type
    if dot.name == "Q8_0":  # the gguf package is the oracle for Q8_0 bytes
        xq = gq.quantize(x, GGMLQuantizationType.Q8_0).view(np.uint8).reshape(x.shape[0], -1)
    else:
        xq = np.frombuffer(ggml_ref.quantize_row(dot.name, x.reshape(-1)), np.uint8).reshape(x.shape[0], -1)
    w_raw = w_raw.reshape(-1, t.nbytes(x.shape[1]))
    return np.array(
        [[candle_ref.vec_dot_row(name, bytes(w), bytes(r)) for w in w_raw] for r in xq], dtype=np.float32
    )
