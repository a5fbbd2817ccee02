"""Slow scalar ports of candle 0.11's block routines, used as test oracles.

Each function is a line-by-line transcription of the Rust in
``candle-core/src/quantized/k_quants.rs`` and ``utils.rs`` (``from_float``,
``vec_dot_unopt``, ``make_qkx1_quants``, ``make_q3_quants``,
``make_qx_quants``): one block at a time, one element at a time, every float
an ``np.float32`` scalar so each operation rounds like Rust's f32.  Block
bytes are parsed here with ``struct``, independently of the library's
decoders.  Only small inputs are fed through these.
"""

from __future__ import annotations

import math
import struct

import numpy as np

f32 = np.float32
QK_K = 256


def nearest_int(v) -> int:
    """Rust ``(v as f32).round() as i32``: half away from zero, NaN -> 0, saturating."""
    v = float(v)
    if math.isnan(v):
        return 0
    r = math.copysign(math.floor(abs(v) + 0.5), v)
    return int(max(-(2**31), min(2**31 - 1, r)))


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def h(v) -> f32:
    """f16::from_f32(v).to_f32()."""
    return f32(np.float16(f32(v)))


def h_bytes(v) -> bytes:
    return np.float16(f32(v)).tobytes()


def read_h(b: bytes, off: int) -> f32:
    return f32(np.frombuffer(b[off : off + 2], dtype=np.float16)[0])


def u8(v: int) -> int:
    return v & 0xFF


def i8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v > 127 else v


def fsum_seq(values) -> f32:
    acc = f32(-0.0)
    for v in values:
        acc = f32(acc + v)
    return acc


# ------------------------------------------------------------------ searches
def make_qkx1_quants(nmax, ntry, x):
    n = len(x)
    lv = [0] * n
    mn, mx = min(x), max(x)
    if mx == mn:
        return f32(0), f32(0)
    mn = min(mn, f32(0))
    iscale = f32(f32(nmax) / f32(mx - mn))
    scale = f32(f32(1) / iscale)
    for _ in range(ntry):
        sumlx, suml2, changed = f32(0), 0, False
        for i, v in enumerate(x):
            li = clamp(nearest_int(iscale * f32(v - mn)), 0, nmax)
            if li != lv[i]:
                lv[i], changed = li, True
            sumlx = f32(sumlx + f32(f32(v - mn) * f32(li)))
            suml2 += li * li
        scale = f32(sumlx / f32(suml2))
        s = fsum_seq(f32(v - f32(scale * f32(li))) for v, li in zip(x, lv))
        mn = f32(s / f32(n))
        if mn > 0:
            mn = f32(0)
        iscale = f32(f32(1) / scale)
        if not changed:
            break
    return scale, f32(-mn)


def _absmax(x):
    mx, amax = f32(0), f32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    return mx, amax


def make_q3_quants(x, nmax):
    n = len(x)
    mx, amax = _absmax(x)
    if amax == 0:
        return f32(0)
    iscale = f32(f32(-nmax) / mx)
    lv = [0] * n
    sumlx = suml2 = f32(0)
    for i in range(n):
        li = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
        lv[i] = li
        w = f32(x[i] * x[i])
        sumlx = f32(sumlx + f32(f32(w * x[i]) * f32(li)))
        suml2 = f32(suml2 + f32(w * f32(li * li)))
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = f32(x[i] * x[i])
            slx = f32(sumlx - f32(f32(w * x[i]) * f32(lv[i])))
            if slx > 0:
                sl2 = f32(suml2 - f32(w * f32(lv[i] * lv[i])))
                new = clamp(nearest_int(f32(f32(x[i] * sl2) / slx)), -nmax, nmax - 1)
                if new != lv[i]:
                    slx = f32(slx + f32(f32(w * x[i]) * f32(new)))
                    sl2 = f32(sl2 + f32(w * f32(new * new)))
                    if sl2 > 0 and f32(f32(slx * slx) * suml2) > f32(f32(sumlx * sumlx) * sl2):
                        lv[i], sumlx, suml2 = new, slx, sl2
                        changed += 1
        if changed == 0:
            break
    return f32(sumlx / suml2)


