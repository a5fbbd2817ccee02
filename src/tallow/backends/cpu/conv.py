"""Convolutions, transposed convolutions, pooling and nearest upsampling of CPU
storage, and the backward kernels autograd asks for.

A convolution is an im2col gather and BLAS products; its adjoint (the transposed
convolution, which is also a convolution's input gradient) is a BLAS product and
a col2im scatter-add. For f32 with the C extension (``native/_conv.c``), im2col,
col2im and pooling are C passes split over the compiled worker pool (padding,
stride and dilation in the gather; the same bits at any thread count), and layers
with few input channels (``DIRECT_ROWS``) are convolved, and their kernel gradient
computed, directly, without columns. Otherwise, with numba (``conv_kernels``),
im2col/col2im are compiled single passes over a zero-padded copy of the images (or
a padded output, cropped after); without numba, NumPy window views and per-tap
strided adds do the same work more slowly.

Layout choices (also in docs/design.md, "The CPU backend"):

* forward: one product per image, ``kernel[g] (co/g, cg*kh*kw) @ cols[b, g]``, so
  the output comes out in NCHW with no transposed copy (one batched call of the
  native kernel); when an image has few output positions and the product goes to
  BLAS, one product over the whole batch (columns laid out ``(rows, batch,
  positions)``) beats many small ones, at the cost of one copy of the output;
* stride-1 3x3 kernels between layers of 16+ channels: Winograd F(2x2, 3x3)
  (``winograd.py``), 2.25x fewer multiply-adds and no im2col; stride-2 3x3 ones
  under padding 1: the middle kernel column's product and Winograd F(4, 2) for the
  outer two (``winograd_s2.py``), 0.75x the multiply-adds, for the kernel gradient
  too;
* 1x1 kernels without padding skip im2col: the input (strided for stride 2) is the
  column matrix;
* kernel gradient: with the native kernel and images of ``SMALL_IMAGE`` positions
  or more, a product per image added into the result (no transposed copies);
  otherwise one product over the whole batch,
  ``grad (co/g, b*oh*ow) @ cols^T``, or a product per image summed over the batch
  when the columns have few rows (``FEW_ROWS``);
* transposed convolution / input gradient: ``kernel^T @ x`` then col2im, per image
  or, for small images, as one product over the batch (its columns then land in
  ``(rows, batch, positions)``, which col2im reads in place).

A 1-D op is the 2-D op with a height of 1. f16/bf16 compute in f32.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from . import gemm, numba_kernels, parallel, winograd, winograd_s2
from .native_module import NativeModule
from .threads import CONFIG


_HALF = (dt.f16, dt.bf16)

# Below this many output positions per image, one product over the whole batch is
# faster than a product per image on BLAS (its per-call cost and thin matrices); the
# native kernel takes a batch of per-image products in one call, so where it runs them
# (gemm.native_takes) the per-image layout stays, without the transposed copies.
SMALL_IMAGE = 256
# Up to this many column rows (c_in * kh * kw), a kernel gradient is a product per image.
FEW_ROWS = 64


def _operand(s, layout, op):
    if not s.dtype.is_float:
        raise UnsupportedDTypeError(f"{op}: not supported for dtype {s.dtype} on cpu")
    x = s.view(layout)
    return x.astype(np.float32) if s.dtype in _HALF else x


def _out(s, y, dtype):
    return s._wrap(y.astype(dtype.np, copy=False), dtype)


def _compiled():
    """The numba kernels module, or None (numba missing, broken or disabled)."""
    return numba_kernels.load("conv_kernels")


def _native(*arrays):
    """The compiled module (``native/_conv.c``) when it is built, not disabled
    (``TALLOW_NO_NATIVE``) and every array is f32, else None."""
    for a in arrays:  # (a loop: this runs a few times per convolution)
        if a.dtype != np.float32:
            return None
    return _CONV()


_CONV = NativeModule("_conv")

# A convolution whose columns would have at most this many rows (c_in / groups * kh *
# kw: a first layer's 1-8 channels under a 3x3 kernel) runs as a direct convolution
# when the native module is there: such short columns leave BLAS little to block over,
# and building them costs as much as the product.
DIRECT_ROWS = 80
# ... and at most this many output channels (the kernel's rows are re-read per output
# row; beyond this, im2col and BLAS's blocking win).
DIRECT_MAX_CO = 64


# A stride-1 transposed convolution runs as the direct one only with at least this many
# output channels: the direct kernel computes blocks of 4 or 6 channels, and a 1-channel
# input gradient wastes three quarters of each (1.1x im2col's time; 3 channels: 0.8x).
DIRECT_T_MIN_CO = 3


def _direct(native, groups, pointwise, rows, co):
    """Whether a convolution (or its kernel gradient) runs as a direct one."""
    return (native is not None and groups == 1 and not pointwise and rows <= DIRECT_ROWS
            and co <= DIRECT_MAX_CO)


def _geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow):
    return (b, c, h, w, kh, kw, stride[0], stride[1], pad[0], pad[1], dil[0], dil[1], oh, ow)


def _over_batch(kernel, nb, per_image, *args):
    """``kernel(*args, b0, b1)`` over the images, split into one batch range per thread
    when the work is large enough to pay for the hand-off (the kernels release the GIL
    and the ranges write disjoint images)."""
    if not parallel.worth_splitting((nb, per_image)):
        kernel(*args, 0, nb)
        return
    parts = min(CONFIG.get(), nb)
    step, extra = divmod(nb, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + step + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    pool = CONFIG.pool()
    futures = [pool.submit(kernel, *args, b0, b1) for b0, b1 in bounds[1:]]
    kernel(*args, *bounds[0])
    for f in futures:
        f.result()


def _out_hw(h, w, kh, kw, pad, stride, dil):
    return ((h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1,
            (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1)


def _zero_padded(x, pad):
    """``x`` (C-contiguous) with ``pad`` zeros around each image (``x`` itself for none)."""
    if pad == (0, 0):
        return x
    b, c, h, w = x.shape
    xp = np.zeros((b, c, h + 2 * pad[0], w + 2 * pad[1]), x.dtype)
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w] = x
    return xp


def _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, batch_major):
    """Columns of a C-contiguous ``x``: ``(b, c*kh*kw, oh*ow)`` when ``batch_major``,
    else ``(c*kh*kw, b, oh*ow)``."""
    b, c, h, w = x.shape
    rows, pos = c * kh * kw, oh * ow
    if batch_major:
        cols = np.empty((b, rows, pos), x.dtype)
        sb, sr = rows * pos, pos
    else:
        cols = np.empty((rows, b, pos), x.dtype)
        sb, sr = pos, b * pos
    native = _native(x)
    if native is not None:  # padding handled in the gather, split over the compiled pool
        native.im2col(x, cols, sb, sr, *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow))
        return cols
    xp = _zero_padded(x, pad)
    _over_batch(kernels.im2col, b, rows * pos, xp.reshape(-1), c, xp.shape[2], xp.shape[3],
                kh, kw, stride[0], stride[1], dil[0], dil[1], oh, ow, cols.reshape(-1), sb, sr)
    return cols


def _is_pointwise(kh, kw, pad):
    return kh == kw == 1 and pad == (0, 0)


def _pointwise_input(native, x, stride):
    """A 1x1 unpadded convolution's columns: the input itself, subsampled for a stride.
    Natively the subsample is a 1x1 max pool at that stride (each window one pixel,
    copied bit for bit), split over the pool: 16 images of 128x16x16 at stride 2 in
    30-39 us where NumPy's strided copy took 75-131 (its 1x1 128->256 layer's forward
    at two threads 1.17x PyTorch's time with NumPy's copy)."""
    if stride == (1, 1):
        return np.ascontiguousarray(x)
    if native is None or x.dtype != np.float32:
        return np.ascontiguousarray(x[:, :, ::stride[0], ::stride[1]])
    b, c, h, w = x.shape
    out = np.empty((b, c, (h - 1) // stride[0] + 1, (w - 1) // stride[1] + 1), np.float32)
    native.max_pool2d(np.ascontiguousarray(x), out, b * c, h, w, 1, 1, stride[0], stride[1])
    return out


def _by_images(native, b, groups, co, pos, rows) -> bool:
    """Whether a transposed convolution (``rows`` x ``co`` kernel^T products of ``pos``
    positions) runs an image at a time in C (``conv_transpose_images``: each image's
    columns and their col2im on one thread, in its cache) rather than the batch's
    products split over the threads and then col2im. For the native product's shapes
    (``gemm.native_takes``, not computed transposed), so that either way gives the
    same bits; on one thread, or when the images share out evenly enough over the
    threads (as Winograd's, ``winograd._by_images``). The forward's rule is
    ``_image_groups``."""
    if native is None or groups != 1 or b < 2 or gemm._narrow_and_tall(co, pos):
        return False
    return gemm.native_takes(co, pos, rows, b) and winograd._by_images(b)  # (the kernel's products)


def _image_groups(native, b, groups, co, pos, rows) -> int:
    """How many units each image of an im2col convolution runs as in C (``conv_images``:
    the image's product packed straight from its zero-margined planes, no columns
    built, each unit a block of output channels on one thread), or 0 for the batch's
    columns and the products split over the threads. One unit per image on one thread
    (a single 7x7 image's 256->256 layer too, whose 49 positions the batch path
    computes transposed: 0.81-0.89x its time) and when the images share out evenly
    enough over the threads (as Winograd's, ``winograd._by_images``); fewer images (one
    image on two threads) are cut into blocks of output channels, one per thread: 0.73x
    the split product's time for a 224x224 stem (7x7, stride 2, 3->64), 0.77-0.84x for
    128-512 channels on 7x7-28x28 images, 0.97x for 64->128 at 56x56, stride 2. Every
    element is the same product's sum either way: the same bits."""
    if native is None or groups != 1 or not gemm.native_takes(co, pos, rows, b):
        return 0
    return _units_per_image(b, co)


def _units_per_image(b, co) -> int:
    """Units (blocks of output channels) each image of a per-image C convolution runs
    as: one when the images share out evenly enough over the threads (as Winograd's,
    ``winograd._by_images``), else enough for every thread (``_blocks_per_item``)."""
    return 1 if b >= 2 and winograd._by_images(b) else _blocks_per_item(b, co)


def _blocks_per_item(items, co) -> int:
    """Blocks (of at most ``co``) each of ``items`` pool tasks is cut into so that they
    share out evenly over the threads: threads / gcd(items, threads), 1 on one thread or
    inside a serial section. Each element is the same sum whatever the blocks: the same
    bits for any count."""
    threads = CONFIG.get()
    if threads <= 1 or parallel.in_serial():
        return 1
    return min(co, threads // math.gcd(items, threads))


def _kernel_grad_parts(native, b, groups, pointwise, stride, co, rows, pos) -> int:
    """How many parts an im2col kernel gradient's sum over the images is cut into (each
    summed image by image in C, ``kernel_grad_parts``: the columns of an image made
    and used on one thread, in its cache), or 0 for the products below. A count that
    follows the batch alone (``winograd.KERNEL_GRAD_PARTS`` at most), so the bits do
    not depend on the threads; for the native product's shapes, and images of
    ``SMALL_IMAGE`` positions or more, where the per-image products already ran, or a
    1x1 kernel of stride 1 at any size, whose columns are the images themselves (read
    in place: 64->256 on 8x8 images, batch 64, forward + backward 0.82-0.84x the time
    of one product over the batch's transposed copies). A single image of any size
    (its one product is the batch's: the same bits) packs its columns from the
    windows too, built by neither (a 7x7 256->256 layer's kernel gradient 0.90-0.92x
    the time at one thread, 0.86-0.98x at two). A strided 1x1 kernel keeps that
    product (its gathered columns made the parts 1.1x slower)."""
    if (native is None or groups != 1 or not gemm.native_takes(co, rows, pos)
            or (pointwise and stride != (1, 1))
            or (b < 2 and pointwise) or (b >= 2 and not pointwise and pos < SMALL_IMAGE)):
        return 0
    return min(b, winograd.KERNEL_GRAD_PARTS)


def _conv2d(x, k, pad, stride, dil, groups):
    """A convolution of NCHW ``x`` with ``k`` (c_out, c_in / groups, kh, kw), NCHW out."""
    kernels, native = _compiled(), _native(x, k)
    if kernels is None and native is None:
        return _conv2d_numpy(x, k, pad, stride, dil, groups)
    b, c, h, w = x.shape
    co, cg, kh, kw = k.shape
    oh, ow = _out_hw(h, w, kh, kw, pad, stride, dil)
    x = np.ascontiguousarray(x)
    pointwise = _is_pointwise(kh, kw, pad)
    if _direct(native, groups, pointwise, c * kh * kw, co):
        y = np.empty((b, co, oh, ow), np.float32)
        native.direct(x, np.ascontiguousarray(k), y, co,
                      *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow))
        return y
    if winograd.applies(x, k, pad, stride, dil, groups):
        y = winograd.conv2d(x, k, pad)
        if y is not None:  # (None: a non-finite value, which its transforms would spread)
            return y
    if winograd_s2.applies(x, k, pad, stride, dil, groups):
        y = winograd_s2.conv2d(x, k, _units_per_image(b, co))
        if y is not None:
            return y
    kern = np.ascontiguousarray(k).reshape(groups, co // groups, cg * kh * kw)
    CONFIG.apply()
    if b == 1 or oh * ow >= SMALL_IMAGE or gemm.native_takes(co // groups, oh * ow, cg * kh * kw, b * groups):
        units = 0 if pointwise else _image_groups(native, b, groups, co, oh * ow, c * kh * kw)
        if units:
            y = np.empty((b, co, oh, ow), np.float32)
            native.conv_images(x, np.ascontiguousarray(k), y, co,
                               *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow), units)
            return y
        if pointwise:
            cols = _pointwise_input(native, x, stride).reshape(b, groups, cg, oh * ow)
        else:
            cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, True)
            cols = cols.reshape(b, groups, cg * kh * kw, oh * ow)
        return gemm.matmul(kern, cols).reshape(b, co, oh, ow)
    # Small images: one product over the batch, then the output back to NCHW.
    if pointwise:
        xs = _pointwise_input(native, x, stride).reshape(b, c, oh * ow)
        cols = np.ascontiguousarray(xs.transpose(1, 0, 2))
    else:
        cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, False)
    y = gemm.matmul(kern, cols.reshape(groups, cg * kh * kw, b * oh * ow))
    y = y.reshape(co, b, oh * ow).transpose(1, 0, 2)
    return np.ascontiguousarray(y).reshape(b, co, oh, ow)


