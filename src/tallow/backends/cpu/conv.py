"""Convolutions (im2col + one batched BLAS product), transposed convolutions
(one product + strided scatter-adds), pooling and nearest upsampling.

A 1-D op is the 2-D op with a height of 1. f16/bf16 compute in f32.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from .threads import CONFIG


_HALF = (dt.f16, dt.bf16)


def _operand(s, layout, op):
    if not s.dtype.is_float:
        raise UnsupportedDTypeError(f"{op}: not supported for dtype {s.dtype} on cpu")
    x = s.view(layout)
    return x.astype(np.float32) if s.dtype in _HALF else x


def _out(s, y, dtype):
    return s._wrap(y.astype(dtype.np, copy=False), dtype)


def _conv2d(x, k, pad, stride, dil, groups):
    b, c, _, _ = x.shape
    co, cg, kh, kw = k.shape
    if pad[0] or pad[1]:
        x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    else:
        x = np.ascontiguousarray(x)
    hp, wp = x.shape[2:]
    oh = (hp - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wp - dil[1] * (kw - 1) - 1) // stride[1] + 1
    sb, sc, sh, sw = x.strides
    win = as_strided(
        x, (b, groups, cg, oh, ow, kh, kw),
        (sb, sc * cg, sc, sh * stride[0], sw * stride[1], sh * dil[0], sw * dil[1]),
        writeable=False,
    )
    # cols[g, (b, oh, ow), (cg, kh, kw)] @ kernel[g, (cg, kh, kw), cog]
    cols = win.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, b * oh * ow, cg * kh * kw)
    cog = co // groups
    kern = k.reshape(groups, cog, cg * kh * kw).transpose(0, 2, 1)
    CONFIG.apply()
    res = np.matmul(cols, kern)  # (g, b*oh*ow, cog)
    res = res.reshape(groups, b, oh, ow, cog).transpose(1, 0, 4, 2, 3)
    return np.ascontiguousarray(res).reshape(b, co, oh, ow)


def _conv_transpose2d(x, k, pad, out_pad, stride, dil, groups):
    b, ci, h, w = x.shape
    _, cog, kh, kw = k.shape
    cig = ci // groups
    co = cog * groups
    full_h = (h - 1) * stride[0] + dil[0] * (kh - 1) + 1
    full_w = (w - 1) * stride[1] + dil[1] * (kw - 1) + 1
    oh = full_h - 2 * pad[0] + out_pad[0]
    ow = full_w - 2 * pad[1] + out_pad[1]
    # Every input pixel times the kernel: (g, b*h*w, cig) @ (g, cig, cog*kh*kw).
    xs = np.ascontiguousarray(x).reshape(b, groups, cig, h * w).transpose(1, 0, 3, 2)
    xs = xs.reshape(groups, b * h * w, cig)
    kern = k.reshape(groups, cig, cog * kh * kw)
    CONFIG.apply()
    cols = np.matmul(xs, kern).reshape(groups, b, h, w, cog, kh, kw)
    cols = cols.transpose(1, 0, 4, 5, 6, 2, 3).reshape(b, co, kh, kw, h, w)
    buf = np.zeros((b, co, full_h + out_pad[0], full_w + out_pad[1]), cols.dtype)
    hs = stride[0] * (h - 1) + 1
    ws = stride[1] * (w - 1) + 1
    for i in range(kh):
        for j in range(kw):
            r, c = i * dil[0], j * dil[1]
            buf[:, :, r:r + hs:stride[0], c:c + ws:stride[1]] += cols[:, :, i, j]
    return buf[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow]


def _windows(x, kernel, stride):
    b, c, h, w = x.shape
    oh = (h - kernel[0]) // stride[0] + 1
    ow = (w - kernel[1]) // stride[1] + 1
    sb, sc, sh, sw = x.strides
    return as_strided(
        x, (b, c, oh, ow, kernel[0], kernel[1]),
        (sb, sc, sh * stride[0], sw * stride[1], sh, sw), writeable=False,
    )


def _nearest(src: int, dst: int) -> np.ndarray:
    scale = src / dst
    return np.minimum((np.arange(dst) * scale).astype(np.intp), src - 1)


class CpuConv:
    """Convolutions, pooling and upsampling of ``CpuStorage``."""

    __slots__ = ()

    def conv2d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        x = _operand(self, layout, "conv2d")
        k = _operand(kernel, kernel_layout, "conv2d")
        return _out(self, _conv2d(x, k, padding, stride, dilation, groups), self.dtype)

    def conv1d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        x = _operand(self, layout, "conv1d")[:, :, None, :]
        k = _operand(kernel, kernel_layout, "conv1d")[:, :, None, :]
        y = _conv2d(x, k, (0, padding), (1, stride), (1, dilation), groups)
        return _out(self, y[:, :, 0, :], self.dtype)

    def conv_transpose2d(self, layout, kernel, kernel_layout, padding, output_padding, stride,
                         dilation, groups):
        x = _operand(self, layout, "conv_transpose2d")
        k = _operand(kernel, kernel_layout, "conv_transpose2d")
        y = _conv_transpose2d(x, k, padding, output_padding, stride, dilation, groups)
        return _out(self, y, self.dtype)

    def conv_transpose1d(self, layout, kernel, kernel_layout, padding, output_padding, stride,
                         dilation, groups):
        x = _operand(self, layout, "conv_transpose1d")[:, :, None, :]
        k = _operand(kernel, kernel_layout, "conv_transpose1d")[:, :, None, :]
        y = _conv_transpose2d(x, k, (0, padding), (0, output_padding), (1, stride),
                              (1, dilation), groups)
        return _out(self, y[:, :, 0, :], self.dtype)

    def avg_pool2d(self, layout, kernel, stride):
        x = _operand(self, layout, "avg_pool2d")
        return _out(self, _windows(x, kernel, stride).mean(axis=(4, 5)), self.dtype)

    def max_pool2d(self, layout, kernel, stride):
        x = self.view(layout)
        return self._wrap(np.ascontiguousarray(_windows(x, kernel, stride).max(axis=(4, 5))), self.dtype)

    def upsample_nearest1d(self, layout, size):
        x = self.view(layout)
        return self._wrap(np.take(x, _nearest(x.shape[-1], size), axis=-1), self.dtype)

    def upsample_nearest2d(self, layout, h, w):
        x = self.view(layout)
        y = np.take(x, _nearest(x.shape[-2], h), axis=-2)
        return self._wrap(np.take(y, _nearest(x.shape[-1], w), axis=-1), self.dtype)
