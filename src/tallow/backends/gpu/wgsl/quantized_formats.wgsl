// quantized_formats.wgsl: GGML block decoders, one format per module (the flag
// D0_<type> picks it). The weight buffer buf_w is array<u32> holding the blocks
// back to back from byte 0 of its binding; blocks are not 4-byte aligned in
// general (Q4_0: 18 bytes), so fields are read as bytes / halves / unaligned
// words with shifts. The layouts are those of README-quantized.md (ggml-common.h).
//
// Every format provides
//   QK, QB   elements and bytes per block;
//   dq16(o, r) -> array<f32, 16>: elements 16 r .. 16 r + 15 of the block at byte o
//            (a block holds QK / 16 such runs); float formats (QK = 1) take o = the
//            element index of the run's first element and zero what lies at or past
//            the limit `lim` (an element index).
// The values are the NumPy codecs' bit for bit: f16 fields go through the exact
// codec of common.wgsl, and each product and sum is rounded in the codec's order;
// nofma() (defined by the kernel file) keeps a product from being fused into the
// following add where that would change the rounding.

fn wb(b: u32) -> u32 { return (buf_w[b >> 2u] >> ((b & 3u) << 3u)) & 0xffu; }
// The half at an even byte offset.
fn wh(b: u32) -> u32 { return (buf_w[b >> 2u] >> ((b & 2u) << 3u)) & 0xffffu; }
fn wf16(b: u32) -> f32 { return f16_to_f32(wh(b)); }
// Four bytes at any byte offset, little-endian.
fn w32(b: u32) -> u32 {
    let s = (b & 3u) << 3u;
    let lo = buf_w[b >> 2u];
    if (s == 0u) { return lo; }
    return (lo >> s) | (buf_w[(b >> 2u) + 1u] << (32u - s));
}
// Byte i of a word as a signed value.
fn sbyte(wd: u32, i: u32) -> f32 { return f32(extractBits(bitcast<i32>(wd), 8u * i, 8u)); }

//#if D0_F32
const QK: u32 = 1u;
const QB: u32 = 4u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    var v: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        v[i] = 0.0;
        if (o + i < lim) { v[i] = bitcast<f32>(buf_w[o + i]); }
    }
    return v;
}
//#elif D0_F16 or D0_BF16
const QK: u32 = 1u;
const QB: u32 = 2u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    var v: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        v[i] = 0.0;
        let e = o + i;
        if (e < lim) {
            let h = (buf_w[e >> 1u] >> ((e & 1u) << 4u)) & 0xffffu;
//#if D0_F16
            v[i] = f16_to_f32(h);
//#else
            v[i] = bitcast<f32>(h << 16u);
//#endif
        }
    }
    return v;
}
//#elif D0_Q4_0
// d:f16 qs[16]; x = d * (q - 8); byte j: element j (low nibble), j + 16 (high).
const QK: u32 = 32u;
const QB: u32 = 18u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = wf16(o);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(o + 2u + 4u * j) >> (4u * r);
        for (var i = 0u; i < 4u; i = i + 1u) {
            v[4u * j + i] = d * f32(i32((wd >> (8u * i)) & 0xfu) - 8);
        }
    }
    return v;
}
//#elif D0_Q4_1
// d:f16 m:f16 qs[16]; x = d * q + m.
const QK: u32 = 32u;
const QB: u32 = 20u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = wf16(o);
    let m = wf16(o + 2u);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(o + 4u + 4u * j) >> (4u * r);
        for (var i = 0u; i < 4u; i = i + 1u) {
            v[4u * j + i] = nofma(d * f32((wd >> (8u * i)) & 0xfu)) + m;
        }
    }
    return v;
}
//#elif D0_Q5_0
// d:f16 qh:u32 qs[16]; x = d * (q - 16); bit j of qh is the fifth bit of element j.
const QK: u32 = 32u;
const QB: u32 = 22u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = wf16(o);
    let qh = w32(o + 2u) >> (16u * r);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(o + 6u + 4u * j) >> (4u * r);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = 4u * j + i;
            let q = ((wd >> (8u * i)) & 0xfu) | (((qh >> e) & 1u) << 4u);
            v[e] = d * f32(i32(q) - 16);
        }
    }
    return v;
}
//#elif D0_Q5_1
// d:f16 m:f16 qh:u32 qs[16]; x = d * q + m.
const QK: u32 = 32u;
const QB: u32 = 24u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = wf16(o);
    let m = wf16(o + 2u);
    let qh = w32(o + 4u) >> (16u * r);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(o + 8u + 4u * j) >> (4u * r);
        for (var i = 0u; i < 4u; i = i + 1u) {
            let e = 4u * j + i;
            let q = ((wd >> (8u * i)) & 0xfu) | (((qh >> e) & 1u) << 4u);
            v[e] = nofma(d * f32(q)) + m;
        }
    }
    return v;
}
//#elif D0_Q8_0 or D0_Q8_1
// Q8_0: d:f16 qs:i8[32]; Q8_1: d:f16 s:f16 qs:i8[32]; x = q * d.
const QK: u32 = 32u;
//#if D0_Q8_0
const QB: u32 = 34u;
const QS: u32 = 2u;
//#else
const QB: u32 = 36u;
const QS: u32 = 4u;
//#endif
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = wf16(o);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(o + QS + 16u * r + 4u * j);
        for (var i = 0u; i < 4u; i = i + 1u) { v[4u * j + i] = sbyte(wd, i) * d; }
    }
    return v;
}
//#elif D0_Q2K
// scales[16] qs[64] d:f16 dmin:f16; sub-block j (16 values) = run j:
// x = d * (sc & 15) * q - dmin * (sc >> 4); value e = 128 c + 32 s + l has its two
// bits in byte 32 c + l at bit 2 s.
const QK: u32 = 256u;
const QB: u32 = 84u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let sc = wb(o + r);
    let dl = wf16(o + 80u) * f32(sc & 0xfu);
    let ml = wf16(o + 82u) * f32(sc >> 4u);
    let sh = 2u * ((r & 7u) >> 1u);
    let base = o + 16u + 32u * (r >> 3u) + 16u * (r & 1u);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(base + 4u * j) >> sh;
        for (var i = 0u; i < 4u; i = i + 1u) {
            v[4u * j + i] = nofma(dl * f32((wd >> (8u * i)) & 3u)) - ml;
        }
    }
    return v;
}
//#elif D0_Q3K
// hmask[32] qs[64] scales[12] d:f16; 16 signed 6-bit scales; value e: two low
// bits as Q2K (qs at byte 32), minus 4 where bit e / 32 of hmask[e % 32] is clear.
const QK: u32 = 256u;
const QB: u32 = 110u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let lo4 = (wb(o + 96u + (r & 7u)) >> (4u * (r >> 3u))) & 0xfu;
    let hi2 = (wb(o + 104u + (r & 3u)) >> (2u * (r >> 2u))) & 3u;
    let dl = wf16(o + 108u) * f32(i32(lo4 | (hi2 << 4u)) - 32);
    let sh = 2u * ((r & 7u) >> 1u);
    let base = o + 32u + 32u * (r >> 3u) + 16u * (r & 1u);
    let hbase = o + 16u * (r & 1u);
    let hb = r >> 1u;
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(base + 4u * j) >> sh;
        let hm = w32(hbase + 4u * j) >> hb;
        for (var i = 0u; i < 4u; i = i + 1u) {
            let q = i32((wd >> (8u * i)) & 3u) - select(4, 0, ((hm >> (8u * i)) & 1u) != 0u);
            v[4u * j + i] = dl * f32(q);
        }
    }
    return v;
}
//#elif D0_Q4K or D0_Q5K
// Q4K: d dmin scales[12] qs[128]; Q5K: the same plus qh[32] before qs.
// 8 sub-blocks of 32 (run r is half of sub-block r / 2) with 6-bit scales and
// mins; x = d * sc * q - dmin * mn; sub-block 2c + t is the nibbles t of bytes
// 32 c ..; Q5K's fifth bit of value 32 sb + l is bit sb of qh[l].
const QK: u32 = 256u;
//#if D0_Q4K
const QB: u32 = 144u;
const QS: u32 = 16u;
//#else
const QB: u32 = 176u;
const QS: u32 = 48u;
//#endif
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let sb = r >> 1u;
    var sc: u32;
    var mn: u32;
    if (sb < 4u) {
        sc = wb(o + 4u + sb) & 63u;
        mn = wb(o + 8u + sb) & 63u;
    } else {
        let md = wb(o + 8u + sb);
        sc = (md & 0xfu) | ((wb(o + sb) >> 6u) << 4u);
        mn = (md >> 4u) | ((wb(o + 4u + sb) >> 6u) << 4u);
    }
    let dl = wf16(o) * f32(sc);
    let ml = wf16(o + 2u) * f32(mn);
    let base = o + QS + 32u * (r >> 2u) + 16u * (r & 1u);
    let sh = 4u * (sb & 1u);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = w32(base + 4u * j) >> sh;
