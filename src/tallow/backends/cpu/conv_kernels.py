"""The numba kernels of :mod:`tallow.backends.cpu.conv` (imported only when used).

Module-level functions, so that numba's on-disk cache (``cache=True``) finds them
again in a new process. Each is one pass over the data and releases the GIL
(``nogil``), so the caller may run disjoint batch ranges ``[b0, b1)`` on several
threads at once. The NumPy paths in ``conv.py`` serve where numba is missing or
``TALLOW_NO_NUMBA`` is set.

im2col/col2im address their column buffer through a flat array and two strides
(per image, per row), so one compiled kernel writes either layout the caller
wants: ``(batch, rows, positions)`` for one product per image, or
``(rows, batch, positions)`` for a single product over the whole batch. Padding
is never materialised: out-of-image taps are written as zeros (im2col) or
skipped (col2im).
"""

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _valid_cols(off, sw, w, ow):
    """The output columns ``j`` in [j0, j1) whose input column ``j * sw + off`` lies in [0, w)."""
    j0 = 0 if off >= 0 else (sw - 1 - off) // sw
    last = w - 1 - off
    j1 = last // sw + 1 if last >= 0 else 0
    if j1 > ow:
        j1 = ow
    if j0 > j1:
        j0 = j1
    return j0, j1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def im2col(x, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, cols, sb, sr, b0, b1):
    """cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*ow + j] = x[b, c, i*sh - ph + ki*dh, j*sw - pw + kj*dw]
    (zero outside the image), for images b in [b0, b1); ``x`` is C-contiguous."""
    _, nc, h, w = x.shape
    for b in range(b0, b1):
        for c in range(nc):
            for ki in range(kh):
                for kj in range(kw):
                    base = b * sb + ((c * kh + ki) * kw + kj) * sr
                    off = kj * dw - pw
                    j0, j1 = _valid_cols(off, sw, w, ow)
                    for i in range(oh):
                        row = i * sh - ph + ki * dh
                        o = base + i * ow
                        if row < 0 or row >= h:
                            for j in range(ow):
                                cols[o + j] = 0
                            continue
                        for j in range(j0):
                            cols[o + j] = 0
                        if sw == 1:
                            for j in range(j0, j1):
                                cols[o + j] = x[b, c, row, j + off]
                        else:
                            for j in range(j0, j1):
                                cols[o + j] = x[b, c, row, j * sw + off]
                        for j in range(j1, ow):
                            cols[o + j] = 0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def col2im(cols, sb, sr, kh, kw, sh, sw, ph, pw, dh, dw, ih, iw, out, b0, b1):
    """The adjoint of :func:`im2col`: out[b, c, i*sh - ph + ki*dh, j*sw - pw + kj*dw] +=
    cols[b*sb + ((c*kh + ki)*kw + kj)*sr + i*iw + j] for every in-image position,
    over an ``ih`` x ``iw`` grid of columns; ``out`` is C-contiguous and pre-filled."""
    _, nc, h, w = out.shape
    for b in range(b0, b1):
        for c in range(nc):
            for ki in range(kh):
                for kj in range(kw):
                    base = b * sb + ((c * kh + ki) * kw + kj) * sr
                    off = kj * dw - pw
                    j0, j1 = _valid_cols(off, sw, w, iw)
                    for i in range(ih):
                        row = i * sh - ph + ki * dh
                        if row < 0 or row >= h:
                            continue
                        o = base + i * iw
                        if sw == 1:
                            for j in range(j0, j1):
                                out[b, c, row, j + off] += cols[o + j]
                        else:
                            for j in range(j0, j1):
                                out[b, c, row, j * sw + off] += cols[o + j]


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
    arg = np.empty(ow, np.int64)
    for b in range(b0, b1):
        for c in range(nc):
            dst = flat[b * nc + c]
            for i in range(oh):
                r0 = i * sh
                xrow = x[b, c, r0]
                for j in range(ow):
                    best[j] = xrow[j * sw]
                    arg[j] = r0 * w + j * sw
                for di in range(kh):
                    xrow = x[b, c, r0 + di]
                    for dj in range(kw):
                        if di == 0 and dj == 0:
                            continue
                        at = (r0 + di) * w + dj
                        for j in range(ow):
                            v = xrow[j * sw + dj]
                            o = best[j]
                            take = (v > o) | (v != v)
                            best[j] = v if take else o
                            arg[j] = at + j * sw if take else arg[j]
                grow = g[b, c, i]
                for j in range(ow):
                    dst[arg[j]] += grow[j]


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
