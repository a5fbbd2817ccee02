"""Slow scalar ports of candle 0.11's block dot products, used as test oracles.

Each function is a line-by-line transcription of the Rust ``vec_dot_unopt``
routines in ``candle-core/src/quantized/k_quants.rs`` (ggml's generic
``ggml_vec_dot_*``): one block at a time, one element at a time, every float
an ``np.float32`` scalar so each operation rounds like Rust's f32.  Block
bytes are parsed here with ``struct``, independently of the library's
decoders.  Only small inputs are fed through these.
"""

from __future__ import annotations

import struct

import numpy as np

f32 = np.float32
QK_K = 256


def h(v) -> f32:
    """f16::from_f32(v).to_f32()."""
    return f32(np.float16(f32(v)))


def read_h(b: bytes, off: int) -> f32:
    return f32(np.frombuffer(b[off : off + 2], dtype=np.float16)[0])


def i8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v > 127 else v


def fsum_seq(values) -> f32:
    acc = f32(-0.0)
    for v in values:
        acc = f32(acc + v)
    return acc


def get_scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


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
