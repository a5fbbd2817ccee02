"""GGML block formats on NumPy arrays: the codecs of every quantized type, their
integer planes for products, and GGUF file reading and writing (README.md here).

The ground floor of the quantized stack, as ggml is under candle's quantized
tensors: it imports no Tensor and no backend, so the CPU and GPU kernels build on
it and ``tallow.quantized`` (``QTensor``, ``QMatMul``, ``load_gguf``) builds on both.
"""

from .gguf_io import GgufError, GgufFile, GgufTensor, GgufValue, ValueType, read_gguf, to_gguf_value, write_gguf
from .types import GGML_TYPES, GgmlType, dequantize, ggml_type, quantize

__all__ = [
    "GGML_TYPES", "GgmlType", "ggml_type", "quantize", "dequantize",
    "GgufError", "GgufFile", "GgufTensor", "GgufValue", "ValueType", "read_gguf", "write_gguf", "to_gguf_value",
]
