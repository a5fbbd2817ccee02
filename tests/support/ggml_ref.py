"""Slow scalar ports of ggml's reference quantization routines, used as test oracles.

Line-by-line transcriptions of ``ggml-quants.c`` (``nearest_int``,
``make_qkx2_quants``, ``make_qx_quants`` with ``rmse_type`` 1 and no
importance weights, ``make_q3_quants``, ``quantize_row_q8_1_ref``,
``quantize_row_q8_K_ref``): one sub-block at a time, one element at a time,
every float an ``np.float32`` scalar so each operation rounds like C's
float.  They check the library's vectorised searches float bit for float
bit on many inputs; the bytes themselves are checked against ggml's own
output in ``test_ggml_golden.py``.
"""

from __future__ import annotations

import struct

import numpy as np

f32 = np.float32
GROUP_MAX_EPS = f32(1e-15)


def nearest_int(v) -> int:
    """``fval + 12582912.f`` in float, then the low 23 bits minus 2**22 (round half to even)."""
    with np.errstate(all="ignore"):
        val = f32(f32(v) + f32(12582912.0))
    bits = int(np.array(val, dtype=f32).view(np.int32))
    return (bits & 0x007FFFFF) - 0x00400000


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def h(v) -> f32:
    return f32(np.float16(f32(v)))


def h_bytes(v) -> bytes:
    return np.float16(f32(v)).tobytes()


def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep, use_mad):
    """Returns (scale, the_min, L)."""
    x = [f32(v) for v in x]
    w = [f32(v) for v in weights]
    L = [0] * n
    mn, mx = x[0], x[0]
    sum_w = w[0]
    sum_x = f32(sum_w * x[0])
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        sum_w = f32(sum_w + w[i])
        sum_x = f32(sum_x + f32(w[i] * x[i]))
    if mn > 0:
        mn = f32(0)
    if mx == mn:
        return f32(0), f32(-mn), [0] * n
    iscale = f32(f32(nmax) / f32(mx - mn))
    scale = f32(f32(1) / iscale)
    best_error = f32(0)
    for i in range(n):
        L[i] = clamp(nearest_int(f32(iscale * f32(x[i] - mn))), 0, nmax)
        diff = f32(f32(f32(scale * f32(L[i])) + mn) - x[i])
        diff = abs(diff) if use_mad else f32(diff * diff)
        best_error = f32(best_error + f32(w[i] * diff))
    for step in range(nstep + 1):
        iscale = f32(f32(f32(f32(rmin) + f32(f32(rdelta) * f32(step))) + f32(nmax)) / f32(mx - mn))
        aux = [0] * n
        sum_l = sum_l2 = sum_xl = f32(0)
        for i in range(n):
            l = clamp(nearest_int(f32(iscale * f32(x[i] - mn))), 0, nmax)
            aux[i] = l
            wl = f32(w[i] * f32(l))
            sum_l = f32(sum_l + wl)
            sum_l2 = f32(sum_l2 + f32(wl * f32(l)))
            sum_xl = f32(sum_xl + f32(wl * x[i]))
        det = f32(f32(sum_w * sum_l2) - f32(sum_l * sum_l))
        if det > 0:
            this_scale = f32(f32(f32(sum_w * sum_xl) - f32(sum_x * sum_l)) / det)
            this_min = f32(f32(f32(sum_l2 * sum_x) - f32(sum_l * sum_xl)) / det)
            if this_min > 0:
                this_min = f32(0)
                this_scale = f32(sum_xl / sum_l2)
            cur = f32(0)
            for i in range(n):
                diff = f32(f32(f32(this_scale * f32(aux[i])) + this_min) - x[i])
                diff = abs(diff) if use_mad else f32(diff * diff)
                cur = f32(cur + f32(w[i] * diff))
            if cur < best_error:
                L = aux
                best_error, scale, mn = cur, this_scale, this_min
    return scale, f32(-mn), L


def _absmax(x):
    mx = amax = f32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    return mx, amax


