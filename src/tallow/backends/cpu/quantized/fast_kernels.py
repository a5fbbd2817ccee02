"""The numba kernels of :mod:`tallow.backends.cpu.quantized.fast` (imported only when they are used).

Module-level functions, so that numba's on-disk cache (``cache=True``) finds
them again in a new process.  See :mod:`fast` for the layout and the
arithmetic.
"""

import numba
import numpy as np


# The integer sums: products and sums of small integers, exact in f32 in any
# order, so multiply-adds may be fused ("contract") without changing a bit.
exact = dict(nogil=True, cache=True, boundscheck=False, fastmath={"contract"})


# Each takes one block of one tile: w (B, J) or its packed (B/2, J) bytes, the
# activation block x (B,) or four rows of it x (4, B), and writes s (J,) or (4, J).
@numba.njit(**exact)
def sums4(w, x, lo, hi, s):
    # s[r, j] = sum_{t in [lo, hi)} w[t, j] * x[r, t], r < 4
    jw = w.shape[1]
    for r in range(4):
        for j in range(jw):
            s[r, j] = 0.0
    for t in range(lo, hi, 2):
        a0 = x[0, t]
        b0 = x[0, t + 1]
        a1 = x[1, t]
        b1 = x[1, t + 1]
        a2 = x[2, t]
        b2 = x[2, t + 1]
        a3 = x[3, t]
        b3 = x[3, t + 1]
        for j in range(jw):
            u = np.float32(w[t, j])
            v = np.float32(w[t + 1, j])
            s[0, j] += u * a0 + v * b0
            s[1, j] += u * a1 + v * b1
            s[2, j] += u * a2 + v * b2
            s[3, j] += u * a3 + v * b3


@numba.njit(**exact)
def sums1(w, x, lo, hi, s):
    # s[j] = sum_{t in [lo, hi)} w[t, j] * x[t]
    jw = w.shape[1]
    for j in range(jw):
        s[j] = 0.0
    for t in range(lo, hi, 8):
        x0 = x[t]
        x1 = x[t + 1]
        x2 = x[t + 2]
        x3 = x[t + 3]
        x4 = x[t + 4]
        x5 = x[t + 5]
        x6 = x[t + 6]
        x7 = x[t + 7]
        for j in range(jw):
            s[j] += (((np.float32(w[t, j]) * x0 + np.float32(w[t + 1, j]) * x1)
                      + (np.float32(w[t + 2, j]) * x2 + np.float32(w[t + 3, j]) * x3))
                     + ((np.float32(w[t + 4, j]) * x4 + np.float32(w[t + 5, j]) * x5)
                        + (np.float32(w[t + 6, j]) * x6 + np.float32(w[t + 7, j]) * x7)))


@numba.njit(**exact)
def sums4p(w, x, lo, hi, s):
    # sums4 over nibble-packed values: byte [u, j] holds t = 2u (low) and 2u + 1 (high)
    jw = w.shape[1]
    for r in range(4):
        for j in range(jw):
            s[r, j] = 0.0
    for t in range(lo, hi, 2):
        a0 = x[0, t]
        b0 = x[0, t + 1]
        a1 = x[1, t]
        b1 = x[1, t + 1]
        a2 = x[2, t]
        b2 = x[2, t + 1]
        a3 = x[3, t]
        b3 = x[3, t + 1]
        u2 = t // 2
        for j in range(jw):
            p = w[u2, j]
            u = np.float32(p & 15)
            v = np.float32(p >> 4)
            s[0, j] += u * a0 + v * b0
            s[1, j] += u * a1 + v * b1
            s[2, j] += u * a2 + v * b2
            s[3, j] += u * a3 + v * b3


@numba.njit(**exact)
def sums1p(w, x, lo, hi, s):
    jw = w.shape[1]
    for j in range(jw):
        s[j] = 0.0
    for t in range(lo, hi, 8):
        x0 = x[t]
        x1 = x[t + 1]
        x2 = x[t + 2]
        x3 = x[t + 3]
        x4 = x[t + 4]
        x5 = x[t + 5]
        x6 = x[t + 6]
        x7 = x[t + 7]
        u2 = t // 2
        for j in range(jw):
            p0 = w[u2, j]
            p1 = w[u2 + 1, j]
            p2 = w[u2 + 2, j]
            p3 = w[u2 + 3, j]
            s[j] += (((np.float32(p0 & 15) * x0 + np.float32(p0 >> 4) * x1)
                      + (np.float32(p1 & 15) * x2 + np.float32(p1 >> 4) * x3))
                     + ((np.float32(p2 & 15) * x4 + np.float32(p2 >> 4) * x5)
                        + (np.float32(p3 & 15) * x6 + np.float32(p3 >> 4) * x7)))


