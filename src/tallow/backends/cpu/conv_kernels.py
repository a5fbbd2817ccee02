"""The numba kernels of :mod:`tallow.backends.cpu.conv` (imported only when used).

Module-level functions, so that numba's on-disk cache (``cache=True``) finds them
again in a new process. Each is one pass over the data; the NumPy paths in
``conv.py`` serve where numba is missing or ``TALLOW_NO_NUMBA`` is set.
"""

import numba


@numba.njit(nogil=True, cache=True, boundscheck=False)
def max_pool2d_backward(x, g, kh, kw, sh, sw, gx):
    """gx[first max of each window] += g[window]; the first maximum, or the last NaN, as PyTorch picks."""
    nb, nc, oh, ow = g.shape
    for b in range(nb):
        for c in range(nc):
            for i in range(oh):
                for j in range(ow):
                    r0 = i * sh
                    c0 = j * sw
                    best = x[b, c, r0, c0]
                    bi = r0
                    bj = c0
                    for di in range(kh):
                        for dj in range(kw):
                            v = x[b, c, r0 + di, c0 + dj]
                            if v > best or v != v:
                                best = v
                                bi = r0 + di
                                bj = c0 + dj
                    gx[b, c, bi, bj] += g[b, c, i, j]
