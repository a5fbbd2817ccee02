"""The 256-element super-block formats: Q2K, Q3K, Q4K, Q5K, Q6K, Q8K.

Block layouts (ggml-common.h, QK_K = 256):

    Q2K  scales[16] qs[64] d:f16 dmin:f16      16 sub-blocks of 16: 4-bit scale | 4-bit min
    Q3K  hmask[32] qs[64] scales[12] d:f16     16 sub-blocks of 16: 6-bit signed scales
    Q4K  d dmin scales[12] qs[128]             8 sub-blocks of 32: 6-bit scale and min
    Q5K  d dmin scales[12] qh[32] qs[128]      as Q4K with a fifth bit per value
    Q6K  ql[128] qh[64] scales:i8[16] d:f16    16 sub-blocks of 16: 8-bit signed scales
    Q8K  d:f32 qs:i8[256] bsums:i16[16]        the activation type of the others

Dequantizers multiply in the ``gguf`` package's order (its results are the
oracle).  Quantizers produce ggml's bytes: they follow
``quantize_row_q{2..6}_K_ref`` (``ggml-quants.c``, what llama.cpp's
quantizer runs without an importance matrix), which use
``make_qkx2_quants`` for Q2K/Q4K/Q5K, ``make_q3_quants`` for Q3K and
``make_qx_quants`` for Q6K, with ggml's ``nearest_int`` (round half to
even); the searches live in :mod:`ksearch`.  Q8K is ``quantize_row_q8_K_ref``.
"""

from __future__ import annotations

import numpy as np

from .blocks import F32, f16_bytes, f16_field, f16_round, first_absmax
from .ksearch import GROUP_MAX_EPS, clamp, column_sums, make_q3_quants, make_qkx2_quants, make_qx_quants
from .ksearch import nearest_int as ggml_nearest_int
from .planes import ActPlanes, Planes

QK_K = 256
_SHIFT2 = np.array([0, 2, 4, 6], dtype=np.uint8)


def _u8(values: np.ndarray) -> np.ndarray:
    """Rust ``i32 as u8``: keep the low byte."""
    return (np.asarray(values, dtype=np.int64) & 0xFF).astype(np.uint8)


def _best_positive(values: np.ndarray) -> np.ndarray:
    """candle's ``fold(0.0, |m, &v| v.max(m))``: the largest value, at least 0, NaN ignored."""
    return np.fmax.reduce(np.fmax(values, F32(0)), axis=-1).astype(F32)


def _pack_2bit(levels: np.ndarray) -> np.ndarray:
    """256 values 0..3 -> 64 bytes: byte c*32+l holds elements c*128 + 32*s + l at bits 2s."""
    n = levels.shape[0]
    q = levels.reshape(n, 2, 4, 32).astype(np.uint8) << _SHIFT2[None, None, :, None]
    return (q[:, :, 0] | q[:, :, 1] | q[:, :, 2] | q[:, :, 3]).reshape(n, 64)


def unpack_2bit(qs: np.ndarray) -> np.ndarray:
    n = qs.shape[0]
    return ((qs.reshape(n, 2, 1, 32) >> _SHIFT2[None, None, :, None]) & 3).reshape(n, QK_K)


def unpack_4bit_32(qs: np.ndarray) -> np.ndarray:
    """128 bytes -> 8 sub-blocks of 32: sub-block 2c is the low nibbles of bytes 32c.., 2c+1 the high."""
    n = qs.shape[0]
    return np.stack([qs.reshape(n, 4, 32) & 0x0F, qs.reshape(n, 4, 32) >> 4], axis=2).reshape(n, 8, 32)


def pack_4bit_32(levels: np.ndarray) -> np.ndarray:
    n = levels.shape[0]
    q = levels.reshape(n, 4, 2, 32).astype(np.uint8)
    return ((q[:, :, 0] & 0x0F) | (q[:, :, 1] << 4)).reshape(n, 128)


