"""GGML block formats, quantized matmul and GGUF files, at the NumPy level.

See README-quantized.md in this folder for the interface the Tensor-level
``QTensor`` / ``QMatMul`` build on.
"""

from .types import GGML_TYPES, GgmlType, dequantize, ggml_type, quantize

__all__ = ["GGML_TYPES", "GgmlType", "dequantize", "ggml_type", "quantize"]
