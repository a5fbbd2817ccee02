"""What a dispatch passes to a kernel: layouts as shape/stride words (dim merging,
the element-wise word map, the range of elements a chunk touches), scalars as
u32 words, and the workgroup grid within the adapter's per-dimension limit.
(The split of element-wise work over binding windows is in launch.py.)

Kernels read layouts of up to ``MAX_RANK`` dims; dims of size 1 are dropped and
neighbouring dims that are contiguous for every operand are merged first, so a
strided view of any rank usually becomes rank 1 to 3.
"""

from __future__ import annotations

import struct

import numpy as np

from ... import dtype as dt

MAX_RANK = 8
WG = 256
_f32 = struct.Struct("<f")
_u32 = struct.Struct("<I")
_d = struct.Struct("<d")
_q = struct.Struct("<Q")
_merge_cache: dict = {}


def merge_dims(shape: tuple, strides: tuple) -> tuple:
    """(shape, per-operand strides) with size-1 dims dropped and mergeable dims merged."""
    key = (shape, strides)
    hit = _merge_cache.get(key)
    if hit is not None:
        return hit
    k = len(strides)
    out_shape: list = []
    out_strides = [[] for _ in range(k)]
    for i, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(out_strides[j][-1] == strides[j][i] * n for j in range(k)):
            out_shape[-1] *= n
            for j in range(k):
                out_strides[j][-1] = strides[j][i]
        else:
            out_shape.append(n)
            for j in range(k):
                out_strides[j].append(strides[j][i])
    res = (tuple(out_shape), tuple(tuple(s) for s in out_strides))
    if len(_merge_cache) > 4096:
        _merge_cache.clear()
    _merge_cache[key] = res
    return res


def max_groups(state) -> int:
    """Workgroups one dispatch may have per dimension: the adapter's limit
    (``max-compute-workgroups-per-dimension``, 65535 on most)."""
    return state.max_groups


def split_groups(groups: int, limit: int) -> tuple:
    """``(gx, gy)``: at least ``groups`` workgroups, neither dimension over ``limit``
    (kernels number their workgroups row-major over x and y and skip the excess)."""
    if groups <= limit:
        return groups, 1
    gy = (groups + limit - 1) // limit
    return (groups + gy - 1) // gy, gy


def grid(state, threads: int) -> tuple:
    """The grid of ``threads`` invocations in workgroups of ``WG``."""
    return split_groups((threads + WG - 1) // WG, max_groups(state))


def rows_grid(state, rows: int) -> tuple:
    """The grid of one workgroup per row."""
    return split_groups(rows, max_groups(state))


# -- scalars ------------------------------------------------------------------------------

def f32_bits(x: float) -> int:
    return _u32.unpack(_f32.pack(float(np.float32(x))))[0]


def scalar_words(dtype, value, round_to_dtype: bool = True) -> tuple:
    """The two parameter words of a scalar for a kernel computing in ``dtype``'s
    compute type (f16/bf16 compute in f32; ``round_to_dtype`` first rounds the
    value to the half type, as NumPy does with a scalar of that dtype)."""
    if dtype.is_float:
        if dtype is dt.f64:
            q = _q.unpack(_d.pack(float(value)))[0]
            return q & 0xFFFFFFFF, q >> 32
        if round_to_dtype and dtype is not dt.f32:
            value = float(dtype.np.type(value))
        return f32_bits(value), 0
    v = int(value) & 0xFFFFFFFFFFFFFFFF
    return v & 0xFFFFFFFF, v >> 32


def pad_scalars(words: tuple) -> tuple:
    return tuple(words) + (0,) * (8 - len(words))


ZERO_SCALARS = (0,) * 8


# -- the element-wise word map ----------------------------------------------------------

def map_tail(layouts) -> tuple:
    """(rank, contiguous bits, words from 16 on) for operands sharing one shape.
    Rank is None when it exceeds MAX_RANK after merging."""
    bits = 0
    for k, lay in enumerate(layouts):
        if lay.contiguous:
            bits |= 1 << k
    if bits == (1 << len(layouts)) - 1:
        return 0, bits, ()
    shape, strides = merge_dims(layouts[0].shape, tuple(l.stride for l in layouts))
    r = len(shape)
    if r > MAX_RANK:
        return None, bits, ()
    pad = (0,) * (MAX_RANK - r)
    words = shape + pad
    for s in strides:
        words += s + pad
    return r, bits, words


def touched(layout, g0: int, g1: int) -> tuple:
    """(lo, hi): storage elements [lo, hi) covering what elements g0..g1-1 (row-major
    over the layout's shape) read; conservative, exact for contiguous layouts."""
    off = layout.start_offset
    if layout.contiguous:
        return off + g0, off + g1
    shape, (stride,) = merge_dims(layout.shape, (layout.stride,))
    c0 = _coords(g0, shape)
    c1 = _coords(g1 - 1, shape)
    base = off
    for d in range(len(shape)):
        if c0[d] != c1[d]:
            lo = base + c0[d] * stride[d]
            hi = base + c1[d] * stride[d]
            for e in range(d + 1, len(shape)):
                hi += (shape[e] - 1) * stride[e]
            return lo, hi + 1
        base += c0[d] * stride[d]
    return base, base + 1


def _coords(g: int, shape: tuple) -> list:
    c = [0] * len(shape)
    for d in range(len(shape) - 1, -1, -1):
        c[d] = g % shape[d]
        g //= shape[d]
    return c
