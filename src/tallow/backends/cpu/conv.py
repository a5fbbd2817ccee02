"""Convolutions, transposed convolutions, pooling and nearest upsampling of CPU
storage, and the backward kernels autograd asks for.

A convolution is an im2col gather and matrix products, as in candle; its adjoint
(the transposed convolution, which is also a convolution's input gradient) is a
product and a col2im scatter-add; its kernel gradient is a product of the output
gradient and the columns, summed over the images. There are no other algorithms:
the products give each output the plain sum of its window's products, whose
rounding stays at the level of the largest terms' units in the last place even
when the inputs span many orders of magnitude (docs/decisions.md).

With the C extension (``native/_conv.c``) and f32, the three run an image at a time
in C over the compiled worker pool (``conv_images``, ``conv_transpose_images``,
``kernel_grad_parts``): each unit builds its image's columns a block of output rows
at a time in its thread's scratch and multiplies them by tallow's f32 kernel, so the
columns are read back from the cache; the results are the same bits at any thread
count. Grouped convolutions gather the whole batch's columns (C ``im2col`` /
``col2im``) and go through ``gemm.matmul``. Without the C extension, numba
(``conv_kernels``) compiles im2col/col2im as single passes over a zero-padded copy
of the images (or a padded output, cropped after); without numba, NumPy window
views and per-tap strided adds do the same work more slowly.

A 1x1 kernel of stride 1 without padding skips im2col: the input is the column
matrix. Where the products go to BLAS (no C extension), small images use one
product over the whole batch, columns laid out ``(rows, batch, positions)``, rather
than many small ones.

A 1-D op is the 2-D op with a height of 1. f16/bf16 compute in f32.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from . import gemm, numba_kernels, parallel
from .native.pool import run_pieces
from .native_module import NativeModule
from .threads import CONFIG


_HALF = (dt.f16, dt.bf16)

# Below this many output positions per image, one product over the whole batch is
# faster than a product per image on BLAS (its per-call cost and thin matrices).
SMALL_IMAGE = 256
# Up to this many column rows (c_in * kh * kw), a kernel gradient is a product per image.
FEW_ROWS = 64
# The kernel gradient of a batch sums its images in this many parts at most (one task
# each, added in order at the end): the count follows the batch alone, so the bits do
# not depend on the threads.
KERNEL_GRAD_PARTS = 4


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


def _by_images(native, groups) -> bool:
    """Whether the convolution runs an image at a time in C (``conv_images`` and its
    kin), its products on tallow's f32 kernel: the C module and the kernel are there
    (``TALLOW_NO_NATIVE_GEMM`` turns the kernel off) and the layer is not grouped."""
    return native is not None and groups == 1 and gemm.native_available()


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
    run_pieces(lambda b0, b1: kernel(*args, b0, b1), bounds, parts)


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


def _pointwise_input(x, stride):
    """A 1x1 unpadded convolution's columns: the input itself, subsampled for a stride."""
    if stride == (1, 1):
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(x[:, :, ::stride[0], ::stride[1]])


def _images_share_out(b) -> bool:
    """Whether whole images share out evenly enough over the threads to be the units
    of a C pass: on one thread always, and on more with at least two images per
    thread or a multiple of the threads."""
    threads = CONFIG.get()
    return threads <= 1 or b >= 2 * threads or b % threads == 0


def _units_per_image(b, co) -> int:
    """Units (blocks of output channels) each image of ``conv_images`` runs as: one
    when the images share out over the threads, else enough for every thread."""
    return 1 if _images_share_out(b) else _blocks_per_item(b, co)


