"""The 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.

Block layouts (little-endian, as ggml-common.h declares them):

    Q4_0  d:f16  qs[16]                 x = d * (q - 8)
    Q4_1  d:f16  m:f16  qs[16]          x = d * q + m
    Q5_0  d:f16  qh:u32 qs[16]          x = d * (q - 16)
    Q5_1  d:f16  m:f16  qh:u32 qs[16]   x = d * q + m
    Q8_0  d:f16  qs:i8[32]              x = d * q
    Q8_1  d:f16  s:f16  qs:i8[32]       x = d * q;  s = d * sum(q)

``qs[j]`` holds element ``j`` in its low nibble and element ``j + 16`` in its
high nibble; bit ``j`` of ``qh`` is the fifth bit of element ``j``.

Each quantizer does the float arithmetic of ggml's reference routine (and of
the ``gguf`` package, which reproduces it) in the same order, so the bytes are
identical; each dequantizer multiplies in the ``gguf`` package's order.
Q8_1 has no ``gguf`` implementation; it follows ggml's
``quantize_row_q8_1_ref``: ``s`` is ``sum(q) * d`` with the unrounded f32
``d``, rounded once to f16.
"""

from __future__ import annotations

import numpy as np

from .blocks import F32, bits_le, f16_bytes, f16_field, f16_round, pack_nibbles, round_away, unpack_bits_le
from .planes import ActPlanes, Planes

QK = 32
_HALF = QK // 2


