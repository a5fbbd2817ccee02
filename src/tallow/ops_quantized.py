"""Quantized weights at the Tensor level: one backend call per op, then wrap.

``QTensor`` and ``QMatMul`` (tallow.quantized) validate shapes, dtypes and devices;
these functions hand the storages to the backend's optional quantized methods
(``BackendStorage.dequantize`` / ``prepare_qweight`` / ``qmatmul_t``, and the
device's ``qmatmul_path``, see tallow/backends/base.py) and wrap the result.
"""

from __future__ import annotations

from .layout import Layout
from .tensor_class import Tensor

_contig = Layout.contiguous_of


def qmatmul_path(device, ggml_type):
    """The kernels ``device`` multiplies ``ggml_type`` weights with, or None (then
    the weights are dequantized and multiplied as f32)."""
    return device._state.qmatmul_path(ggml_type)


def dequantize(blocks, ggml_type, shape: tuple):
    """The f32 tensor of ``shape`` that the u8 ``blocks`` tensor encodes."""
    n = 1
    for d in shape:
        n *= d
    storage = blocks._storage.dequantize(blocks._layout, ggml_type, n)
    return Tensor._wrap(storage, _contig(tuple(shape)))


def prepare_qweight(blocks, ggml_type, n: int, k: int):
    """The backend's prepared form of the ``(n, k)`` weight (None where it has none)."""
    return blocks._storage.prepare_qweight(blocks._layout, ggml_type, n, k)


def qmatmul_t(x, blocks, ggml_type, n: int, k: int):
    """``x @ W.T`` for f32 ``x`` ``(..., k)`` and ``W`` the ``(n, k)`` weight in ``blocks``."""
    storage = x._storage.qmatmul_t(x._layout, blocks._storage, blocks._layout, ggml_type, n, k)
    return Tensor._wrap(storage, _contig(x.shape[:-1] + (n,)))