//#if D0_Q5K
        let hm = w32(o + 16u + 16u * (r & 1u) + 4u * j) >> sb;
//#endif
        for (var i = 0u; i < 4u; i = i + 1u) {
            var q = (wd >> (8u * i)) & 0xfu;
//#if D0_Q5K
            q = q | (((hm >> (8u * i)) & 1u) << 4u);
//#endif
            v[4u * j + i] = nofma(dl * f32(q)) - ml;
        }
    }
    return v;
}
//#elif D0_Q6K
// ql[128] qh[64] scales:i8[16] d:f16; value e = 128 h + 32 s + l: low nibble
// s / 2 of ql[64 h + 32 (s % 2) + l], two high bits 2 s of qh[32 h + l]; minus 32.
const QK: u32 = 256u;
const QB: u32 = 210u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let dl = wf16(o + 208u) * f32(extractBits(i32(wb(o + 192u + r)), 0u, 8u));
    let h = r >> 3u;
    let s = (r & 7u) >> 1u;
    let l0 = 16u * (r & 1u);
    let qlb = o + 64u * h + 32u * (s & 1u) + l0;
    let qhb = o + 128u + 32u * h + l0;
    let lsh = 4u * (s >> 1u);
    let hsh = 2u * s;
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wl = w32(qlb + 4u * j) >> lsh;
        let wq = w32(qhb + 4u * j) >> hsh;
        for (var i = 0u; i < 4u; i = i + 1u) {
            let q = ((wl >> (8u * i)) & 0xfu) | (((wq >> (8u * i)) & 3u) << 4u);
            v[4u * j + i] = dl * f32(i32(q) - 32);
        }
    }
    return v;
}
//#elif D0_Q8K
// d:f32 qs:i8[256] bsums:i16[16]; x = d * q.
const QK: u32 = 256u;
const QB: u32 = 292u;
fn dq16(o: u32, r: u32, lim: u32) -> array<f32, 16> {
    let d = bitcast<f32>(buf_w[o >> 2u]);
    var v: array<f32, 16>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let wd = buf_w[(o + 4u + 16u * r) / 4u + j];
        for (var i = 0u; i < 4u; i = i + 1u) { v[4u * j + i] = d * sbyte(wd, i); }
    }
    return v;
}
//#endif

// Runs of 16 per block, and whether the format has element-granular tails.
const RPB: u32 = max(QK / 16u, 1u);
const FLOATW: bool = QK == 1u;
