"""The numba kernels of :mod:`tallow.backends.cpu.conv` (imported only when used).

Module-level functions, so that numba's on-disk cache (``cache=True``) finds them
again in a new process. Each is one pass over the data and releases the GIL
(``nogil``), so the caller may run disjoint batch ranges ``[b0, b1)`` on several
threads at once. The NumPy paths in ``conv.py`` serve where numba is missing or
``TALLOW_NO_NUMBA`` is set.

im2col/col2im address their column buffer through a flat array and two strides
(per image, per row), so one compiled kernel writes either layout the caller
wants: ``(batch, rows, positions)`` for one product per image, or
``(rows, batch, positions)`` for a single product over the whole batch. They
work on a padded copy of the image (im2col) or a padded output that the caller
crops (col2im): one copy of an image costs far less than bounds arithmetic in
every copied row.
"""

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, boundscheck=False)
def im2col(xp, nc, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, cols, sb, sr, b0, b1):
    """cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*ow + j] = xp[b, c, i*sh + ki*dh, j*sw + kj*dw]
    for images b in [b0, b1); ``xp`` is the (already padded) input, flat, of images
    ``nc`` x ``hp`` x ``wp``.

    Flat arrays and one row slice per copied row: indexing a 4-D array element by
    element (or computing the in-image columns of a padded row) cost 3-5x this copy.
    """
    for b in range(b0, b1):
        for c in range(nc):
            for ki in range(kh):
                for kj in range(kw):
                    src0 = ((b * nc + c) * hp + ki * dh) * wp + kj * dw
                    dst0 = b * sb + ((c * kh + ki) * kw + kj) * sr
                    for i in range(oh):
                        s = src0 + i * sh * wp
                        src = xp[s:s + (ow - 1) * sw + 1]
                        dst = cols[dst0 + i * ow:dst0 + (i + 1) * ow]
                        if sw == 1:
                            for j in range(ow):
                                dst[j] = src[j]
                        else:
                            for j in range(ow):
                                dst[j] = src[j * sw]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def col2im(cols, sb, sr, nc, hp, wp, kh, kw, sh, sw, dh, dw, ih, iw, outp, b0, b1):
    """The adjoint of :func:`im2col`: outp[b, c, i*sh + ki*dh, j*sw + kj*dw] +=
    cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*iw + j] over an ``ih`` x ``iw`` grid of
    columns; ``outp`` is the padded output (flat, pre-filled), which the caller crops."""
    for b in range(b0, b1):
        for c in range(nc):
            for ki in range(kh):
                for kj in range(kw):
                    dst0 = ((b * nc + c) * hp + ki * dh) * wp + kj * dw
                    src0 = b * sb + ((c * kh + ki) * kw + kj) * sr
                    for i in range(ih):
                        d = dst0 + i * sh * wp
                        dst = outp[d:d + (iw - 1) * sw + 1]
                        src = cols[src0 + i * iw:src0 + (i + 1) * iw]
                        if sw == 1:
                            for j in range(iw):
                                dst[j] += src[j]
                        else:
                            for j in range(iw):
                                dst[j * sw] += src[j]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def max_pool2d(x, kh, kw, sh, sw, out, b0, b1):
    """out[b, c, i, j] = max of the window; a NaN in the window wins, as in PyTorch.

    Tap by tap over a whole output row, with a select instead of a branch: on real
    data "is this tap larger?" is a coin toss, and a mispredicted branch per tap cost
    several times the comparison itself.
    """
    _, nc, oh, ow = out.shape
    for b in range(b0, b1):
        for c in range(nc):
            for i in range(oh):
                r0 = i * sh
                orow = out[b, c, i]
                xrow = x[b, c, r0]
                for j in range(ow):
                    orow[j] = xrow[j * sw]
                for di in range(kh):
                    xrow = x[b, c, r0 + di]
                    for dj in range(kw):
                        if di == 0 and dj == 0:
                            continue
                        for j in range(ow):
                            v = xrow[j * sw + dj]
                            o = orow[j]
                            orow[j] = v if (v > o) | (v != v) else o


@numba.njit(nogil=True, cache=True, boundscheck=False)
def avg_pool2d(x, kh, kw, sh, sw, scale, out, b0, b1):
    """out[b, c, i, j] = scale * sum of the window (scale = 1 / window size)."""
    _, nc, oh, ow = out.shape
    for b in range(b0, b1):
        for c in range(nc):
            for i in range(oh):
                for j in range(ow):
                    r0 = i * sh
                    c0 = j * sw
                    acc = scale * 0  # zero in the kernel's own float type
                    for di in range(kh):
                        for dj in range(kw):
                            acc += x[b, c, r0 + di, c0 + dj]
                    out[b, c, i, j] = acc * scale


@numba.njit(nogil=True, cache=True, boundscheck=False)
def max_pool2d_backward(x, g, kh, kw, sh, sw, gx, b0, b1):
    """gx[first max of each window] += g[window]; the first maximum, or the last NaN, as
    PyTorch picks. The arg-max of a whole output row is found tap by tap with selects
    (see :func:`max_pool2d`), then the row's gradients are routed."""
    nb, nc, oh, ow = g.shape
    h, w = x.shape[2], x.shape[3]
    flat = gx.reshape(nb * nc, h * w)
    best = np.empty(ow, x.dtype)
    # The winning tap's index, 32 bits wide like an f32 lane, so that the selects of
    # value and index vectorise together.
    tap = np.empty(ow, np.int32)
    for b in range(b0, b1):
        for c in range(nc):
            dst = flat[b * nc + c]
            for i in range(oh):
                r0 = i * sh
                xrow = x[b, c, r0]
                for j in range(ow):
                    best[j] = xrow[j * sw]
                    tap[j] = 0
                for di in range(kh):
                    xrow = x[b, c, r0 + di]
                    for dj in range(kw):
                        if di == 0 and dj == 0:
                            continue
                        t = np.int32(di * kw + dj)
                        for j in range(ow):
                            v = xrow[j * sw + dj]
                            o = best[j]
                            take = (v > o) | (v != v)
                            best[j] = v if take else o
                            tap[j] = t if take else tap[j]
                grow = g[b, c, i]
                for j in range(ow):
                    t = tap[j]
                    dst[(r0 + t // kw) * w + j * sw + t % kw] += grow[j]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def avg_pool2d_backward(g, kh, kw, sh, sw, scale, gx, b0, b1):
    """gx[every position of a window] += scale * g[window]; ``gx`` pre-filled with zeros."""
    _, nc, oh, ow = g.shape
    for b in range(b0, b1):
        for c in range(nc):
            for i in range(oh):
                for j in range(ow):
                    v = g[b, c, i, j] * scale
                    r0 = i * sh
                    c0 = j * sw
                    for di in range(kh):
                        for dj in range(kw):
                            gx[b, c, r0 + di, c0 + dj] += v
