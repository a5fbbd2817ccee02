"""Winograd F(2x2, 3x3): stride-1 3x3 convolutions of f32 images in 16 products.

A 3x3 convolution over 2x2 output tiles needs 16 multiplications per tile and
channel pair instead of 36 (Lavin & Gray, 2015). With the kernel transformed to
``U = G k G^T`` (16 values per channel pair) and each 4x4 input tile to ``V = B^T d
B``, the 16 positions are 16 independent matrix products over the input channels,
``M[xi] = U[xi] (c_out, c_in) @ V[xi] (c_in, tiles)``, one batched call of tallow's
f32 GEMM (split over the compiled pool); ``Y = A^T M A`` gives each 2x2 output
tile. The three transforms are C passes (``native/_winograd.c``) that only add,
subtract and halve; results are bit-identical at any thread count.

The three passes run a few images at a time (``native conv``), one chunk of images
per thread: each core reads back only the tiles it wrote, and a few images' tiles
stay in the cache between the passes (a 64->64 layer, batch 8 of 16x16: 1.93 ->
1.65 ms on one thread, 1.61 -> 1.31 ms on two). A single image, or too few to share
out over the threads, keeps each pass split over them (a 1x3 kernel), or is cut into
bands of tile rows (a 3x3 kernel, ``_bands``). All give the same bits. There,
a 3x3 kernel's tiles are computed with a vector's lanes over 16 channels (the pixels
transposed once per channel block), not over a row's few tiles: the forward 1.41 ->
1.07 ms for that layer (docs/design.md), the same bits.

It replaces im2col (whose 9 copies of the input become a 4x one) and 2.25x of the
multiply-adds. Its rounding differs from the direct sum by a few units in the last
place of the largest terms (the transforms add and subtract before multiplying):
relative errors of 1e-7 to 1e-6 against a float64 reference, as im2col's.

A 1x3 kernel (a 1-D convolution is one of height 1) uses F(4, 3) along each row
in the same way: 6 positions per tile of 4 outputs, 2x fewer multiply-adds than
im2col's product (F(2, 3)'s 4 per 2 outputs: 1.5x). Its rounding is a few times
F(2, 3)'s: about 2e-6 of the output's scale against float64 (64-256 channels).

The kernel gradient comes the same way (``kernel_grad``): the forward is linear in
``U``, so ``dk = G^T dU G`` with ``dU[xi] = W[xi] (c_out, tiles) @ V[xi]^T``, ``W = A dY
A^T`` the output gradient's tiles through the adjoint of the output transform: 2.25x
fewer multiply-adds than im2col's product (a 64->64 layer's kernel gradient, batch 8
of 16x16: 1.9 ms against 3.7 ms).

Used (``applies``) for f32 with the C extension, groups 1, dilation 1, at least
``MIN_CHANNELS`` input and output channels (fewer go to the direct kernel) and at
least ``MIN_TILES`` output tiles: the kernel transform costs c_out * c_in * 16
values per call, which a small image (a 256-channel 7x7 layer has 16 tiles) does
not earn back. The transposed convolution with stride 1 (a stride-1 convolution's
input gradient) is a convolution with the flipped kernel, so it comes here too.
"""

from __future__ import annotations

import math

import numpy as np

from . import gemm, parallel
from .native_module import NativeModule
from .threads import CONFIG

MIN_CHANNELS = 16
MIN_TILES = 64

# native/_winograd when it is built and the compiled kernels are not switched off
# (TALLOW_NO_NATIVE), else None (im2col serves).
_module = NativeModule("_winograd")


def _tiles(oh, ow):
    return (oh + 1) // 2, (ow + 1) // 2


# F(4, 3) for 1x3 kernels: tiles of 4 outputs along a row, 6 positions
ROW_POSITIONS = 6


def _row_tiles(ow):
    return (ow + 3) // 4


