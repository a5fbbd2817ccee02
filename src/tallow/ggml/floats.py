"""The plain float "formats" a GGUF tensor or a QTensor can hold: F32, F16, BF16.

Their block size is 1.  F16 conversion is IEEE round-to-nearest-even (NumPy
and ``half::f16::from_f32`` agree).  BF16 rounds to nearest even and keeps
NaNs quiet, as ggml's ``ggml_compute_fp32_to_bf16`` and ``half::bf16::from_f32``
do; written out here because a cast through ml_dtypes need not treat NaN
payloads the same way.
"""

from __future__ import annotations

import numpy as np

from .blocks import F32


def f32_quantize(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks, dtype=F32).view(np.uint8)


def f32_dequantize(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks).view(F32).copy()


def f16_quantize(blocks: np.ndarray) -> np.ndarray:
    return blocks.astype(np.float16).view(np.uint8)


def f16_dequantize(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks).view(np.float16).astype(F32)


def bf16_quantize(blocks: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(blocks, dtype=F32).view(np.uint32).astype(np.uint64)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    quiet = (bits >> 16) | 0x40
    return np.where(is_nan, quiet, rounded).astype(np.uint16).view(np.uint8)


def bf16_dequantize(blocks: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(blocks).view(np.uint16).astype(np.uint32) << 16
    return bits.view(F32)