def _conv_transpose2d(x, k, pad, out_pad, stride, dil, groups):
    """The adjoint of a convolution: ``kernel^T @ x`` (per image, or over the batch for
    small images) then col2im into the output."""
    kernels = _compiled()
    if kernels is None and _native(x, k) is None:
        return _conv_transpose2d_numpy(x, k, pad, out_pad, stride, dil, groups)
    b, ci, h, w = x.shape
    _, cog, kh, kw = k.shape
    cig, co = ci // groups, cog * groups
    oh = (h - 1) * stride[0] - 2 * pad[0] + dil[0] * (kh - 1) + out_pad[0] + 1
    ow = (w - 1) * stride[1] - 2 * pad[1] + dil[1] * (kw - 1) + out_pad[1] + 1
    rows, pos = cog * kh * kw, h * w
    x = np.ascontiguousarray(x)
    native = _native(x, k)
    if (stride == (1, 1) and out_pad == (0, 0) and pad[0] <= dil[0] * (kh - 1)
            and pad[1] <= dil[1] * (kw - 1) and groups == 1):
        # Stride 1: the convolution of x with the flipped, transposed kernel under the
        # complementary padding; for few output channels (a first layer's input
        # gradient) the direct kernel needs no column buffer and no scatter, and a
        # 3x3 kernel between wider layers goes to Winograd's products.
        cpad = (dil[0] * (kh - 1) - pad[0], dil[1] * (kw - 1) - pad[1])
        if _direct(native, groups, False, rows, ci) and co >= DIRECT_T_MIN_CO:
            flipped = np.ascontiguousarray(k.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
            y = np.empty((b, co, oh, ow), np.float32)
            native.direct(x, flipped, y, co, *_geometry(b, ci, h, w, kh, kw, (1, 1), cpad, dil, oh, ow))
            return y
        flipped = k.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        if winograd.applies(x, flipped, cpad, (1, 1), dil, 1):
            y = winograd.conv2d(x, k, cpad, flipped=True)
            if y is not None:
                return y
    kern_t = np.ascontiguousarray(k).reshape(groups, cig, rows).transpose(0, 2, 1)
    if b > 1:
        # Row-major (a copy of the kernel's size): read transposed, the native kernel
        # packed it again for every image of the batch (a 1x1 layer's input gradient,
        # batch 64: 1.96 -> 1.60 ms, the same bits). One image packs it once anyway.
        kern_t = np.ascontiguousarray(kern_t)
    CONFIG.apply()
    if _is_pointwise(kh, kw, pad) and stride == (1, 1):
        # Every input pixel lands on its own output pixel: no scatter at all (an
        # output padding, below the dilation, only adds never-reached zeros).
        y = gemm.matmul(kern_t, x.reshape(b, groups, cig, pos)).reshape(b, co, h, w)
        if (oh, ow) != (h, w):
            y = np.pad(y, ((0, 0), (0, 0), (0, oh - h), (0, ow - w)))
        return y
    if _by_images(native, b, groups, rows, pos, cig):
        # An image at a time in C: its columns (kernel^T @ x[b]) in the thread's scratch,
        # then col2im of them, one chunk of images per thread (the same bits).
        out = np.empty((b, co, oh, ow), np.float32)
        native.conv_transpose_images(x, kern_t.reshape(rows, cig), out, cig,
                                     *_geometry(b, co, oh, ow, kh, kw, stride, pad, dil, h, w))
        return out
    if b == 1 or pos >= SMALL_IMAGE or gemm.native_takes(rows, pos, cig, b * groups):
        cols = gemm.matmul(kern_t, x.reshape(b, groups, cig, pos))  # (b, g, rows, pos)
        sb, sr = groups * rows * pos, pos
    else:
        xs = np.ascontiguousarray(x.reshape(b, ci, pos).transpose(1, 0, 2))
        cols = gemm.matmul(kern_t, xs.reshape(groups, cig, b * pos))  # (g, rows, b, pos)
        sb, sr = pos, b * pos
    native = _native(cols)
    if native is not None:  # each output plane zeroed and summed in place, nothing cropped
        out = np.empty((b, co, oh, ow), np.float32)
        native.col2im(cols, out, sb, sr, *_geometry(b, co, oh, ow, kh, kw, stride, pad, dil, h, w))
        return out
    # The padded output: every tap lands inside it; the padding is cropped after.
    hp, wp = oh + 2 * pad[0], ow + 2 * pad[1]
    outp = np.zeros((b, co, hp, wp), cols.dtype)
    _over_batch(kernels.col2im, b, groups * rows * pos, cols.reshape(-1), sb, sr, co, hp, wp,
                kh, kw, stride[0], stride[1], dil[0], dil[1], h, w, outp.reshape(-1))
    if pad == (0, 0):
        return outp
    return np.ascontiguousarray(outp[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow])


def _conv2d_kernel_grad(x, g, k_shape, pad, stride, dil, groups):
    """dL/dkernel: ``grad[g, cog, (b, oh, ow)] @ cols[g, (cg, kh, kw), (b, oh, ow)]^T``
    as one BLAS product over all images at once; with few column rows (a first
    layer's 1-3 input channels) a product per image summed over the batch is faster,
    since the single product's tiny output leaves BLAS little to block over."""
    kernels, native = _compiled(), _native(x, g)
    if kernels is None and native is None:
        return _conv2d_kernel_grad_numpy(x, g, k_shape, pad, stride, dil, groups)
    co, cg, kh, kw = k_shape
    b, c, h, w = x.shape
    cog = co // groups
    rows = cg * kh * kw
    oh, ow = _out_hw(h, w, kh, kw, pad, stride, dil)
    # A transposed convolution's output padding leaves grad positions past the last
    # window: no kernel tap reaches them.
    oh, ow = min(oh, g.shape[2]), min(ow, g.shape[3])
    x = np.ascontiguousarray(x)
    g = g[:, :, :oh, :ow]
    pointwise = _is_pointwise(kh, kw, pad)
    if _direct(native, groups, pointwise, c * kh * kw, co) and native.simd():
        gk = np.empty(k_shape, np.float32)
        native.kernel_grad(x, np.ascontiguousarray(g), gk, co,
                           *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow))
        return gk
    if winograd.applies_to_kernel_grad(x, g, k_shape, pad, stride, dil, groups):
        dk = winograd.kernel_grad(x, g, k_shape, pad)
        if dk is not None:
            return dk
    if winograd_s2.applies_to_kernel_grad(x, g, k_shape, pad, stride, dil, groups):
        dk = winograd_s2.kernel_grad(x, g, k_shape)
        if dk is not None:
            return dk
    CONFIG.apply()
    parts = _kernel_grad_parts(native, b, groups, pointwise, stride, co, rows, oh * ow)
    if parts:
        out = np.empty((parts, co, rows), np.float32)
        native.kernel_grad_parts(x, np.ascontiguousarray(g), out, parts, co,
                                 *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow),
                                 # fewer parts than threads (a single image): each cut in
                                 # blocks of columns (packed from the windows) or rows, one
                                 # task each (a stride-2 128->256 image at 32x32: 0.60x the
                                 # time at two threads)
                                 _blocks_per_item(parts, co))
        return out[0].reshape(co, cg, kh, kw)
    if (x.dtype == np.float32 and g.dtype == np.float32 and gemm.native_available()
            and oh * ow >= SMALL_IMAGE):
        # One product per image added into the result by the native kernel: neither
        # the gradient nor the columns are copied transposed (a whole 1x1 layer's
        # forward + backward 0.73-0.94x the time with one product over the batch).
        # Small images keep that one product: per-image ones of k < 256 lost 4-7%.
        if pointwise:
            cols = np.ascontiguousarray(_pointwise_input(native, x, stride)[:, :, :oh, :ow])
        else:
            cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, True)
        cols = cols.reshape(b, groups, rows, oh * ow).transpose(0, 1, 3, 2)
        gm = np.ascontiguousarray(g).reshape(b, groups, cog, oh * ow)
        out = np.empty((groups, cog, rows), np.float32)
        return gemm.sum_of_products(gm, cols, out).reshape(co, cg, kh, kw)
    if b > 1 and c * kh * kw <= FEW_ROWS and not pointwise:
        cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, True)
        cols = cols.reshape(b, groups, rows, oh * ow).transpose(0, 1, 3, 2)
        gm = np.ascontiguousarray(g).reshape(b, groups, cog, oh * ow)
        return gemm.matmul(gm, cols).sum(0).reshape(co, cg, kh, kw)
    if pointwise:
        xs = _pointwise_input(native, x, stride)[:, :, :oh, :ow].reshape(b, c, oh * ow)
        cols = np.ascontiguousarray(xs.transpose(1, 0, 2))
    else:
        cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, False)
    gm = g.reshape(b, co, oh * ow).transpose(1, 0, 2)
    gm = np.ascontiguousarray(gm).reshape(groups, cog, b * oh * ow)
    cols = cols.reshape(groups, rows, b * oh * ow)
    return gemm.matmul(gm, cols.transpose(0, 2, 1)).reshape(co, cg, kh, kw)


