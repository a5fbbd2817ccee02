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
(``vec_dot_type``).  tallow reads and multiplies these formats but has no
quantizer for them.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedDTypeError
from .blocks import F32, f16_field
from .planes import Planes

# kvalues_iq4nl
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
QK_K = 256


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16 m) bytes -> (n, 32 m) 4-bit indices: per 16 bytes, low nibbles then high ones."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(n, -1)


def unsupported_quantize(name: str):
    def quantize(blocks: np.ndarray) -> np.ndarray:
        raise UnsupportedDTypeError(f"tallow reads and multiplies {name} blocks but cannot quantize to {name}")
    return quantize


# ---------------------------------------------------------------- IQ4_NL
def iq4_nl_levels(blocks: np.ndarray) -> np.ndarray:
    """(n, 18) blocks -> (n, 32) int8 levels K[q]."""
    return KVALUES[_nibbles(blocks[:, 2:18])]


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


def iq4_xs_levels(blocks: np.ndarray) -> np.ndarray:
    """(n, 136) blocks -> (n, 256) int8 levels K[q] (unscaled)."""
    return KVALUES[_nibbles(blocks[:, 8:136])]


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