# The scaled terms: ggml's float operations in ggml's order (no fast-math at all).
@numba.njit(nogil=True, cache=True, boundscheck=False)
def qmm_tiles(wq, wp, zero, wsc, wd, wmin, wdmin, wm, xf, xd, xs, xsum, xms, mode, sub, out, t0, t1):
    # wq (T, nb, B, J) int8   weights' small integers, J rows side by side, or
    # wp (T, nb, B/2, J) uint8  the same 4-bit values two per byte (wq then empty);
    #                         zero: subtracted from each value (8 for Q4_0), via xsum
    # wsc (T, nb, nsub, J) int8  sub-block integer scales (nsub 0: none)
    # wd (T, nb, J) f32       block scales;  wdmin: K-quant minimum scales
    # wmin (T, nb, nmin, J) int8  integer minimums (nmin 0: none)
    # wm (T, nb, J) f32       Q4_1/Q5_1 block minimums
    # xf (m, nb, B) f32       activation integers;  xd (m, nb) their scales
    # xs (m, nb) f32          Q8_1 block sums s;  xms (m, nb, nmin) f32 integer partial sums
    packed = wp.shape[2] > 0
    if packed:
        _t, nb, half, jw = wp.shape
        bs = 2 * half
    else:
        _t, nb, bs, jw = wq.shape
    m = xf.shape[0]
    nsub = wsc.shape[2]
    nmin = wmin.shape[2]
    step = bs // nsub if nsub > 0 else sub
    s = np.empty((4, jw), np.float32)
    isum = np.empty((4, jw), np.int32)
    msum = np.empty(jw, np.int32)
    res = np.empty((m, jw), np.float32)
    for tile in range(t0, t1):
        w = wq[tile]
        wpt = wp[tile]
        sc = wsc[tile]
        d = wd[tile]
        mn = wmin[tile]
        dm = wdmin[tile]
        mw = wm[tile]
        res[:, :] = 0.0
        for b in range(nb):
            for i0 in range(0, m, 4):
                nr = min(4, m - i0)
                isum[:, :] = 0
                for sb in range(bs // step):
                    lo = sb * step
                    if packed:
                        if nr == 4:
                            sums4p(wpt[b], xf[i0:i0 + 4, b], lo, lo + step, s)
                        else:
                            for r in range(nr):
                                sums1p(wpt[b], xf[i0 + r, b], lo, lo + step, s[r])
                    elif nr == 4:
                        sums4(w[b], xf[i0:i0 + 4, b], lo, lo + step, s)
                    else:
                        for r in range(nr):
                            sums1(w[b], xf[i0 + r, b], lo, lo + step, s[r])
                    for r in range(nr):
                        if nsub > 0:
                            for j in range(jw):
                                isum[r, j] += np.int32(s[r, j]) * np.int32(sc[b, sb, j])
                        else:
                            for j in range(jw):
                                isum[r, j] += np.int32(s[r, j])
                if zero != 0:
                    for r in range(nr):
                        zx = np.int32(zero) * np.int32(xsum[i0 + r, b])
                        for j in range(jw):
                            isum[r, j] -= zx
                for r in range(nr):
                    i = i0 + r
                    dx = xd[i, b]
                    if mode == 0:
                        for j in range(jw):
                            res[i, j] += (np.float32(isum[r, j]) * d[b, j]) * dx
                    elif mode == 1:
                        sx = xs[i, b]
                        for j in range(jw):
                            res[i, j] += ((np.float32(isum[r, j]) * d[b, j]) * dx) + mw[b, j] * sx
                    elif mode == 2:
                        for j in range(jw):
                            res[i, j] += (d[b, j] * dx) * np.float32(isum[r, j])
                    else:
                        msum[:] = 0
                        for u in range(nmin):
                            xu = np.int32(xms[i, b, u])
                            for j in range(jw):
                                msum[j] += np.int32(mn[b, u, j]) * xu
                        for j in range(jw):
                            res[i, j] += ((d[b, j] * dx) * np.float32(isum[r, j])
                                          - (dm[b, j] * dx) * np.float32(msum[j]))
        for i in range(m):
            for j in range(jw):
                out[i, tile * jw + j] = res[i, j]


# Activation rows to a dot type, with the float operations of the NumPy codecs
# (legacy.q8_0_quantize_activations / kquants.q8k_quantize, after ggml's x86
# quantize_row_q8_0 and quantize_row_q8_K_ref: ties round half to even), so the
# integers are the same.
@numba.njit(nogil=True, cache=True, boundscheck=False)
def quantize_rows(x, kind, xf, xd, xsum, xbs):
    # x (m, nb, B) f32.  kind 0 (Q8_0/Q8_1, B 32): xd = amax / 127 before its f16
    # rounding.  kind 1 (Q8K, B 256): xd = d, xbs = the sixteen bsums.  Both:
    # xsum = the sum of the block's integers.  Returns False on a non-finite input (the caller
    # then uses the NumPy codec, which defines those cases).
    m, nb, bs = x.shape
    for i in range(m):
        for b in range(nb):
            if kind == 0:
                amax = np.float32(0.0)
                for t in range(bs):
                    a = abs(x[i, b, t])
                    if not (a <= np.float32(3.4028235e38)):
                        return False
                    if a > amax:
                        amax = a
                d = amax / np.float32(127.0)
                inv = np.float32(0.0) if d == 0 else np.float32(1.0) / d
                total = 0
                for t in range(bs):
                    q = np.float32(np.rint(x[i, b, t] * inv))
                    xf[i, b, t] = q
                    total += np.int32(q)
                xd[i, b] = d
                xsum[i, b] = total
            else:
                amax = np.float32(0.0)
                mx = np.float32(0.0)
                for t in range(bs):
                    v = x[i, b, t]
                    a = abs(v)
                    if not (a <= np.float32(3.4028235e38)):
                        return False
                    if a > amax:
                        amax = a
                        mx = v
                if mx == 0:
                    for t in range(bs):
                        xf[i, b, t] = 0.0
                    xd[i, b] = 0.0
                else:
                    iscale = np.float32(-127.0) / mx
                    for t in range(bs):
                        # ggml's quantize_row_q8_K_ref: nearest_int rounds half to even
                        q = np.float32(np.rint(iscale * x[i, b, t]))
                        q = min(max(q, np.float32(-128.0)), np.float32(127.0))
                        xf[i, b, t] = q
                    xd[i, b] = np.float32(1.0) / iscale
                total = 0
                for u in range(bs // 16):
                    acc = 0
                    for t in range(16 * u, 16 * u + 16):
                        acc += np.int32(xf[i, b, t])
                    xbs[i, b, u] = acc
                    total += acc
                xsum[i, b] = total
    return True