# -- NumPy fallbacks (numba missing or TALLOW_NO_NUMBA) -------------------------------------

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


def _conv2d_numpy(x, k, pad, stride, dil, groups):
    """Per image, ``kernel[g, cog, (cg, kh, kw)] @ cols[b, g, (cg, kh, kw), (oh, ow)]``,
    the columns a reshaped window view."""
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


def _conv_transpose2d_numpy(x, k, pad, out_pad, stride, dil, groups):
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


def _conv2d_kernel_grad_numpy(x, g, k_shape, pad, stride, dil, groups):
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


# -- pooling: a compiled pass per op; the NumPy fallbacks loop over the kernel's taps (4
# for a 2x2 window), each tap one whole-tensor operation on a strided view ---------------

_COMPILED_POOL_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _pool_kernels(*arrays):
    """The numba kernels when every array is f32 or f64 of one dtype, else None."""
    kernels = _compiled()
    if kernels is None or arrays[0].dtype not in _COMPILED_POOL_TYPES:
        return None
    if any(a.dtype != arrays[0].dtype for a in arrays):
        return None
    return kernels


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


def _pool_geometry(x, kernel, stride):
    b, c, h, w = x.shape
    return (b * c, h, w, kernel[0], kernel[1], stride[0], stride[1])


def _native_pool(kernel_fn, x, kernel, stride, oh, ow):
    """A pooling pass of the compiled module over ``x``'s planes, into a new array."""
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
    kernel_fn(x, out, *_pool_geometry(x, kernel, stride))
    return out