def _row_kernel(k_shape, pad) -> bool:
    """A 1x3 kernel without padding rows (a 1-D convolution): F(4, 3) along each row."""
    return k_shape[2:] == (1, 3) and pad[0] == 0


def _fits(x, k_shape, pad, stride, dil, groups):
    """The output size (oh, ow) of the convolution of ``x`` (b, c, h, w) with a kernel of
    ``k_shape`` when it runs here (3x3 kernels, and 1x3 ones without row padding), else
    None."""
    if (x.dtype != np.float32 or stride != (1, 1) or dil != (1, 1) or groups != 1
            or not (k_shape[2:] == (3, 3) or _row_kernel(k_shape, pad))):
        return None
    b, c, h, w = x.shape
    if c < MIN_CHANNELS or k_shape[0] < MIN_CHANNELS:
        return None
    oh, ow = h + 2 * pad[0] - k_shape[2] + 1, w + 2 * pad[1] - 2
    if oh < 1 or ow < 1:
        return None
    th, tw = (oh, _row_tiles(ow)) if k_shape[2] == 1 else _tiles(oh, ow)
    if b * th * tw < MIN_TILES or _module() is None:
        return None
    return oh, ow


def applies(x, k, pad, stride, dil, groups) -> bool:
    """Whether the convolution of ``x`` (b, c, h, w) with ``k`` (c_out, c, kh, kw) runs here:
    3x3 kernels, and 1x3 ones without row padding (a 1-D convolution)."""
    return k.dtype == np.float32 and _fits(x, k.shape, pad, stride, dil, groups) is not None


def applies_to_kernel_grad(x, g, k_shape, pad, stride, dil, groups) -> bool:
    """Whether the kernel gradient of that convolution from its output gradient ``g``
    (b, c_out, oh, ow) runs here (``kernel_grad``)."""
    return g.dtype == np.float32 and _fits(x, k_shape, pad, stride, dil, groups) == g.shape[2:]


# Non-finite values: the transforms mix a tile's values before multiplying, so an
# infinity in the input or the kernel would come out as NaNs over its tiles (where a
# direct sum gives infinities at the outputs it reaches) and a NaN would spread over
# them. Such convolutions take another path. A non-finite input always leaves a
# non-finite value in the transforms' result (sums and products keep infinities and
# NaNs), so the forward checks its output, in the cache and often smaller than the
# input and kernel (a 256x256 kernel is 2.4 MB); the kernel gradient checks its inputs.


def conv2d(x, k, pad, flipped=False):
    """``x`` (b, c, h, w) convolved with ``k`` (c_out, c, 3, 3) or (c_out, c, 1, 3),
    stride 1, ``pad`` (rows, columns) zeros around each image; f32 arrays, ``applies``
    checked. ``flipped``: ``k`` is (c, c_out, kh, kw) and ``x`` is convolved with its
    transpose flipped along both axes (a stride-1 transposed convolution), whose
    transform is ``k``'s with the positions permuted: no flipped copy is made.
    None when ``x`` or ``k`` holds an infinity or a NaN, or the result overflowed (see
    above): the caller takes another path."""
    mod = _module()
    y = _conv2d(mod, x, k, pad, flipped)
    return y if mod.all_finite(y) else None