def make_qx_quants(n, nmax, x):
    """rmse_type 1, no quant weights.  Returns (scale, L) with L = l + nmax."""
    x = [f32(v) for v in x]
    mx, amax = _absmax(x)
    if amax < GROUP_MAX_EPS:
        return f32(0), [0] * n

    def fit(iscale):
        lv, slx, sl2 = [], f32(0), f32(0)
        for i in range(n):
            l = clamp(nearest_int(f32(iscale * x[i])), -nmax, nmax - 1)
            lv.append(l)
            w = f32(x[i] * x[i])
            slx = f32(slx + f32(f32(w * x[i]) * f32(l)))
            sl2 = f32(sl2 + f32(f32(w * f32(l)) * f32(l)))
        return lv, slx, sl2

    L, sumlx, suml2 = fit(f32(f32(-nmax) / mx))
    scale = f32(sumlx / suml2) if suml2 != 0 else f32(0)
    best = f32(scale * sumlx)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = f32(f32(-f32(f32(nmax) + f32(f32(0.1) * f32(step)))) / mx)
        lv, slx, sl2 = fit(iscale)
        if sl2 > 0 and f32(slx * slx) > f32(best * sl2):
            L = lv
            scale = f32(slx / sl2)
            best = f32(scale * slx)
    return scale, [l + nmax for l in L]


def make_q3_quants(n, nmax, x):
    """do_rmse = true.  Returns (scale, L) with L = l + nmax."""
    x = [f32(v) for v in x]
    mx, amax = _absmax(x)
    if amax < GROUP_MAX_EPS:
        return f32(0), [0] * n
    iscale = f32(f32(-nmax) / mx)
    L = []
    sumlx = suml2 = f32(0)
    for i in range(n):
        l = clamp(nearest_int(f32(iscale * x[i])), -nmax, nmax - 1)
        L.append(l)
        w = f32(x[i] * x[i])
        sumlx = f32(sumlx + f32(f32(w * x[i]) * f32(l)))
        suml2 = f32(suml2 + f32(f32(w * f32(l)) * f32(l)))
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = f32(x[i] * x[i])
            slx = f32(sumlx - f32(f32(w * x[i]) * f32(L[i])))
            if slx > 0:
                sl2 = f32(suml2 - f32(f32(w * f32(L[i])) * f32(L[i])))
                new_l = clamp(nearest_int(f32(f32(x[i] * sl2) / slx)), -nmax, nmax - 1)
                if new_l != L[i]:
                    slx = f32(slx + f32(f32(w * x[i]) * f32(new_l)))
                    sl2 = f32(sl2 + f32(f32(w * f32(new_l)) * f32(new_l)))
                    if sl2 > 0 and f32(f32(slx * slx) * suml2) > f32(f32(sumlx * sumlx) * sl2):
                        L[i], sumlx, suml2 = new_l, slx, sl2
                        changed += 1
        if not changed:
            break
    scale = f32(sumlx / suml2) if suml2 > 0 else f32(0)
    return scale, [l + nmax for l in L]


def quantize_q8_1(x, ties_to_even=False) -> bytes:
    """quantize_row_q8_1_ref for one block of 32; ``ties_to_even``: with the rounding of
    ggml's x86 quantize_row_q8_1 (``_mm256_cvtps_epi32``), that of activations."""
    x = [f32(v) for v in x]
    amax = f32(0)
    for v in x:
        amax = max(amax, abs(v))
    d = f32(amax / f32(127))
    idv = f32(f32(1) / d) if d != 0 else f32(0)
    if ties_to_even:
        qs = [int(np.rint(f32(v * idv))) for v in x]
    else:  # roundf: half away from zero
        qs = [int(np.copysign(np.floor(abs(float(f32(v * idv))) + 0.5), float(v))) for v in x]
    s = f32(f32(sum(qs)) * d)
    return h_bytes(d) + h_bytes(s) + struct.pack("<32b", *qs)


def quantize_q8k(x) -> bytes:
    """quantize_row_q8_K_ref for one block of 256."""
    x = [f32(v) for v in x]
    mx, amax = _absmax(x)
    if amax == 0:
        return struct.pack("<f", 0.0) + bytes(256) + bytes(32)
    iscale = f32(f32(-127) / mx)
    qs = [min(127, nearest_int(f32(iscale * v))) for v in x]
    bsums = [sum(qs[16 * j : 16 * j + 16]) for j in range(16)]
    d = f32(f32(1) / iscale)
    return struct.pack("<f", d) + struct.pack("<256b", *qs) + struct.pack("<16h", *bsums)


QUANTIZERS = {"Q8K": (quantize_q8k, 256), "Q8_1": (quantize_q8_1, 32),
              "Q8_1 activations": (lambda x: quantize_q8_1(x, ties_to_even=True), 32)}


def quantize_row(name, x) -> bytes:
    """Quantize a 1-D float32 array block by block with the scalar port (Q8_1, Q8K, or
    "Q8_1 activations": Q8_1 with ties rounded to even)."""
    q, bs = QUANTIZERS[name]
    vals = [f32(v) for v in np.asarray(x, dtype=np.float32)]
    with np.errstate(all="ignore"):
        return b"".join(q(vals[i : i + bs]) for i in range(0, len(vals), bs))
