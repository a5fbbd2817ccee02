"""Convolutions (im2col + one batched BLAS product), transposed convolutions
(one product + strided scatter-adds), pooling and nearest upsampling, and the
backward kernels autograd asks for: a convolution's kernel gradient (im2col + one
batched BLAS product) and the pooling gradients.

A 1-D op is the 2-D op with a height of 1. f16/bf16 compute in f32.

Pooling loops over the kernel's taps (4 for a 2x2 window), never over elements:
each tap is one whole-tensor NumPy operation on a strided view, which is far
cheaper than reducing a 6-D window view over its last two axes.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ... import config
from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from . import gemm
from .threads import CONFIG


_HALF = (dt.f16, dt.bf16)


def _operand(s, layout, op):
    if not s.dtype.is_float:
        raise UnsupportedDTypeError(f"{op}: not supported for dtype {s.dtype} on cpu")
    x = s.view(layout)
    return x.astype(np.float32) if s.dtype in _HALF else x


def _out(s, y, dtype):
    return s._wrap(y.astype(dtype.np, copy=False), dtype)


def _padded(x, pad):
    if pad[0] or pad[1]:
        return np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    return np.ascontiguousarray(x)


def _windows(x, kh, kw, stride, dil, out_hw=None):
    """The output size and the strides of one kernel tap's window walk over ``x``;
    ``out_hw`` keeps only the first rows/columns of windows (a transposed convolution's
    output padding leaves positions past its input that no gradient reaches)."""
    hp, wp = x.shape[2:]
    oh = (hp - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wp - dil[1] * (kw - 1) - 1) // stride[1] + 1
    if out_hw is not None:
        oh, ow = min(oh, out_hw[0]), min(ow, out_hw[1])
    sb, sc, sh, sw = x.strides
    return oh, ow, (sb, sc, sh * dil[0], sw * dil[1], sh * stride[0], sw * stride[1])


def _conv2d(x, k, pad, stride, dil, groups):
    """Per image, ``kernel[g, cog, (cg, kh, kw)] @ cols[b, g, (cg, kh, kw), (oh, ow)]``:
    the product comes out in the output's own layout (no transposed copy), and a 1x1
    stride-1 convolution reads its input in place (no im2col at all)."""
    b, c = x.shape[:2]
    co, cg, kh, kw = k.shape
    x = _padded(x, pad)
    oh, ow, (sb, sc, sdh, sdw, soh, sow) = _windows(x, kh, kw, stride, dil)
    if kh == kw == 1 and oh == x.shape[2] and ow == x.shape[3]:
        cols = x.reshape(b, groups, cg, oh * ow)
    else:
        win = as_strided(x, (b, groups, cg, kh, kw, oh, ow),
                         (sb, sc * cg, sc, sdh, sdw, soh, sow), writeable=False)
        cols = win.reshape(b, groups, cg * kh * kw, oh * ow)
    kern = k.reshape(groups, co // groups, cg * kh * kw)
    CONFIG.apply()
    return gemm.matmul(kern, cols).reshape(b, co, oh, ow)


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
    cols = gemm.matmul(xs, kern).reshape(groups, b, h, w, cog, kh, kw)
    cols = cols.transpose(1, 0, 4, 5, 6, 2, 3).reshape(b, co, kh, kw, h, w)
    buf = np.zeros((b, co, full_h + out_pad[0], full_w + out_pad[1]), cols.dtype)
    hs = stride[0] * (h - 1) + 1
    ws = stride[1] * (w - 1) + 1
    for i in range(kh):
        for j in range(kw):
            r, c = i * dil[0], j * dil[1]
            buf[:, :, r:r + hs:stride[0], c:c + ws:stride[1]] += cols[:, :, i, j]
    return buf[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow]


def _conv2d_kernel_grad(x, g, k_shape, pad, stride, dil, groups):
    """dL/dkernel as one batched BLAS product over all images at once:
    ``grad[g, cog, (b, oh, ow)] @ cols[g, (cg, kh, kw), (b, oh, ow)]^T``."""
    co, cg, kh, kw = k_shape
    b = x.shape[0]
    cog = co // groups
    x = _padded(x, pad)
    oh, ow, (sb, sc, sdh, sdw, soh, sow) = _windows(x, kh, kw, stride, dil, g.shape[2:])
    win = as_strided(x, (groups, cg, kh, kw, b, oh, ow),
                     (sc * cg, sc, sdh, sdw, sb, soh, sow), writeable=False)
    cols = win.reshape(groups, cg * kh * kw, b * oh * ow)
    gm = g[:, :, :oh, :ow].reshape(b, groups, cog, oh * ow).transpose(1, 2, 0, 3)
    gm = gm.reshape(groups, cog, b * oh * ow)
    CONFIG.apply()
    return gemm.matmul(gm, cols.transpose(0, 2, 1)).reshape(co, cg, kh, kw)


def _taps(kernel, stride, oh, ow):
    """For each kernel tap (row-major), the slices of the input it reads in every window."""
    sh, sw = stride
    return [
        (i * kernel[1] + j,
         (slice(None), slice(None), slice(i, i + sh * (oh - 1) + 1, sh),
          slice(j, j + sw * (ow - 1) + 1, sw)))
        for i in range(kernel[0]) for j in range(kernel[1])
    ]


def _pool_size(x, kernel, stride):
    return ((x.shape[2] - kernel[0]) // stride[0] + 1, (x.shape[3] - kernel[1]) // stride[1] + 1)


def _max_pool(x, kernel, stride):
    oh, ow = _pool_size(x, kernel, stride)
    taps = _taps(kernel, stride, oh, ow)
    out = np.array(x[taps[0][1]], order="C")
    for _, sl in taps[1:]:
        np.maximum(out, x[sl], out=out)  # NaN propagates, as a max over the window does
    return out


def _avg_pool(x, kernel, stride):
    oh, ow = _pool_size(x, kernel, stride)
    taps = _taps(kernel, stride, oh, ow)
    out = np.array(x[taps[0][1]], order="C")
    for _, sl in taps[1:]:
        out += x[sl]
    out *= out.dtype.type(1.0 / (kernel[0] * kernel[1]))
    return out


def _compiled():
    """The numba kernels module, or None (numba missing, broken or disabled)."""
    if _KERNELS["checked"] is False:
        _KERNELS["checked"] = True
        if not config.flag("TALLOW_NO_NUMBA", False):
            try:
                from . import conv_kernels

                _KERNELS["module"] = conv_kernels
            except Exception:  # numba missing or broken: the NumPy paths serve
                _KERNELS["module"] = None
    return _KERNELS["module"]


_KERNELS = {"checked": False, "module": None}


def _max_pool_backward(x, g, kernel, stride):
    """Route each window's gradient to its first maximum, or to its last NaN, as
    PyTorch does; overlapping windows add up."""
    kernels = _compiled()
    if kernels is not None and x.dtype == g.dtype:
        gx = np.zeros(x.shape, g.dtype)
        kernels.max_pool2d_backward(np.ascontiguousarray(x), np.ascontiguousarray(g),
                                    kernel[0], kernel[1], stride[0], stride[1], gx)
        return gx
    oh, ow = g.shape[2:]
    taps = _taps(kernel, stride, oh, ow)
    best = np.array(x[taps[0][1]], order="C")
    arg = np.zeros(best.shape, np.int32)
    for t, sl in taps[1:]:
        v = x[sl]
        upd = (v > best) | np.isnan(v)
        np.copyto(best, v, where=upd)
        arg[upd] = t
    gx = np.zeros(x.shape, g.dtype)
    for t, sl in taps:
        gx[sl] += np.where(arg == t, g, g.dtype.type(0))
    return gx


def _avg_pool_backward(g, in_shape, kernel, stride):
    oh, ow = g.shape[2:]
    gs = g * g.dtype.type(1.0 / (kernel[0] * kernel[1]))
    gx = np.zeros(in_shape, g.dtype)
    for _, sl in _taps(kernel, stride, oh, ow):
        gx[sl] += gs
    return gx


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

    def conv2d_kernel_grad(self, layout, grad, grad_layout, kernel_shape, padding, stride,
                           dilation, groups):
        x = _operand(self, layout, "conv2d backward")
        g = _operand(grad, grad_layout, "conv2d backward")
        gk = _conv2d_kernel_grad(x, g, kernel_shape, padding, stride, dilation, groups)
        return _out(self, gk, self.dtype)

    def avg_pool2d(self, layout, kernel, stride):
        x = _operand(self, layout, "avg_pool2d")
        return _out(self, _avg_pool(x, kernel, stride), self.dtype)

    def max_pool2d(self, layout, kernel, stride):
        return self._wrap(_max_pool(self.view(layout), kernel, stride), self.dtype)

    def max_pool2d_backward(self, layout, grad, grad_layout, kernel, stride):
        x = _operand(self, layout, "max_pool2d backward")
        g = _operand(grad, grad_layout, "max_pool2d backward")
        return _out(self, _max_pool_backward(x, g, kernel, stride), self.dtype)

    def avg_pool2d_backward(self, layout, input_shape, kernel, stride):
        g = _operand(self, layout, "avg_pool2d backward")
        return _out(self, _avg_pool_backward(g, input_shape, kernel, stride), self.dtype)

    def upsample_nearest1d(self, layout, size):
        x = self.view(layout)
        return self._wrap(np.take(x, _nearest(x.shape[-1], size), axis=-1), self.dtype)

    def upsample_nearest2d(self, layout, h, w):
        x = self.view(layout)
        y = np.take(x, _nearest(x.shape[-2], h), axis=-2)
        return self._wrap(np.take(y, _nearest(x.shape[-1], w), axis=-1), self.dtype)