def _conv2d(mod, x, k, pad, flipped):
    """``conv2d``'s result, whatever values it holds."""
    b, c, h, w = x.shape
    co = k.shape[1] if flipped else k.shape[0]
    x, k = np.ascontiguousarray(x), np.ascontiguousarray(k)
    # (k's own channel counts: the flipped kernel's U is k's U^T with its positions permuted)
    kco, kci, flip = (c, co, 1) if flipped else (co, c, 0)
    transform, transform_t = ((mod.kernel_transform_t, mod.kernel_transform) if flipped
                              else (mod.kernel_transform, mod.kernel_transform_t))
    if k.shape[2] == 1:  # 1x3: F(4, 3), tiles of one row
        ow = w + 2 * pad[1] - 2
        tw = _row_tiles(ow)
        u = np.empty((ROW_POSITIONS, co, c), np.float32)
        if flipped:  # (6, co, c) from k (c, co, 1, 3), read as its transpose
            mod.kernel_transform_row(k, u, co, c, 1, 1)
        else:
            mod.kernel_transform_row(k, u, co, c)
        y = np.empty((b, co, h, ow), np.float32)
        if _by_images(b):
            mod.conv_row(x, u, y, b, c, co, h, w, pad[1], tw)
            return y
        v = np.empty((ROW_POSITIONS, c, b * h * tw), np.float32)
        mod.input_transform_row(x, v, b, c, h, w, pad[1], tw)
        mod.output_transform_row(gemm.matmul(u, v), y, b, co, h, ow, tw)
        return y
    oh, ow = h + 2 * pad[0] - 2, w + 2 * pad[1] - 2
    th, tw = _tiles(oh, ow)
    y = np.empty((b, co, oh, ow), np.float32)
    groups = _groups(b, th * tw, co)
    if groups:  # the kernel's transform in each thread's group of output channels
        mod.conv_groups(x, k, y, b, c, co, h, w, pad[0], pad[1], th, tw, groups, flip)
        return y
    bands = _bands(b, th)
    if bands:  # the channel-lane form: its products read U^T, rows contiguous
        ut = np.empty((16, c, co), np.float32)
        transform_t(k, ut, kco, kci, flip)
        mod.conv(x, ut, y, b, c, co, h, w, pad[0], pad[1], th, tw, bands)
        return y
    u = np.empty((16, co, c), np.float32)
    transform(k, u, kco, kci, flip)
    v = np.empty((16, c, b * th * tw), np.float32)
    mod.input_transform(x, v, b, c, h, w, pad[0], pad[1], th, tw)
    mod.output_transform(gemm.matmul(u, v), y, b, co, oh, ow, th, tw)
    return y


# The kernel gradient of a batch sums its images in this many parts at most (one task
# each, added in order at the end): the count follows the batch alone, so the bits do
# not depend on the threads; a part's own sum costs c_out * c_in * 16 floats.
KERNEL_GRAD_PARTS = 4


def _kernel_grad_parts(batch: int) -> int:
    """How many parts the kernel gradient's sums over the images are cut into (each
    summed a few images at a time, its transforms in the cache), or 0 for one image:
    its product over the tiles keeps the split over the threads."""
    if batch < 2 or not gemm.native_available():  # (the parts' products are the kernel's)
        return 0
    return min(batch, KERNEL_GRAD_PARTS)


def _by_images(batch: int) -> bool:
    """Whether a forward pass runs its three passes a few images at a time, one chunk of
    images per thread (``native conv``), rather than each pass split over the threads:
    on one thread always (the tiles of a few images stay in the cache between the
    passes), and on more when the images share out evenly enough (at least two per
    thread, or a multiple of the threads); a single image, or too few, keeps the split
    passes with a 1x3 kernel and runs in bands of tile rows with a 3x3 one
    (``_bands``). All give the same bits. Not with the f32 kernel switched off
    (``TALLOW_NO_NATIVE_GEMM``): its products are the kernel's."""
    if not gemm.native_available():  # its products are the f32 kernel's
        return False
    threads = CONFIG.get()
    return threads <= 1 or batch >= 2 * threads or batch % threads == 0


