"""GGML block formats, quantized matmul and GGUF files, at the NumPy level.

README-quantized.md in this folder describes the interface the Tensor-level
``QTensor`` / ``QMatMul`` / ``load_gguf`` build on.
"""

from .gguf_io import GgufError, GgufFile, GgufTensor, GgufValue, ValueType, read_gguf, to_gguf_value, write_gguf
from .types import GGML_TYPES, GgmlType, dequantize, ggml_type, quantize
from .vec_dot import PreparedWeight, matmul_t, matmul_t_dequantized, prepare_weight

__all__ = [
    "GGML_TYPES", "GgmlType", "ggml_type", "quantize", "dequantize",
    "PreparedWeight", "prepare_weight", "matmul_t", "matmul_t_dequantized",
    "GgufError", "GgufFile", "GgufTensor", "GgufValue", "ValueType", "read_gguf", "write_gguf", "to_gguf_value",
]
