"""Stride-2 3x3 convolutions (padding 1) of f32 images, and their kernel gradient, in
3/4 of the multiply-adds.

The downsampling layer of a residual network: output pixel (i, j) reads input
columns 2j - 1, 2j and 2j + 1. The middle kernel column reads the even columns, one
product over its 3 * c_in taps; the outer two read the odd columns only, a 2-tap
correlation along each row, which Winograd F(4, 2) computes 4 outputs at a time
from 5 products instead of 8. Per output and channel pair: 6.75 multiply-adds
instead of 9. ``native/_winograd_s2.c`` builds each image's planes (the middle
column's, and the odd columns' transformed tiles) in one thread's cache, runs the
six products of tallow's f32 kernel reading them in place, and adds the outer
columns' outputs (``A^T M``) to the middle one's.

The kernel gradient comes the same way (``kernel_grad``): the forward is linear in
the middle taps and in ``U = G g``, so the middle taps' gradient is ``dY @ planes^T``
and ``dU[xi] = W[xi] @ V[xi]^T`` with ``W = A dY`` per tile, six products per image
over the forward's planes, summed over parts of the batch; then ``G^T dU``. It is
also a stride-2 transposed convolution's kernel gradient, and this forward is that
layer's input gradient.

Against the im2col product over tap planes (``conv_images``) and PyTorch (one
2-core AMD EPYC, Zen 4; medians of alternating calls): the 64->128 layer on a batch
of 4 32x32 images, 1.14 ms against 1.46 and 1.41 at one thread, 0.62 against 0.77
and 0.75 at two (docs/design.md has the other shapes).

Rounding: the transforms add and subtract in one fixed order in every build, and
the kernel's transform (divisions by 6 and halvings) runs once per call: the same
bits at any thread count and instruction set. Relative errors against a float64
reference are a few times the direct sum's (1e-6 of the output's scale for 64 input
channels), as Winograd F(4, 3)'s. A non-finite input or kernel spreads through a
tile's transform (an infinity becomes NaNs over its tile), so such layers take the
im2col path, as ``winograd.conv2d``'s do.
"""

from __future__ import annotations

import numpy as np

from . import gemm, winograd
from .native_module import NativeModule

# As Winograd F(2x2, 3x3)'s: fewer input channels are the direct kernel's layers
# (conv.DIRECT_ROWS), or too few products to repay the planes and transforms.
MIN_CHANNELS = 16
# At least this many tiles of 4 outputs per image (each of the five products over the
# tiles is computed in panels of 16 columns), and this many outputs per call (the
# kernel's transform, 6 c_out * 3 c_in values, is made once per call): a single 16x16
# image of a 512->512 layer took 1.27x the im2col product's time, two 1.05x, four 0.80x.
MIN_TILES = 16
MIN_POSITIONS = 256
# The kernel gradient sums six products per image into each part's (6, c_out, 3 c_in)
# slabs: past this many channel pairs they leave the L2 cache and their traffic
# outweighs the products saved (one thread, against the im2col kernel gradient: 64->128
# 0.77-0.83x the time, 128->256 0.83-0.87x, 128->128 at 8x8 outputs 0.95x; 256->256 at
# 8x8 1.26-1.33x, 256->512 1.07-1.69x, 512->512 0.92-1.74x).
MAX_GRAD_PAIRS = 128 * 256

_module = NativeModule("_winograd_s2")


def _out(h: int, w: int) -> tuple[int, int]:
    return (h + 1) // 2, (w + 1) // 2


def _fits(x, k_shape, pad, stride, dil, groups) -> bool:
    """The rule of ``applies`` for a kernel of ``k_shape``."""
    if (x.dtype != np.float32 or tuple(k_shape[2:]) != (3, 3) or stride != (2, 2) or pad != (1, 1)
            or dil != (1, 1) or groups != 1):
        return False
    b, c, h, w = x.shape
    oh, ow = _out(h, w)
    if (c < MIN_CHANNELS or k_shape[0] < MIN_CHANNELS or oh * -(-ow // 4) < MIN_TILES
            or b * oh * ow < MIN_POSITIONS):
        return False
    return gemm.native_available() and _module() is not None


def applies(x, k, pad, stride, dil, groups) -> bool:
    """Whether the convolution of ``x`` (b, c, h, w) with ``k`` (c_out, c, kh, kw) runs
    here: f32, a 3x3 kernel at stride 2 under padding 1, dilation 1, one group, at
    least ``MIN_CHANNELS`` channels each way, ``MIN_TILES`` tiles an image and
    ``MIN_POSITIONS`` outputs a channel over the batch."""
    return k.dtype == np.float32 and _fits(x, k.shape, pad, stride, dil, groups)


def conv2d(x, k, units: int):
    """``x`` (b, c, h, w) convolved with ``k`` (c_out, c, 3, 3) at stride 2 under padding
    1 (``applies`` checked), each image's output channels in ``units`` blocks (one pool
    unit each; any count gives the same bits). None when ``x`` or ``k`` holds an
    infinity or a NaN, or the result overflowed: the caller takes another path."""
    mod = _module()
    b, c, h, w = x.shape
    co = k.shape[0]
    y = np.empty((b, co, *_out(h, w)), np.float32)
    units = max(1, min(units, -(-co // 8)))
    finite = mod.conv_s2(np.ascontiguousarray(x), np.ascontiguousarray(k), y, b, c, co, h, w, units)
    return y if finite else None


def applies_to_kernel_grad(x, g, k_shape, pad, stride, dil, groups) -> bool:
    """Whether the kernel gradient of that convolution from its output gradient ``g``
    (b, c_out, oh, ow) runs here (``kernel_grad``): the forward's rule, for two images
    or more (the batch's parts run one per thread; a single image keeps the im2col
    path's split products) and at most ``MAX_GRAD_PAIRS`` channel pairs."""
    return (g.dtype == np.float32 and x.shape[0] >= 2 and g.shape[2:] == _out(*x.shape[2:])
            and k_shape[0] * x.shape[1] <= MAX_GRAD_PAIRS and _fits(x, k_shape, pad, stride, dil, groups))


def kernel_grad(x, g, k_shape):
    """The kernel gradient (c_out, c, 3, 3) of ``conv2d(x, k)`` from the output gradient
    ``g`` (``applies_to_kernel_grad`` checked): the forward's planes, six products per
    image summed over ``winograd.KERNEL_GRAD_PARTS`` parts of the batch at most (a
    count that follows the batch alone: the same bits at any thread count). None when
    ``x`` or ``g`` holds an infinity or a NaN: the caller takes another path."""
    b, c, h, w = x.shape
    co = k_shape[0]
    parts = min(b, winograd.KERNEL_GRAD_PARTS)
    du = np.empty((parts, 6, co, 3 * c), np.float32)
    dk = np.empty(k_shape, np.float32)
    finite = _module().kernel_grad_s2(np.ascontiguousarray(x), np.ascontiguousarray(g), du, dk,
                                      b, c, co, h, w, parts)
    return dk if finite else None