def _bands(batch: int, th: int) -> int:
    """Bands of tile rows per image for a 3x3 kernel's ``native conv``: 1 when whole
    images share out over the threads (``_by_images``), else enough that the units
    (images x bands) share out evenly, ``threads / gcd(batch, threads)``, at most ``th``:
    a single image on two threads as two bands (128->128 at 16x16, ``conv`` alone: 0.34
    ms as one unit, 0.20 ms as two bands; 256->256 at 14x14 1.05 -> 0.66 ms). Every
    tile is computed on its own and each product element is the same chain over the
    input channels, so the bands do not change the bits. 0 (each pass split over the
    threads instead) with the f32 kernel switched off: ``conv``'s products are its."""
    if not gemm.native_available():
        return 0
    if _by_images(batch):
        return 1
    threads = CONFIG.get()
    return max(1, min(th, threads // math.gcd(batch, threads)))


def _groups(batch: int, tiles: int, co: int) -> int:
    """Groups of output channels for a single image's 3x3 ``native conv_groups`` on
    several threads (each thread transforming and multiplying by its own columns of
    U, both transforming the input), or 0 (bands of tile rows, ``_bands``): when the
    image has at most as many tiles as output channels, the kernel's transform
    outweighs the input's. Two threads, against bands: 128->128 at 16x16 0.75x the
    time, 256->256 at 14x14 0.62x, 64->64 at 16x16 0.82x; 64->64 at 32x32 (256 tiles)
    1.13x, 32->32 at 32x32 1.49x. The same bits either way. Not inside
    ``parallel.serial()`` (the groups would run one after the other, each
    transforming the input again)."""
    if batch != 1 or not gemm.native_available() or parallel.in_serial():
        return 0
    threads = CONFIG.get()
    if threads <= 1 or co < tiles:
        return 0
    return min(threads, -(-co // 16))


def kernel_grad(x, g, k_shape, pad):
    """The kernel gradient of ``conv2d(x, k, pad)`` (``applies`` checked for it) from
    the output gradient ``g`` (b, c_out, oh, ow): the forward is linear in ``U = G k
    G^T``, so ``dk = G^T dU G`` with ``dU[xi] = W[xi] (c_out, T) @ V[xi]^T (T, c_in)``,
    ``W = A dY A^T`` per tile and ``V`` the forward's input transform. None when ``x``
    or ``g`` holds an infinity or a NaN (see above)."""
    mod = _module()
    b, c, h, w = x.shape
    co = k_shape[0]
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
    if not (mod.all_finite(x) and mod.all_finite(g)):
        return None
    dk = np.empty(k_shape, np.float32)
    parts = _kernel_grad_parts(b)
    if k_shape[2] == 1:  # 1x3: tiles of one row
        ow = g.shape[3]
        tw = _row_tiles(ow)
        if parts:
            du = np.empty((parts, ROW_POSITIONS, co, c), np.float32)
            mod.kernel_grad_parts_row(x, g, du, parts, b, c, co, h, w, pad[1], tw)
            mod.kernel_grad_transform_row(du[0], dk, co, c)
            return dk
        v = np.empty((ROW_POSITIONS, c, b * h * tw), np.float32)
        mod.input_transform_row(x, v, b, c, h, w, pad[1], tw)
        wg = np.empty((ROW_POSITIONS, co, b * h * tw), np.float32)
        mod.grad_transform_row(g, wg, b, co, h, ow, tw)
        mod.kernel_grad_transform_row(gemm.matmul(wg, v.transpose(0, 2, 1)), dk, co, c)
        return dk
    oh, ow = g.shape[2:]
    th, tw = _tiles(oh, ow)
    if parts:
        du = np.empty((parts, 16, co, c), np.float32)
        mod.kernel_grad_parts(x, g, du, parts, b, c, co, h, w, pad[0], pad[1], th, tw)
        mod.kernel_grad_transform(du[0], dk, co, c)
        return dk
    v = np.empty((16, c, b * th * tw), np.float32)
    mod.input_transform(x, v, b, c, h, w, pad[0], pad[1], th, tw)
    wg = np.empty((16, co, b * th * tw), np.float32)
    mod.grad_transform(g, wg, b, co, oh, ow, th, tw)
    mod.kernel_grad_transform(gemm.matmul(wg, v.transpose(0, 2, 1)), dk, co, c)
    return dk