def _max_pool(x, kernel, stride):
    oh, ow = _pool_size(x, kernel, stride)
    native = _native(x)
    if native is not None:
        return _native_pool(native.max_pool2d, x, kernel, stride, oh, ow)
    kernels = _pool_kernels(x)
    if kernels is not None:
        out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
        x = np.ascontiguousarray(x)
        _over_batch(kernels.max_pool2d, x.shape[0], x[0].size, x, kernel[0], kernel[1],
                    stride[0], stride[1], out)
        return out
    taps = _taps(kernel, stride, oh, ow)
    out = np.array(x[taps[0][1]], order="C")
    for _, sl in taps[1:]:
        np.maximum(out, x[sl], out=out)  # NaN propagates, as a max over the window does
    return out


def _avg_pool(x, kernel, stride):
    oh, ow = _pool_size(x, kernel, stride)
    native = _native(x)
    if native is not None:
        return _native_pool(native.avg_pool2d, x, kernel, stride, oh, ow)
    scale = x.dtype.type(1.0 / (kernel[0] * kernel[1]))
    kernels = _pool_kernels(x)
    if kernels is not None:
        out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
        x = np.ascontiguousarray(x)
        _over_batch(kernels.avg_pool2d, x.shape[0], x[0].size, x, kernel[0], kernel[1],
                    stride[0], stride[1], scale, out)
        return out
    taps = _taps(kernel, stride, oh, ow)
    out = np.array(x[taps[0][1]], order="C")
    for _, sl in taps[1:]:
        out += x[sl]
    out *= scale
    return out