def make_qx_quants(x, nmax):
    """rmse_type = 1, no weights: returns (scale, L with L = l + nmax)."""
    n = len(x)
    mx, amax = _absmax(x)
    if amax == 0:
        return f32(0), [0] * n
    iscale = f32(f32(-nmax) / mx)
    ls = [0] * n
    sumlx = suml2 = f32(0)
    for i in range(n):
        lq = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
        ls[i] = lq + nmax
        w = f32(x[i] * x[i])
        sumlx = f32(sumlx + f32(f32(w * x[i]) * f32(lq)))
        suml2 = f32(suml2 + f32(f32(w * f32(lq)) * f32(lq)))
    scale = f32(sumlx / suml2)
    best = f32(scale * sumlx)
    for _ in range(3):
        inv = f32(f32(1) / scale)
        slx = sl2 = f32(0)
        changed = False
        for i in range(n):
            lq = clamp(nearest_int(inv * x[i]), -nmax, nmax - 1)
            if lq + nmax != ls[i]:
                changed = True
            w = f32(x[i] * x[i])
            slx = f32(slx + f32(f32(w * x[i]) * f32(lq)))
            sl2 = f32(sl2 + f32(f32(w * f32(lq)) * f32(lq)))
        if not changed or sl2 == 0 or f32(slx * slx) <= f32(best * sl2):
            break
        for i in range(n):
            ls[i] = nmax + clamp(nearest_int(inv * x[i]), -nmax, nmax - 1)
        sumlx, suml2 = slx, sl2
        scale = f32(sumlx / suml2)
        best = f32(scale * sumlx)
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = f32(x[i] * x[i])
            lq = ls[i] - nmax
            slx = f32(sumlx - f32(f32(w * x[i]) * f32(lq)))
            if slx > 0:
                sl2 = f32(suml2 - f32(f32(w * f32(lq)) * f32(lq)))
                new = clamp(nearest_int(f32(f32(x[i] * sl2) / slx)), -nmax, nmax - 1)
                if new != lq:
                    slx = f32(slx + f32(f32(w * x[i]) * f32(new)))
                    sl2 = f32(sl2 + f32(f32(w * f32(new)) * f32(new)))
                    if sl2 > 0 and f32(f32(slx * slx) * suml2) > f32(f32(sumlx * sumlx) * sl2):
                        ls[i] = nmax + new
                        sumlx, suml2 = slx, sl2
                        scale = f32(sumlx / suml2)
                        best = f32(scale * sumlx)
                        changed += 1
        if changed == 0:
            break
    return scale, ls


# ------------------------------------------------------------------ quantizers
def _best_positive(vals):
    m = f32(0)
    for v in vals:
        if not math.isnan(v) and v > m:
            m = v
    return m