# ------------------------------------------------------------- scale packing
def k4_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4K/Q5K: 12 bytes -> eight 6-bit scales and eight 6-bit mins (get_scale_min_k4)."""
    d, m, md = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k4_pack_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    lo, hi = slice(0, 4), slice(4, 8)
    return np.concatenate(
        [
            ls[:, lo] | ((ls[:, hi] >> 4) << 6),
            lm[:, lo] | ((lm[:, hi] >> 4) << 6),
            (ls[:, hi] & 0x0F) | ((lm[:, hi] & 0x0F) << 4),
        ],
        axis=-1,
    ).astype(np.uint8)


def q3_scales(scales: np.ndarray) -> np.ndarray:
    """Q3K: 12 bytes -> sixteen signed 6-bit scales (-32..31) as int8."""
    n = scales.shape[0]
    low = np.concatenate([scales[:, :8] & 0x0F, scales[:, :8] >> 4], axis=-1)
    high = ((scales[:, 8:12].reshape(n, 1, 4) >> _SHIFT2[None, :, None]) & 3).reshape(n, 16)
    return (low | (high << 4)).astype(np.int8) - np.int8(32)


def _q3_pack_scales(levels: np.ndarray) -> np.ndarray:
    """Inverse of :func:`q3_scales` for levels 0..63 (scale + 32)."""
    n = levels.shape[0]
    lv = levels.astype(np.uint8)
    low = (lv[:, :8] & 0x0F) | ((lv[:, 8:] & 0x0F) << 4)
    high = (lv >> 4).reshape(n, 4, 4) << _SHIFT2[None, :, None]
    high = high[:, 0] | high[:, 1] | high[:, 2] | high[:, 3]
    return np.concatenate([low, high], axis=-1)


# ------------------------------------------------------------------- Q2K
def q2k_dequantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales, qs = blocks[:, :16], blocks[:, 16:80]
    d, dmin = f16_field(blocks, 80), f16_field(blocks, 82)
    dl = (d * (scales & 0x0F).astype(F32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).astype(F32)).reshape(n, 16, 1)
    q = unpack_2bit(qs).reshape(n, 16, 16).astype(F32)
    return (dl * q - ml).reshape(n, QK_K)


def q2k_planes(blocks: np.ndarray) -> Planes:
    n = blocks.shape[0]
    scales = blocks[:, :16]
    q = unpack_2bit(blocks[:, 16:80]).reshape(n, 16, 16) * (scales & 0x0F)[:, :, None]
    return Planes(
        q=q.reshape(n, QK_K).astype(np.int8),
        gscale=np.repeat(f16_field(blocks, 80), 8, axis=1),
        mins=(scales >> 4).astype(np.int8),
        mscale=-f16_field(blocks, 82)[:, 0],
    )


def q2k_quantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sub = blocks.reshape(n * 16, 16)
    sc, mn, search = make_qkx2_quants(sub, np.abs(sub), 3, -0.5, 0.1, 15, use_mad=True)
    sc, mn = sc.reshape(n, 16), mn.reshape(n, 16)
    max_scale, max_min = _best_positive(sc), _best_positive(mn)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = np.where(max_scale > 0, F32(15) / max_scale, F32(0)).astype(F32)
        imin = np.where(max_min > 0, F32(15) / max_min, F32(0)).astype(F32)
        ls = np.where(max_scale[:, None] > 0, _u8(ggml_nearest_int(iscale[:, None] * sc)), np.uint8(0))
        lm = np.where(max_min[:, None] > 0, _u8(ggml_nearest_int(imin[:, None] * mn) << 4), np.uint8(0))
    scales = (ls | lm).astype(np.uint8)
    d = f16_round(np.where(max_scale > 0, max_scale / F32(15), F32(0)))
    dmin = f16_round(np.where(max_min > 0, max_min / F32(15), F32(0)))
    dl = d[:, None] * (scales & 0x0F).astype(F32)
    ml = dmin[:, None] * (scales >> 4).astype(F32)
    x = blocks.reshape(n, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lv = clamp(ggml_nearest_int((x + ml[:, :, None]) / dl[:, :, None]), 0, 3)
    # A sub-block whose scale rounds to 0 keeps the search's levels, as in ggml.
    lv = np.where((dl != 0)[:, :, None], lv, search.reshape(n, 16, 16)).reshape(n, QK_K)
    return np.concatenate(
        [scales, _pack_2bit(lv), f16_bytes(d[:, None]), f16_bytes(dmin[:, None])], axis=-1
    )


# ------------------------------------------------------------------- Q3K
def q3_values(blocks: np.ndarray) -> np.ndarray:
    """Signed 3-bit values -4..3: two low bits from qs, minus 4 where the hmask bit is clear."""
    n = blocks.shape[0]
    low = unpack_2bit(blocks[:, 32:96]).astype(np.int8)
    high = np.unpackbits(blocks[:, :32].reshape(n, 1, 32), axis=1, bitorder="little").reshape(n, QK_K)
    return low - ((high ^ 1) << 2).astype(np.int8)


def q3k_dequantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = f16_field(blocks, 108)
    dl = (d * q3_scales(blocks[:, 96:108]).astype(F32)).reshape(n, 16, 1)
    return (dl * q3_values(blocks).reshape(n, 16, 16).astype(F32)).reshape(n, QK_K)


def q3k_planes(blocks: np.ndarray) -> Planes:
    n = blocks.shape[0]
    sc = q3_scales(blocks[:, 96:108]).astype(np.int16)
    q = q3_values(blocks).reshape(n, 16, 16).astype(np.int16) * sc[:, :, None]
    return Planes(q=q.reshape(n, QK_K), gscale=np.repeat(f16_field(blocks, 108), 8, axis=1))


def q3k_quantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales, search = make_q3_quants(blocks.reshape(n * 16, 16), 4)
    scales = scales.reshape(n, 16)
    max_scale = first_absmax(scales)
    nonzero = max_scale != 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = np.where(nonzero, F32(-32) / max_scale, F32(0)).astype(F32)
        # ggml stores nearest_int in an int8_t before clamping it
        levels = clamp(ggml_nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31) + 32
        d = f16_round(np.where(nonzero, F32(1) / iscale, F32(0)))
    packed = np.where(nonzero[:, None], _q3_pack_scales(levels), np.uint8(0)).astype(np.uint8)
    dl = d[:, None] * q3_scales(packed).astype(F32)
    x = blocks.reshape(n, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lv = clamp(ggml_nearest_int(x / dl[:, :, None]), -4, 3) + 4
    lv = np.where((dl != 0)[:, :, None], lv, search.reshape(n, 16, 16)).reshape(n, QK_K)
    high = lv > 3
    hmask = np.packbits(high.reshape(n, 8, 32), axis=1, bitorder="little").reshape(n, 32)
    lv = np.where(high, lv - 4, lv)
    return np.concatenate([hmask, _pack_2bit(lv), packed, f16_bytes(d[:, None])], axis=-1)


# ------------------------------------------------------------------- Q4K / Q5K
def k45_fields(blocks: np.ndarray):
    d, dmin = f16_field(blocks, 0), f16_field(blocks, 2)
    sc, mn = k4_scales(blocks[:, 4:16])
    return d, dmin, sc, mn


def _k45_dequantize(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, dmin, sc, mn = k45_fields(blocks)
    dl = (d * sc.astype(F32)).reshape(n, 8, 1)
    ml = (dmin * mn.astype(F32)).reshape(n, 8, 1)
    return (dl * q.astype(F32) - ml).reshape(n, QK_K)


def _k45_planes(blocks: np.ndarray, q: np.ndarray) -> Planes:
    n = blocks.shape[0]
    d, dmin, sc, mn = k45_fields(blocks)
    return Planes(
        q=q.reshape(n, QK_K).astype(np.int8),
        gscale=d * sc.astype(F32),
        mins=mn.astype(np.int8),
        mscale=-dmin[:, 0],
    )


def _k45_quantize(blocks: np.ndarray, nmax: int):
    """Scales and levels shared by Q4K (nmax 15) and Q5K (nmax 31)."""
    n = blocks.shape[0]
    sub = blocks.reshape(n * 8, 32)
    # ggml's weights: the sub-block's rms plus each value's magnitude.
    av_x = np.sqrt(column_sums((sub * sub).T.copy()) / F32(32)).astype(F32)
    weights = av_x[:, None] + np.abs(sub)
    if nmax == 15:
        sc, mn, search = make_qkx2_quants(sub, weights, 15, -1.0, 0.1, 20, use_mad=False)
    else:
        sc, mn, search = make_qkx2_quants(sub, weights, 31, -0.5, 0.1, 15, use_mad=False)
    sc, mn = sc.reshape(n, 8), mn.reshape(n, 8)
    max_scale, max_min = _best_positive(sc), _best_positive(mn)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
        # uint8_t ls = nearest_int(...); ls = MIN(63, ls): the low byte, then the cap
        ls = np.minimum(_u8(ggml_nearest_int(inv_scale[:, None] * sc)), 63).astype(np.uint8)
        lm = np.minimum(_u8(ggml_nearest_int(inv_min[:, None] * mn)), 63).astype(np.uint8)
    scales = _k4_pack_scales(ls, lm)
    d = f16_round(max_scale / F32(63))
    dmin = f16_round(max_min / F32(63))
    sq, mq = k4_scales(scales)
    dl = d[:, None] * sq.astype(F32)
    ml = dmin[:, None] * mq.astype(F32)
    x = blocks.reshape(n, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lv = clamp(ggml_nearest_int((x + ml[:, :, None]) / dl[:, :, None]), 0, nmax)
    lv = np.where((dl != 0)[:, :, None], lv, search.reshape(n, 8, 32))
    head = np.concatenate([f16_bytes(d[:, None]), f16_bytes(dmin[:, None]), scales], axis=-1)
    return head, lv


def q4k_dequantize(blocks: np.ndarray) -> np.ndarray:
    return _k45_dequantize(blocks, unpack_4bit_32(blocks[:, 16:144]))


def q4k_planes(blocks: np.ndarray) -> Planes:
    return _k45_planes(blocks, unpack_4bit_32(blocks[:, 16:144]))


def q4k_quantize(blocks: np.ndarray) -> np.ndarray:
    head, lv = _k45_quantize(blocks, 15)
    return np.concatenate([head, pack_4bit_32(lv)], axis=-1)


def q5k_values(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    high = np.unpackbits(blocks[:, 16:48].reshape(n, 1, 32), axis=1, bitorder="little")
    return unpack_4bit_32(blocks[:, 48:176]) | (high << 4)


def q5k_dequantize(blocks: np.ndarray) -> np.ndarray:
    return _k45_dequantize(blocks, q5k_values(blocks))


def q5k_planes(blocks: np.ndarray) -> Planes:
    return _k45_planes(blocks, q5k_values(blocks))


def q5k_quantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    head, lv = _k45_quantize(blocks, 31)
    qh = np.packbits((lv >> 4).astype(np.uint8), axis=1, bitorder="little").reshape(n, 32)
    return np.concatenate([head, qh, pack_4bit_32(lv & 0x0F)], axis=-1)


# ------------------------------------------------------------------- Q6K
def q6_values(blocks: np.ndarray) -> np.ndarray:
    """Signed 6-bit values -32..31, (n, 256)."""
    n = blocks.shape[0]
    ql = blocks[:, :128].reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8)[None, None, :, None]
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32) >> _SHIFT2[None, None, :, None]
    q = (ql & 0x0F).reshape(n, 2, 4, 32) | ((qh & 3) << 4)
    return q.reshape(n, QK_K).astype(np.int8) - np.int8(32)


def q6k_dequantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(F32)
    dl = (f16_field(blocks, 208) * scales).reshape(n, 16, 1)
    return (dl * q6_values(blocks).reshape(n, 16, 16).astype(F32)).reshape(n, QK_K)


def q6k_planes(blocks: np.ndarray) -> Planes:
    n = blocks.shape[0]
    sc = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.int16)
    q = q6_values(blocks).reshape(n, 16, 16).astype(np.int16) * sc[:, :, None]
    return Planes(q=q.reshape(n, QK_K), gscale=np.repeat(f16_field(blocks, 208), 8, axis=1))


def q6k_quantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales, search = make_qx_quants(blocks.reshape(n * 16, 16), 32)
    scales, search = scales.reshape(n, 16), search.reshape(n, 16, 16)
    max_scale = first_absmax(scales)
    empty = np.abs(max_scale) < GROUP_MAX_EPS  # ggml writes an all-zero block
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-128) / max_scale).astype(F32)
        d = f16_round(F32(1) / iscale)
        # int8_t scales[ib] = MIN(127, nearest_int(...)): the cap, then the low byte
        qscale = _u8(np.minimum(ggml_nearest_int(iscale[:, None] * scales), 127)).view(np.int8)
    d = np.where(empty, F32(0), d)
    qscale = np.where(empty[:, None], np.int8(0), qscale)
    dl = d[:, None] * qscale.astype(F32)
    x = blocks.reshape(n, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        fresh = clamp(ggml_nearest_int(x / dl[:, :, None]), -32, 31) + 32
    # A sub-block whose scale rounds to 0 keeps make_qx_quants' levels, as in ggml.
    lv = np.where((dl != 0)[:, :, None], fresh, search)
    lv = np.where(empty[:, None, None], 0, lv).reshape(n, 2, 4, 32).astype(np.uint8)
    ql = np.concatenate(
        [(lv[:, :, 0] & 0x0F) | ((lv[:, :, 2] & 0x0F) << 4), (lv[:, :, 1] & 0x0F) | ((lv[:, :, 3] & 0x0F) << 4)],
        axis=-1,
    ).reshape(n, 128)
    hi = (lv >> 4) << _SHIFT2[None, None, :, None]
    qh = (hi[:, :, 0] | hi[:, :, 1] | hi[:, :, 2] | hi[:, :, 3]).reshape(n, 64)
    return np.concatenate([ql, qh, qscale.view(np.uint8), f16_bytes(d[:, None])], axis=-1)


# ------------------------------------------------------------------- Q8K
def q8k_quantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    mx = first_absmax(blocks)
    zero = mx == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # ggml maps the largest magnitude to 127 (not 128) and rounds half to even.
        iscale = (F32(-127) / mx).astype(F32)
        q = np.minimum(ggml_nearest_int(iscale[:, None] * blocks), 127).astype(np.int8)
        d = np.where(zero, F32(0), F32(1) / iscale).astype(F32)
    q = np.where(zero[:, None], np.int8(0), q)
    bsums = q.reshape(n, 16, 16).astype(np.int16).sum(axis=-1, dtype=np.int16)
    return np.concatenate([d[:, None].view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)], axis=-1)


def q8k_fields(blocks: np.ndarray):
    d = np.ascontiguousarray(blocks[:, :4]).view(F32)
    q = np.ascontiguousarray(blocks[:, 4:260]).view(np.int8)
    bsums = np.ascontiguousarray(blocks[:, 260:292]).view(np.int16)
    return d, q, bsums


def q8k_dequantize(blocks: np.ndarray) -> np.ndarray:
    d, q, _ = q8k_fields(blocks)
    return d * q.astype(F32)


def q8k_planes(blocks: np.ndarray) -> Planes:
    d, q, _ = q8k_fields(blocks)
    return Planes(q=q, gscale=np.repeat(d, 8, axis=1))


def q8k_act_planes(blocks: np.ndarray) -> ActPlanes:
    d, q, bsums = q8k_fields(blocks)
    return ActPlanes(q=q, gscale=np.repeat(d, 8, axis=1), sums16=bsums)