def _max_pool_backward(x, g, kernel, stride):
    """Route each window's gradient to its first maximum, or to its last NaN, as
    PyTorch does; overlapping windows add up."""
    native = _native(x, g)
    if native is not None:
        x = np.ascontiguousarray(x)
        gx = np.empty(x.shape, np.float32)
        native.max_pool2d_backward(x, np.ascontiguousarray(g), gx,
                                   *_pool_geometry(x, kernel, stride))
        return gx
    kernels = _pool_kernels(x, g)
    if kernels is not None:
        gx = np.zeros(x.shape, g.dtype)
        _over_batch(kernels.max_pool2d_backward, x.shape[0], x[0].size,
                    np.ascontiguousarray(x), np.ascontiguousarray(g),
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
    native = _native(g)
    if native is not None:
        gx = np.empty(in_shape, np.float32)
        native.avg_pool2d_backward(np.ascontiguousarray(g), gx, *_pool_geometry(gx, kernel, stride))
        return gx
    scale = g.dtype.type(1.0 / (kernel[0] * kernel[1]))
    kernels = _pool_kernels(g)
    gx = np.zeros(in_shape, g.dtype)
    if kernels is not None:
        _over_batch(kernels.avg_pool2d_backward, g.shape[0], gx[0].size,
                    np.ascontiguousarray(g), kernel[0], kernel[1], stride[0], stride[1],
                    scale, gx)
        return gx
    oh, ow = g.shape[2:]
    gs = g * scale
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
