"""Quantized tensors: ``QTensor``, ``QMatMul``, ``load_gguf`` and ``save_gguf``.

Built on the block codecs and GGUF io of :mod:`tallow.ggml` (whose public names
are re-exported here) and on the backends' quantized kernels.
"""

from ..ggml.gguf_io import GgufError, GgufFile, GgufTensor, GgufValue, ValueType, read_gguf, to_gguf_value, write_gguf
from ..ggml.types import GGML_TYPES, GgmlType, dequantize, ggml_type, quantize
from .qtensor import QMatMul, QTensor  # noqa: E402  (needs the Tensor core)
from .gguf_file import load_gguf, save_gguf  # noqa: E402

# The NumPy quantized matmul is a CPU kernel (tallow.backends.cpu.quantized.vec_dot);
# its names are re-exported here on first use: that module imports the codecs of
# this package, so an eager import would be a cycle when it is imported first.
_VEC_DOT_NAMES = ("PreparedWeight", "prepare_weight", "matmul_t", "matmul_t_dequantized")


def __getattr__(name):
    if name in _VEC_DOT_NAMES:
        from ..backends.cpu.quantized import vec_dot

        return getattr(vec_dot, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GGML_TYPES", "GgmlType", "ggml_type", "quantize", "dequantize",
    "PreparedWeight", "prepare_weight", "matmul_t", "matmul_t_dequantized",
    "GgufError", "GgufFile", "GgufTensor", "GgufValue", "ValueType", "read_gguf", "write_gguf", "to_gguf_value",
    "QTensor", "QMatMul", "load_gguf", "save_gguf",
]