def nibbles(qs: np.ndarray) -> np.ndarray:
    """16 packed bytes -> 32 values: low nibbles are elements 0..15, high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _pack_q4(q: np.ndarray) -> np.ndarray:
    return pack_nibbles(q[:, :_HALF], q[:, _HALF:])


def _fifth_bits(q: np.ndarray) -> np.ndarray:
    return bits_le(q >> 4)


def q5_values(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    return nibbles(qs) | (unpack_bits_le(qh) << 4)


def _inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, F32(0), F32(1) / d).astype(F32)


def _absmax_signed(blocks: np.ndarray) -> np.ndarray:
    # ggml keeps the first element of largest magnitude, with its sign.
    idx = np.argmax(np.abs(blocks), axis=-1)[:, None]
    return np.take_along_axis(blocks, idx, axis=-1)


# ---------------------------------------------------------------- Q4_0
def q4_0_quantize(blocks: np.ndarray) -> np.ndarray:
    d = _absmax_signed(blocks) / F32(-8)
    q = np.trunc(blocks * _inverse(d) + F32(8.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([f16_bytes(d), _pack_q4(q)], axis=-1)


def q4_0_dequantize(blocks: np.ndarray) -> np.ndarray:
    return f16_field(blocks, 0) * (nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)).astype(F32)


def q4_0_planes(blocks: np.ndarray) -> Planes:
    return Planes(q=nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8), gscale=f16_field(blocks, 0))


# ---------------------------------------------------------------- Q4_1
def q4_1_quantize(blocks: np.ndarray) -> np.ndarray:
    lo = blocks.min(axis=-1, keepdims=True)
    d = (blocks.max(axis=-1, keepdims=True) - lo) / F32(15)
    q = np.trunc((blocks - lo) * _inverse(d) + F32(0.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([f16_bytes(d), f16_bytes(lo), _pack_q4(q)], axis=-1)


def q4_1_dequantize(blocks: np.ndarray) -> np.ndarray:
    return (f16_field(blocks, 0) * nibbles(blocks[:, 4:]).astype(F32)) + f16_field(blocks, 2)


def q4_1_planes(blocks: np.ndarray) -> Planes:
    return Planes(
        q=nibbles(blocks[:, 4:]).astype(np.int8),
        gscale=f16_field(blocks, 0),
        offset=f16_field(blocks, 2),
    )


# ---------------------------------------------------------------- Q5_0
def q5_0_quantize(blocks: np.ndarray) -> np.ndarray:
    d = _absmax_signed(blocks) / F32(-16)
    q = np.trunc(blocks * _inverse(d) + F32(16.5)).astype(np.uint8).clip(0, 31)
    return np.concatenate([f16_bytes(d), _fifth_bits(q), _pack_q4(q)], axis=-1)


def q5_0_dequantize(blocks: np.ndarray) -> np.ndarray:
    q = q5_values(blocks[:, 2:6], blocks[:, 6:]).astype(np.int8) - np.int8(16)
    return f16_field(blocks, 0) * q.astype(F32)


def q5_0_planes(blocks: np.ndarray) -> Planes:
    q = q5_values(blocks[:, 2:6], blocks[:, 6:]).astype(np.int8) - np.int8(16)
    return Planes(q=q, gscale=f16_field(blocks, 0))


# ---------------------------------------------------------------- Q5_1
def q5_1_quantize(blocks: np.ndarray) -> np.ndarray:
    lo = blocks.min(axis=-1, keepdims=True)
    d = (blocks.max(axis=-1, keepdims=True) - lo) / F32(31)
    q = np.trunc((blocks - lo) * _inverse(d) + F32(0.5)).astype(np.uint8).clip(0, 31)
    return np.concatenate([f16_bytes(d), f16_bytes(lo), _fifth_bits(q), _pack_q4(q)], axis=-1)


def q5_1_dequantize(blocks: np.ndarray) -> np.ndarray:
    q = q5_values(blocks[:, 4:8], blocks[:, 8:]).astype(F32)
    return (f16_field(blocks, 0) * q) + f16_field(blocks, 2)


def q5_1_planes(blocks: np.ndarray) -> Planes:
    return Planes(
        q=q5_values(blocks[:, 4:8], blocks[:, 8:]).astype(np.int8),
        gscale=f16_field(blocks, 0),
        offset=f16_field(blocks, 2),
    )


# ---------------------------------------------------------------- Q8_0
def _q8_values(blocks: np.ndarray, rounding=round_away) -> tuple[np.ndarray, np.ndarray]:
    """Shared Q8_0/Q8_1 rounding: d = amax / 127 and q = round(x / d).

    Weights round half away from zero (``quantize_row_q8_0_ref``, the ``gguf``
    package); activations ``rounding=np.rint``, half to even (see
    :func:`q8_0_quantize_activations`).
    """
    d = np.abs(blocks).max(axis=-1, keepdims=True) / F32(127)
    q = rounding(blocks * _inverse(d)).astype(np.int8)
    return d, q


def q8_0_quantize(blocks: np.ndarray) -> np.ndarray:
    d, q = _q8_values(blocks)
    return np.concatenate([f16_bytes(d), q.view(np.uint8)], axis=-1)


def q8_0_quantize_activations(blocks: np.ndarray) -> np.ndarray:
    """Activation rows to Q8_0 as ggml's x86 ``quantize_row_q8_0`` does before a
    product: ties of ``x / d`` round half to even (``_mm256_cvtps_epi32``), the one
    rule of every tallow path (C builds, numba, NumPy)."""
    d, q = _q8_values(blocks, np.rint)
    return np.concatenate([f16_bytes(d), q.view(np.uint8)], axis=-1)


def q8_0_dequantize(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, 2:]).view(np.int8).astype(F32) * f16_field(blocks, 0)


def q8_0_planes(blocks: np.ndarray) -> Planes:
    return Planes(q=np.ascontiguousarray(blocks[:, 2:]).view(np.int8), gscale=f16_field(blocks, 0))


def q8_0_act_planes(blocks: np.ndarray) -> ActPlanes:
    p = q8_0_planes(blocks)
    return ActPlanes(q=p.q, gscale=p.gscale)


# ---------------------------------------------------------------- Q8_1
def q8_1_quantize(blocks: np.ndarray, rounding=round_away) -> np.ndarray:
    d, q = _q8_values(blocks, rounding)
    total = q.astype(np.int32).sum(axis=-1, keepdims=True).astype(F32)
    # ggml: GGML_FP32_TO_FP16(sum * d), the f32 product of the integer sum and
    # the f32 scale (before the scale's own rounding to f16), rounded once.
    s = total * d
    return np.concatenate([f16_bytes(d), f16_bytes(s), q.view(np.uint8)], axis=-1)


def q8_1_quantize_activations(blocks: np.ndarray) -> np.ndarray:
    """Q8_1 activations: Q8_0's rounding rule (half to even), as ggml's x86 ``quantize_row_q8_1``."""
    return q8_1_quantize(blocks, np.rint)


def q8_1_dequantize(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, 4:]).view(np.int8).astype(F32) * f16_field(blocks, 0)


def q8_1_planes(blocks: np.ndarray) -> Planes:
    # Q8_1 x Q8_1 (candle's vec_dot) uses d and q only; s is for Q4_1/Q5_1.
    return Planes(q=np.ascontiguousarray(blocks[:, 4:]).view(np.int8), gscale=f16_field(blocks, 0))


def q8_1_act_planes(blocks: np.ndarray) -> ActPlanes:
    p = q8_1_planes(blocks)
    return ActPlanes(q=p.q, gscale=p.gscale, s=f16_field(blocks, 2))
