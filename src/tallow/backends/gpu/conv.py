"""Convolutions (im2col + the batched GEMM), transposed convolutions (a direct
kernel), pooling, and nearest upsampling (two index_selects with index tables
computed exactly as on the CPU). A 1-D op is the 2-D op with a height of 1,
expressed as a layout (no copy)."""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from ...layout import Layout
from .kernels import family
from .launch import map_new


_MAP = ("map.wgsl",)
IM2COL = family("im2col", [("a", "in", 0), ("y", "out", 0)], file="conv.wgsl",
                flags=("IM2COL",), includes=_MAP)
CONVT = family("convt", [("a", "in", 0), ("b", "in", 0), ("y", "out", 0)], file="conv.wgsl",
               flags=("CONVT",), includes=_MAP)
POOL = family("pool", [("a", "in", 0), ("y", "out", 0)], file="conv.wgsl", math=True,
              includes=_MAP)


def _float(s, op):
    if not s.dtype.is_float:
        st = s.bdev
        raise UnsupportedDTypeError(
            f"{op}: not supported for dtype {s.dtype} on gpu:{st.ordinal} ({st.adapter_name})")


def _as_2d(layout):
    """A (b, c, l) layout viewed as (b, c, 1, l)."""
    b, c, n = layout.shape
    sb, sc, sl = layout.stride
    return Layout((b, c, 1, n), (sb, sc, 0, sl), layout.start_offset)


def _conv2d(s, layout, k, klayout, pad, stride, dil, groups):
    state = s.bdev
    b, c, h, w = layout.shape
    co, cg, kh, kw = klayout.shape
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    L, K = oh * ow, cg * kh * kw
    n = b * groups * L * K
    pipe = state.kernels.ref(IM2COL, (s.dtype.name,))
    words = (0,) * 8 + (groups, oh, ow, cg, kh, kw, h, w, stride[0], stride[1], pad[0], pad[1],
                        dil[0], dil[1]) + tuple(layout.stride) + (layout.start_offset,)
    cols = s._wrap(map_new(state, pipe, ((s, layout),), s.dtype, n, words, raw=True), s.dtype, n)
    if not klayout.contiguous:
        k = k.copy_strided(klayout)
        klayout = Layout.contiguous_of(klayout.shape)
    cog = co // groups
    koff = klayout.start_offset
    # cols (b, g, L, K) @ kernel viewed as (b, g, K, cog)
    lhs = Layout((b, groups, L, K), (groups * L * K, L * K, K, 1), 0)
    rhs = Layout((b, groups, K, cog), (0, cog * K, 1, K), koff)
    res = cols.matmul(lhs, k, rhs)  # (b, g, L, cog) contiguous
    # -> (b, g, cog, L) = (b, co, oh, ow)
    view = Layout((b, groups, cog, L), (groups * L * cog, L * cog, 1, cog), 0)
    return res.copy_strided(view)


def _convt2d(s, layout, k, klayout, pad, out_pad, stride, dil, groups):
    state = s.bdev
    b, ci, h, w = layout.shape
    _, cog, kh, kw = klayout.shape
    co = cog * groups
    oh = (h - 1) * stride[0] - 2 * pad[0] + dil[0] * (kh - 1) + out_pad[0] + 1
    ow = (w - 1) * stride[1] - 2 * pad[1] + dil[1] * (kw - 1) + out_pad[1] + 1
    n = b * co * oh * ow
    pipe = state.kernels.ref(CONVT, (s.dtype.name,))
    words = (0,) * 8 + (co, oh, ow, cog, ci // groups, kh, kw, h, w, stride[0], stride[1],
                        pad[0], pad[1], dil[0], dil[1]) + tuple(layout.stride) \
        + (layout.start_offset,) + tuple(klayout.stride) + (klayout.start_offset,)
    buf = map_new(state, pipe, ((s, layout), (k, klayout)), s.dtype, n, words, raw=True)
    return s._wrap(buf, s.dtype, n)


def _pool(s, layout, kernel, stride, op):
    state = s.bdev
    b, c, h, w = layout.shape
    oh = (h - kernel[0]) // stride[0] + 1
    ow = (w - kernel[1]) // stride[1] + 1
    n = b * c * oh * ow
    pipe = state.kernels.ref(POOL, (s.dtype.name,), "main", (("OP", op),))
    words = (0,) * 8 + (c, oh, ow, kernel[0], kernel[1], stride[0], stride[1]) \
        + tuple(layout.stride) + (layout.start_offset,)
    return s._wrap(map_new(state, pipe, ((s, layout),), s.dtype, n, words, raw=True), s.dtype, n)


def _nearest_ids(state, src: int, dst: int):
    """The CPU backend's nearest-neighbour table, uploaded once per (src, dst)."""
    cache = state.__dict__.setdefault("_nearest_tables", {})
    key = (src, dst)
    hit = cache.get(key)
    if hit is None:
        scale = src / dst
        tab = np.minimum((np.arange(dst) * scale).astype(np.intp), src - 1).astype(np.uint32)
        hit = cache[key] = state.from_numpy(tab, dt.u32)
    return hit


class GpuConv:
    """Convolutions, pooling and upsampling of ``GpuStorage``."""

    __slots__ = ()

    def conv2d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        _float(self, "conv2d")
        return _conv2d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups)

    def conv1d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        _float(self, "conv1d")
        return _conv2d(self, _as_2d(layout), kernel, _as_2d(kernel_layout), (0, padding), (1, stride),
                       (1, dilation), groups)

    def conv_transpose2d(self, layout, kernel, kernel_layout, padding, output_padding, stride,
                         dilation, groups):
        _float(self, "conv_transpose2d")
        return _convt2d(self, layout, kernel, kernel_layout, padding, output_padding, stride, dilation, groups)

    def conv_transpose1d(self, layout, kernel, kernel_layout, padding, output_padding, stride,
                         dilation, groups):
        _float(self, "conv_transpose1d")
        return _convt2d(self, _as_2d(layout), kernel, _as_2d(kernel_layout), (0, padding),
                        (0, output_padding), (1, stride), (1, dilation), groups)

    def avg_pool2d(self, layout, kernel, stride):
        _float(self, "avg_pool2d")
        return _pool(self, layout, kernel, stride, 0)

    def max_pool2d(self, layout, kernel, stride):
        return _pool(self, layout, kernel, stride, 1)

    def upsample_nearest1d(self, layout, size):
        ids = _nearest_ids(self.bdev, layout.shape[-1], size)
        return self.index_select(layout, ids, Layout.contiguous_of((size,)), 2)

    def upsample_nearest2d(self, layout, h, w):
        ids_h = _nearest_ids(self.bdev, layout.shape[-2], h)
        tmp = self.index_select(layout, ids_h, Layout.contiguous_of((h,)), 2)
        b, c = layout.shape[:2]
        ids_w = _nearest_ids(self.bdev, layout.shape[-1], w)
        return tmp.index_select(Layout.contiguous_of((b, c, h, layout.shape[-1])), ids_w,
                                Layout.contiguous_of((w,)), 3)