def get_scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def quantize_q2k(x) -> bytes:
    scales_f, mins_f = zip(*(make_qkx1_quants(3, 5, x[16 * j : 16 * j + 16]) for j in range(16)))
    max_scale, max_min = _best_positive(scales_f), _best_positive(mins_f)
    sc = [0] * 16
    if max_scale > 0:
        iscale = f32(f32(15) / max_scale)
        sc = [u8(nearest_int(iscale * s)) for s in scales_f]
        d = h(max_scale / f32(15))
    else:
        d = h(0)
    if max_min > 0:
        iscale = f32(f32(15) / max_min)
        sc = [u8(s | (u8(nearest_int(iscale * m)) << 4)) for s, m in zip(sc, mins_f)]
        dmin = h(max_min / f32(15))
    else:
        dmin = h(0)
    L = [0] * QK_K
    for j in range(16):
        dd = f32(d * f32(sc[j] & 0xF))
        if dd == 0:
            continue
        dm = f32(dmin * f32(sc[j] >> 4))
        for ii in range(16):
            L[16 * j + ii] = clamp(nearest_int(f32(f32(x[16 * j + ii] + dm) / dd)), 0, 3)
    qs = [0] * 64
    for j in (0, 128):
        for l in range(32):
            qs[j // 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)
    return bytes(sc) + bytes(qs) + h_bytes(d) + h_bytes(dmin)


def quantize_q3k(x) -> bytes:
    scales_f = [make_q3_quants(x[16 * j : 16 * j + 16], 4) for j in range(16)]
    max_scale = f32(0)
    for s in scales_f:
        if abs(s) > abs(max_scale):
            max_scale = s
    sc = [0] * 12
    if max_scale != 0:
        iscale = f32(f32(-32) / max_scale)
        for j, s in enumerate(scales_f):
            lv = clamp(nearest_int(iscale * s), -32, 31) + 32
            if j < 8:
                sc[j] = lv & 0xF
            else:
                sc[j - 8] |= (lv & 0xF) << 4
            sc[j % 4 + 8] |= u8((lv >> 4) << (2 * (j // 4)))
        d = h(f32(1) / iscale)
    else:
        d = h(0)
    L = [0] * QK_K
    for j in range(16):
        s = (sc[j] & 0xF) if j < 8 else (sc[j - 8] >> 4)
        s = i8(s | (((sc[8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32
        dd = f32(d * f32(s))
        if dd != 0:
            for ii in range(16):
                L[16 * j + ii] = clamp(nearest_int(f32(x[16 * j + ii] / dd)), -4, 3) + 4
    hmask = [0] * 32
    for i in range(QK_K):
        if L[i] > 3:
            hmask[i % 32] |= 1 << (i // 32)
            L[i] -= 4
    qs = [0] * 64
    for j in (0, 128):
        for l in range(32):
            qs[j // 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)
    return bytes(hmask) + bytes(qs) + bytes(sc) + h_bytes(d)


def _quantize_q45k(x, nmax):
    scales_f, mins_f = zip(*(make_qkx1_quants(nmax, 5, x[32 * j : 32 * j + 32]) for j in range(8)))
    max_scale, max_min = _best_positive(scales_f), _best_positive(mins_f)
    inv_scale = f32(f32(63) / max_scale) if max_scale > 0 else f32(0)
    inv_min = f32(f32(63) / max_min) if max_min > 0 else f32(0)
    sc = [0] * 12
    for j in range(8):
        ls = u8(min(nearest_int(inv_scale * scales_f[j]), 63))
        lm = u8(min(nearest_int(inv_min * mins_f[j]), 63))
        if j < 4:
            sc[j], sc[j + 4] = ls, lm
        else:
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            sc[j - 4] |= u8((ls >> 4) << 6)
            sc[j] |= u8((lm >> 4) << 6)
    d, dmin = h(max_scale / f32(63)), h(max_min / f32(63))
    L = [0] * QK_K
    for j in range(8):
        s, m = get_scale_min_k4(j, sc)
        dd = f32(d * f32(s))
        if dd != 0:
            dm = f32(dmin * f32(m))
            for ii in range(32):
                L[32 * j + ii] = clamp(nearest_int(f32(f32(x[32 * j + ii] + dm) / dd)), 0, nmax)
    return h_bytes(d) + h_bytes(dmin) + bytes(sc), L


def quantize_q4k(x) -> bytes:
    head, L = _quantize_q45k(x, 15)
    qs = [0] * 128
    for j in range(0, QK_K, 64):
        for l in range(32):
            qs[(j // 64) * 32 + l] = L[j + l] | (L[j + l + 32] << 4)
    return head + bytes(qs)


def quantize_q5k(x) -> bytes:
    head, L = _quantize_q45k(x, 31)
    qh, ql = [0] * 32, [0] * 128
    m1, m2 = 1, 2
    for n in range(0, QK_K, 64):
        off = (n // 64) * 32
        for j in range(32):
            l1, l2 = L[n + j], L[n + j + 32]
            if l1 > 15:
                l1 -= 16
                qh[j] |= m1
            if l2 > 15:
                l2 -= 16
                qh[j] |= m2
            ql[off + j] = l1 | (l2 << 4)
        m1 <<= 2
        m2 <<= 2
    return head + bytes(qh) + bytes(ql)


def quantize_q6k(x) -> bytes:
    L = [0] * QK_K
    scales_f = []
    for ib in range(16):
        s, ls = make_qx_quants(x[16 * ib : 16 * ib + 16], 32)
        scales_f.append(s)
        L[16 * ib : 16 * ib + 16] = ls
    max_scale, max_abs = f32(0), f32(0)
    for s in scales_f:
        if abs(s) > max_abs:
            max_abs, max_scale = abs(s), s
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = f32(f32(-128) / max_scale)
        d = h(f32(1) / iscale)
        ysc = [i8(min(nearest_int(iscale * s), 127)) for s in scales_f]
    for j in range(16):
        dd = f32(d * f32(ysc[j]))
        if dd == 0:
            continue
        for ii in range(16):
            L[16 * j + ii] = clamp(nearest_int(f32(x[16 * j + ii] / dd)), -32, 31) + 32
    ql, qh = [0] * 128, [0] * 64
    for j in (0, 128):
        for l in range(32):
            q1, q2, q3, q4 = (L[j + l + 32 * k] & 0xF for k in range(4))
            ql[j // 2 + l] = q1 | (q3 << 4)
            ql[j // 2 + l + 32] = q2 | (q4 << 4)
            qh[j // 4 + l] = (
                (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6)
            )
    return bytes(ql) + bytes(qh) + bytes(u8(s) for s in ysc) + h_bytes(d)


def quantize_q8k(x) -> bytes:
    mx, amax = _absmax(x)
    if amax == 0:
        return struct.pack("<f", 0.0) + bytes(256) + bytes(32)
    iscale = f32(f32(-127) / mx)
    qs = [int(clamp(nearest_int(iscale * v), -128, 127)) for v in x]
    bsums = [sum(qs[16 * j : 16 * j + 16]) for j in range(16)]
    d = f32(f32(1) / iscale)
    return struct.pack("<f", d) + struct.pack("<256b", *qs) + struct.pack("<16h", *bsums)


def quantize_q8_1(x) -> bytes:
    amax = f32(0)
    for v in x:
        amax = max(amax, abs(v))
    d = f32(amax / f32(127))
    idv = f32(f32(1) / d) if d != 0 else f32(0)
    qs = [nearest_int(f32(v * idv)) for v in x]
    s = h(f32(h(f32(sum(qs)))) * h(d))
    return h_bytes(d) + h_bytes(s) + struct.pack("<32b", *qs)


QUANTIZERS = {
    "Q2K": quantize_q2k,
    "Q3K": quantize_q3k,
    "Q4K": quantize_q4k,
    "Q5K": quantize_q5k,
    "Q6K": quantize_q6k,
    "Q8K": quantize_q8k,
    "Q8_1": quantize_q8_1,
}


def quantize_row(name, x) -> bytes:
    """Quantize a 1-D float32 array block by block with the scalar port."""
    q, bs = QUANTIZERS[name], (32 if name == "Q8_1" else QK_K)
    vals = [f32(v) for v in np.asarray(x, dtype=np.float32)]
    with np.errstate(all="ignore"):
        return b"".join(q(vals[i : i + bs]) for i in range(0, len(vals), bs))


# ------------------------------------------------------------------ vec_dot_unopt
def _q8k(b):
    d = f32(struct.unpack_from("<f", b, 0)[0])
    return d, list(struct.unpack_from("<256b", b, 4)), list(struct.unpack_from("<16h", b, 260))


def _q4_values(qs):
    return [q & 0x0F for q in qs], [q >> 4 for q in qs]


def vec_dot_q4_0(x, y):  # x: Q4_0 block bytes, y: Q8_0 block bytes
    lo, hi = _q4_values(x[2:18])
    yq = struct.unpack_from("<32b", y, 2)
    s = sum((lo[j] - 8) * yq[j] + (hi[j] - 8) * yq[j + 16] for j in range(16))
    return f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0))


def vec_dot_q4_1(x, y):  # y: Q8_1
    lo, hi = _q4_values(x[4:20])
    yq = struct.unpack_from("<32b", y, 4)
    s = sum(lo[j] * yq[j] + hi[j] * yq[j + 16] for j in range(16))
    return f32(f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0)) + f32(read_h(x, 2) * read_h(y, 2)))


def _q5(x, qh_off, qs_off, j):
    qh = struct.unpack_from("<I", x, qh_off)[0]
    q = x[qs_off + j]
    return (q & 0x0F) | (((qh >> j) << 4) & 0x10), (q >> 4) | ((qh >> (j + 12)) & 0x10)


def vec_dot_q5_0(x, y):
    yq = struct.unpack_from("<32b", y, 2)
    s = 0
    for j in range(16):
        a, b = _q5(x, 2, 6, j)
        s += (a - 16) * yq[j] + (b - 16) * yq[j + 16]
    return f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0))


def vec_dot_q5_1(x, y):
    yq = struct.unpack_from("<32b", y, 4)
    s = 0
    for j in range(16):
        a, b = _q5(x, 4, 8, j)
        s += a * yq[j] + b * yq[j + 16]
    return f32(f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0)) + f32(read_h(x, 2) * read_h(y, 2)))


def vec_dot_q8_0(x, y):
    s = sum(a * b for a, b in zip(struct.unpack_from("<32b", x, 2), struct.unpack_from("<32b", y, 2)))
    return f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0))


def vec_dot_q8_1(x, y):
    s = sum(a * b for a, b in zip(struct.unpack_from("<32b", x, 4), struct.unpack_from("<32b", y, 4)))
    return f32(f32(f32(s) * read_h(x, 0)) * read_h(y, 0))


def vec_dot_q2k(x, y):
    yd, q8, bsums = _q8k(y)
    sc, q2 = x[0:16], x[16:80]
    summs = sum(b * (s >> 4) for b, s in zip(bsums, sc))
    dall, dmin = f32(yd * read_h(x, 80)), f32(yd * read_h(x, 82))
    isum, is_, p8 = 0, 0, 0
    for c in range(2):
        for shift in (0, 2, 4, 6):
            for half in range(2):
                dd = sc[is_] & 0xF
                is_ += 1
                isum += dd * sum(q8[p8 + l] * ((q2[32 * c + l] >> shift) & 3) for l in range(16 * half, 16 * half + 16))
            p8 += 32
    return f32(f32(dall * f32(isum)) - f32(dmin * f32(summs)))


def vec_dot_q3k(x, y):
    yd, q8, _ = _q8k(y)
    hmask, q3, scales = x[0:32], x[32:96], x[96:108]
    a = []
    m = 1
    for c in range(2):
        for shift in (0, 2, 4, 6):
            a.extend(((q3[32 * c + l] >> shift) & 3) - (0 if hmask[l] & m else 4) for l in range(32))
            m <<= 1
    k1, k2 = 0x03030303, 0x0F0F0F0F
    aux = list(struct.unpack("<3I", scales)) + [0]
    tmp = aux[2]
    aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4)
    aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)
    aux[0] = (aux[0] & k2) | ((tmp & k1) << 4)
    aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4)
    sc = [i8(b) for b in struct.pack("<4I", *aux)]
    aux32 = [0] * 8
    p = 0
    for s in sc:
        for _ in range(2):
            for l in range(8):
                aux32[l] += (s - 32) * (q8[p + l] * a[p + l])
            p += 8
    d = f32(read_h(x, 108) * yd)
    return [f32(d * f32(v)) for v in aux32]


def _k45_vec_dot(x, y, values):
    yd, q8, bsums = _q8k(y)
    sc = list(x[4:16])
    scales = [get_scale_min_k4(j, sc)[0] for j in range(8)]
    mins = [get_scale_min_k4(j, sc)[1] for j in range(8)]
    sumi = sum(bsums[j] * mins[j // 2] for j in range(16))
    aux32 = [0] * 8
    p = 0
    for s in scales:
        for _ in range(4):
            for l in range(8):
                aux32[l] += s * (q8[p + l] * values[p + l])
            p += 8
    d = f32(read_h(x, 0) * yd)
    dmin = f32(read_h(x, 2) * yd)
    return [f32(d * f32(v)) for v in aux32], f32(dmin * f32(sumi))


def vec_dot_q4k(x, y):
    vals = []
    for c in range(4):
        vals.extend(b & 0xF for b in x[16 + 32 * c : 48 + 32 * c])
        vals.extend(b >> 4 for b in x[16 + 32 * c : 48 + 32 * c])
    return _k45_vec_dot(x, y, vals)


def vec_dot_q5k(x, y):
    qh, q5 = x[16:48], x[48:176]
    vals, m = [], 1
    for c in range(4):
        vals.extend((q5[32 * c + l] & 0xF) + (16 if qh[l] & m else 0) for l in range(32))
        m <<= 1
        vals.extend((q5[32 * c + l] >> 4) + (16 if qh[l] & m else 0) for l in range(32))
        m <<= 1
    return _k45_vec_dot(x, y, vals)


def vec_dot_q6k(x, y):
    yd, q8, _ = _q8k(y)
    ql, qh, scales = x[0:128], x[128:192], [i8(b) for b in x[192:208]]
    a = [0] * QK_K
    for j in (0, 128):
        q4, hh = ql[j // 2 :], qh[j // 4 :]
        for l in range(32):
            a[j + l] = ((q4[l] & 0xF) | ((hh[l] & 3) << 4)) - 32
            a[j + l + 32] = ((q4[l + 32] & 0xF) | (((hh[l] >> 2) & 3) << 4)) - 32
            a[j + l + 64] = ((q4[l] >> 4) | (((hh[l] >> 4) & 3) << 4)) - 32
            a[j + l + 96] = ((q4[l + 32] >> 4) | (((hh[l] >> 6) & 3) << 4)) - 32
    aux32 = [f32(0)] * 8
    for j, s in enumerate(scales):
        for half in range(2):
            base = 16 * j + 8 * half
            for l in range(8):
                aux32[l] = f32(aux32[l] + f32(f32(s) * f32(q8[base + l] * a[base + l])))
    d = f32(read_h(x, 208) * yd)
    return [f32(v * d) for v in aux32]


def vec_dot_q8k(x, y):
    xd, xq, _ = _q8k(x)
    yd, yq, _ = _q8k(y)
    return f32(f32(f32(sum(a * b for a, b in zip(xq, yq))) * xd) * yd)


def vec_dot_row(name, w_row: bytes, x_row: bytes) -> f32:
    """candle's ``T::vec_dot_unopt`` over one weight row and one quantized activation row."""
    from tallow.quantized import ggml_type

    t, dt = ggml_type(name), ggml_type(name).dot_type
    nb = len(w_row) // t.type_size
    blocks = [(w_row[i * t.type_size : (i + 1) * t.type_size], x_row[i * dt.type_size : (i + 1) * dt.type_size])
              for i in range(nb)]
    simple = {"Q4_0": vec_dot_q4_0, "Q4_1": vec_dot_q4_1, "Q5_0": vec_dot_q5_0, "Q5_1": vec_dot_q5_1,
              "Q8_0": vec_dot_q8_0, "Q8_1": vec_dot_q8_1, "Q2K": vec_dot_q2k, "Q8K": vec_dot_q8k}
    if name in simple:
        acc = f32(0)
        for wb, xb in blocks:
            acc = f32(acc + simple[name](wb, xb))
        return acc
    sums, sumf = [f32(0)] * 8, f32(0)
    for wb, xb in blocks:
        if name in ("Q4K", "Q5K"):
            lanes, mins = (vec_dot_q4k if name == "Q4K" else vec_dot_q5k)(wb, xb)
            sumf = f32(sumf - mins)
        else:
            lanes = (vec_dot_q3k if name == "Q3K" else vec_dot_q6k)(wb, xb)
        sums = [f32(s + v) for s, v in zip(sums, lanes)]
    return f32(sumf + fsum_seq(sums))
