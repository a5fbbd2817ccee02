"""The 4-bit non-linear formats llama.cpp writes: IQ4_NL and IQ4_XS.

Both map each 4-bit index to one of sixteen fixed int8 levels (ggml's
``kvalues_iq4nl``, denser near zero than a uniform grid) times a scale.
Block layouts (ggml-common.h):

    IQ4_NL  d:f16  qs[16]                                  32 values:  x = d * K[q]
    IQ4_XS  d:f16  scales_h:u16  scales_l[4]  qs[128]      256 values in 8 sub-blocks of 32:
            x = d * (ls - 32) * K[q],  ls = 4 bits of scales_l | 2 bits of scales_h

``qs[j]`` of a 32-value (sub-)block holds element ``j`` in its low nibble
and element ``j + 16`` in its high nibble, as Q4_0 does.  Sub-block ``ib``
of IQ4_XS takes the low (even ``ib``) or high (odd) nibble of
``scales_l[ib // 2]`` and bits ``2 ib, 2 ib + 1`` of ``scales_h``.

Dequantization multiplies in the ``gguf`` package's order, so the floats are
its floats bit for bit.  In products, IQ4_NL activations are quantized to
Q8_0 and IQ4_XS activations to Q8K, as ggml's CPU backend does
(``vec_dot_type``).  The quantizers are ggml's ``quantize_iq4_nl`` and
``quantize_iq4_xs`` without an importance matrix (what llama.cpp's quantizer
writes): per 32 values, the x**2-weighted least-squares scale of the nearest
levels for 15 candidate scales ``(itry - 127) / max``, ``itry`` in -7..7;
IQ4_XS then rounds each sub-block scale to 6 bits of ``d = -max_scale / 32``
and picks the levels again.  Sums run in ggml's order over the sub-blocks
laid out as columns (see :mod:`ksearch`).
"""

from __future__ import annotations

import numpy as np

from .blocks import F32, f16_bytes, f16_field, first_absmax
from .ksearch import GROUP_MAX_EPS, clamp, column_sums, nearest_int
from .planes import Planes

# kvalues_iq4nl
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
QK_K = 256


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16 m) bytes -> (n, 32 m) 4-bit indices: per 16 bytes, low nibbles then high ones."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(n, -1)


def _pack(levels: np.ndarray) -> np.ndarray:
    """(n, 32 m) indices -> (n, 16 m) bytes: per 32 values, j low and j + 16 high."""
    n = levels.shape[0]
    lv = levels.reshape(n, -1, 2, 16).astype(np.uint8)
    return (lv[:, :, 0] | (lv[:, :, 1] << 4)).reshape(n, -1)


# Midpoints between neighbouring levels, doubled (exact small integers).
_MIDS2 = (KVALUES[:-1].astype(np.int32) + KVALUES[1:].astype(np.int32)).astype(F32)


def best_index(x: np.ndarray) -> np.ndarray:
    """ggml's ``best_index_int8``: the index of the level nearest ``x`` (ties to the upper one)."""
    x2 = np.asarray(x, dtype=F32) * F32(2)  # exact
    out = np.zeros(x2.shape, dtype=np.int32)
    for m in _MIDS2:
        out += x2 >= m
    return out