def _blocks_per_item(items, co) -> int:
    """Blocks (of at most ``co``) each of ``items`` pool tasks is cut into so that they
    share out evenly over the threads: threads / gcd(items, threads), 1 on one thread or
    inside a serial section. Each element is the same sum whatever the blocks: the same
    bits for any count."""
    threads = CONFIG.get()
    if threads <= 1 or parallel.in_serial():
        return 1
    return min(co, threads // math.gcd(items, threads))


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
    CONFIG.apply()
    if _by_images(native, groups) and not (pointwise and stride == (1, 1)):
        y = np.empty((b, co, oh, ow), np.float32)
        native.conv_images(x, np.ascontiguousarray(k), y, co,
                           *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow),
                           _units_per_image(b, co))
        return y
    kern = np.ascontiguousarray(k).reshape(groups, co // groups, cg * kh * kw)
    if b == 1 or oh * ow >= SMALL_IMAGE or gemm.native_takes(co // groups, oh * ow, cg * kh * kw, b * groups):
        if pointwise:
            cols = _pointwise_input(x, stride).reshape(b, groups, cg, oh * ow)
        else:
            cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, True)
            cols = cols.reshape(b, groups, cg * kh * kw, oh * ow)
        return gemm.matmul(kern, cols).reshape(b, co, oh, ow)
    # Small images: one product over the batch, then the output back to NCHW.
    if pointwise:
        xs = _pointwise_input(x, stride).reshape(b, c, oh * ow)
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
    kern_t = np.ascontiguousarray(k).reshape(groups, cig, rows).transpose(0, 2, 1)
    if b > 1:
        # Row-major (a copy of the kernel's size): read transposed, the product would
        # pack it again for every image of the batch.
        kern_t = np.ascontiguousarray(kern_t)
    CONFIG.apply()
    if _is_pointwise(kh, kw, pad) and stride == (1, 1):
        # Every input pixel lands on its own output pixel: no scatter at all (an
        # output padding, below the dilation, only adds never-reached zeros).
        y = gemm.matmul(kern_t, x.reshape(b, groups, cig, pos)).reshape(b, co, h, w)
        if (oh, ow) != (h, w):
            y = np.pad(y, ((0, 0), (0, 0), (0, oh - h), (0, ow - w)))
        return y
    if _by_images(native, groups):
        # An image (or a block of its output channels) at a time in C: its columns
        # (kernel^T @ x[b]) in the thread's scratch, then col2im of them.
        out = np.empty((b, co, oh, ow), np.float32)
        native.conv_transpose_images(x, np.ascontiguousarray(kern_t.reshape(rows, cig)), out, cig,
                                     *_geometry(b, co, oh, ow, kh, kw, stride, pad, dil, h, w),
                                     _units_per_image(b, co))
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
    """dL/dkernel: ``grad[g, cog, (b, oh, ow)] @ cols[g, (cg, kh, kw), (b, oh, ow)]^T``,
    in C an image at a time (the batch in ``KERNEL_GRAD_PARTS`` parts), else as one
    product over all images at once; with few column rows (a first layer's 1-3 input
    channels) a product per image summed over the batch, since the single product's
    tiny output leaves BLAS little to block over."""
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
    CONFIG.apply()
    if _by_images(native, groups):
        parts = min(b, KERNEL_GRAD_PARTS)
        out = np.empty((parts, co, rows), np.float32)
        # (fewer parts than threads, a single image: each part cut in blocks of rows,
        # one task each)
        native.kernel_grad_parts(x, np.ascontiguousarray(g), out, parts, co,
                                 *_geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow),
                                 _blocks_per_item(parts, co))
        return out[0].reshape(co, cg, kh, kw)
    if b > 1 and c * kh * kw <= FEW_ROWS and not pointwise:
        cols = _im2col(kernels, x, kh, kw, pad, stride, dil, oh, ow, True)
        cols = cols.reshape(b, groups, rows, oh * ow).transpose(0, 1, 3, 2)
        gm = np.ascontiguousarray(g).reshape(b, groups, cog, oh * ow)
        return gemm.matmul(gm, cols).sum(0).reshape(co, cg, kh, kw)
    if pointwise:
        xs = _pointwise_input(x, stride)[:, :, :oh, :ow].reshape(b, c, oh * ow)
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