def _sub_block_scales(x: np.ndarray, ntry: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of 32 values (``(N, 32)``): ggml's scale search; returns ``(scale (N,), levels (N, 32))``."""
    mx = first_absmax(x)
    zero = np.abs(mx) < GROUP_MAX_EPS
    xt = np.ascontiguousarray(x.T)  # (32, N): one sub-block per column
    w = xt * xt
    k0 = F32(KVALUES[0])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (-mx / k0 if ntry > 0 else mx / k0).astype(F32)
        inv = (F32(1) / d).astype(F32)

        def fit(inv):
            lv = best_index(inv * xt)
            q = KVALUES[lv].astype(F32)
            wq = w * q
            return lv, column_sums(wq * xt), column_sums(wq * q)

        levels, sumqx, sumq2 = fit(inv)
        d = np.where(sumq2 > 0, sumqx / sumq2, F32(0)).astype(F32)
        best = (d * sumqx).astype(F32)
        for itry in range(-ntry, ntry + 1):
            inv = (F32(itry + int(KVALUES[0])) / mx).astype(F32)
            _, sumqx, sumq2 = fit(inv)
            take = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
            d = np.where(take, sumqx / sumq2, d).astype(F32)
            best = np.where(take, d * sumqx, best).astype(F32)
    d = np.where(zero, F32(0), d).astype(F32)
    levels = np.where(zero, 0, levels)
    return d, np.ascontiguousarray(levels.T)


def _levels_for(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """ggml's final pass: the nearest level of ``x / scale`` (``scale`` 0: of 0)."""
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, F32(1) / scale, F32(0)).astype(F32)
    return best_index(inv[..., None] * x)


# ---------------------------------------------------------------- IQ4_NL
def iq4_nl_levels(blocks: np.ndarray) -> np.ndarray:
    """(n, 18) blocks -> (n, 32) int8 levels K[q]."""
    return KVALUES[_nibbles(blocks[:, 2:18])]


def iq4_nl_quantize(blocks: np.ndarray) -> np.ndarray:
    """(n, 32) floats -> (n, 18) IQ4_NL blocks (ggml's ``quantize_iq4_nl``, no importance matrix)."""
    scale, _ = _sub_block_scales(blocks, 7)
    levels = _levels_for(blocks, scale)
    return np.concatenate([f16_bytes(scale[:, None]), _pack(levels)], axis=-1)


def iq4_nl_dequantize(blocks: np.ndarray) -> np.ndarray:
    return f16_field(blocks, 0) * iq4_nl_levels(blocks).astype(F32)


def iq4_nl_planes(blocks: np.ndarray) -> Planes:
    return Planes(q=iq4_nl_levels(blocks), gscale=f16_field(blocks, 0))


# ---------------------------------------------------------------- IQ4_XS
def iq4_xs_scales(blocks: np.ndarray) -> np.ndarray:
    """(n, 136) blocks -> (n, 8) signed sub-block scales ``ls - 32`` (-32..31) as int8."""
    n = blocks.shape[0]
    high = np.ascontiguousarray(blocks[:, 2:4]).view(np.uint16)  # (n, 1)
    low = blocks[:, 4:8].reshape(n, 4, 1) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2)
    low = low.reshape(n, 8) & 0x0F
    high = (high >> (2 * np.arange(8, dtype=np.uint16))) & 3
    return (low | (high.astype(np.uint8) << 4)).astype(np.int8) - np.int8(32)


def iq4_xs_indices(blocks: np.ndarray) -> np.ndarray:
    """(n, 136) blocks -> (n, 256) level indices q (0..15)."""
    return _nibbles(blocks[:, 8:136])


def iq4_xs_levels(blocks: np.ndarray) -> np.ndarray:
    """(n, 136) blocks -> (n, 256) int8 levels K[q] (unscaled)."""
    return KVALUES[iq4_xs_indices(blocks)]


def iq4_xs_quantize(blocks: np.ndarray) -> np.ndarray:
    """(n, 256) floats -> (n, 136) IQ4_XS blocks (ggml's ``quantize_iq4_xs``, no importance matrix)."""
    n = blocks.shape[0]
    scales, _ = _sub_block_scales(blocks.reshape(n * 8, 32), 7)
    scales = scales.reshape(n, 8)
    max_scale = first_absmax(scales)
    d = (-max_scale / F32(32)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
        ls = clamp(nearest_int(inv[:, None] * scales), -32, 31)
        dl = (d[:, None] * ls.astype(F32)).astype(F32)  # the f32 d, not its f16 rounding
    levels = _levels_for(blocks.reshape(n, 8, 32), dl).reshape(n, 256)
    lu = (ls + 32).astype(np.uint16)
    scales_l = ((lu[:, 0::2] & 15) | ((lu[:, 1::2] & 15) << 4)).astype(np.uint8)
    scales_h = np.bitwise_or.reduce((lu >> 4) << (2 * np.arange(8, dtype=np.uint16)), axis=1).astype(np.uint16)
    return np.concatenate([f16_bytes(d[:, None]), scales_h[:, None].view(np.uint8), scales_l, _pack(levels)],
                          axis=-1)


def iq4_xs_dequantize(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    dl = (f16_field(blocks, 0) * iq4_xs_scales(blocks).astype(F32)).reshape(n, 8, 1)
    return (dl * iq4_xs_levels(blocks).reshape(n, 8, 32).astype(F32)).reshape(n, QK_K)


def iq4_xs_planes(blocks: np.ndarray) -> Planes:
    # The sub-block scale is folded into the integers (|K * ls| <= 127 * 32), so a
    # group's sum with int8 activations stays below 2**24 and is exact in f32.
    n = blocks.shape[0]
    q = iq4_xs_levels(blocks).reshape(n, 8, 32).astype(np.int16) * iq4_xs_scales(blocks).astype(np.int16)[:, :, None]
    return Planes(q=q.reshape(n, QK_K), gscale=np.repeat(f16_field(blocks, 0), 8, axis=1))
