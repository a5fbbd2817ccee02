// quantized_formats.wgsl: GGML block decoders, one format per module (the flag
// D0_<type> picks it). The weight buffer buf_w is array<u32> holding the blocks
// back to back from byte 0 of its binding; blocks are not 4-byte aligned in
// general (Q4_0: 18 bytes), so fields are read as bytes / halves / unaligned
// words with shifts. The layouts are those of README-quantized.md (ggml-common.h).
//
// Every format provides
//   QK, QB   elements and bytes per block;
//   dq16(o, r, lim) -> array<vec4<f32>, 4>: elements 16 r .. 16 r + 15 of the block
//            at byte o (a block holds QK / 16 such runs); float formats (QK = 1)
//            take o = the element index of the run's first element and give 0 for
//            what lies at or past the element index lim.
// The decoders are written without loops (four vec4 pieces of four words), which
// every compiler keeps in registers.
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
// The four bytes of a word (as signed bytes), and its four nibbles / 2-bit /
// 1-bit fields at bit `sh` of each byte.
fn bytes4(wd: u32) -> vec4<u32> { return (vec4<u32>(wd) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu); }
fn sbytes4(wd: u32) -> vec4<f32> {
    return vec4<f32>((vec4<i32>(bitcast<i32>(wd)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}
fn bits4(wd: u32, sh: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(wd) >> (vec4<u32>(sh) + vec4<u32>(0u, 8u, 16u, 24u))) & vec4<u32>(mask);
}
fn f4(v: vec4<u32>) -> vec4<f32> { return vec4<f32>(v); }
fn fi4(v: vec4<u32>, off: i32) -> vec4<f32> { return vec4<f32>(vec4<i32>(v) - vec4<i32>(off)); }
fn nofma4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(nofma(v.x), nofma(v.y), nofma(v.z), nofma(v.w));
}
// One bit of each of four consecutive bits (bit e0 .. e0 + 3 of a word).
fn bit4(wd: u32, e0: u32) -> vec4<u32> { return (vec4<u32>(wd) >> (vec4<u32>(e0) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u); }

//#if D0_F32
const QK: u32 = 1u;
const QB: u32 = 4u;
fn fv(e: u32, lim: u32) -> f32 { return select(0.0, bitcast<f32>(buf_w[e]), e < lim); }
fn fv4(e: u32, lim: u32) -> vec4<f32> { return vec4<f32>(fv(e, lim), fv(e + 1u, lim), fv(e + 2u, lim), fv(e + 3u, lim)); }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(fv4(o, lim), fv4(o + 4u, lim), fv4(o + 8u, lim), fv4(o + 12u, lim));
}
//#elif D0_F16 or D0_BF16
const QK: u32 = 1u;
const QB: u32 = 2u;
fn fv(e: u32, lim: u32) -> f32 {
    let h = (buf_w[e >> 1u] >> ((e & 1u) << 4u)) & 0xffffu;
//#if D0_F16
    return select(0.0, f16_to_f32(h), e < lim);
//#else
    return select(0.0, bitcast<f32>(h << 16u), e < lim);
//#endif
}
fn fv4(e: u32, lim: u32) -> vec4<f32> { return vec4<f32>(fv(e, lim), fv(e + 1u, lim), fv(e + 2u, lim), fv(e + 3u, lim)); }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(fv4(o, lim), fv4(o + 4u, lim), fv4(o + 8u, lim), fv4(o + 12u, lim));
}
//#elif D0_Q4_0
// d:f16 qs[16]; x = d * (q - 8); byte j: element j (low nibble), j + 16 (high).
const QK: u32 = 32u;
const QB: u32 = 18u;
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
    let sh = 4u * r;
    return array<vec4<f32>, 4>(d * fi4(bits4(w32(o + 2u), sh, 15u), 8), d * fi4(bits4(w32(o + 6u), sh, 15u), 8),
                               d * fi4(bits4(w32(o + 10u), sh, 15u), 8), d * fi4(bits4(w32(o + 14u), sh, 15u), 8));
}
//#elif D0_Q4_1
// d:f16 m:f16 qs[16]; x = d * q + m.
const QK: u32 = 32u;
const QB: u32 = 20u;
fn p41(d: vec4<f32>, m: vec4<f32>, wd: u32, sh: u32) -> vec4<f32> { return nofma4(d * f4(bits4(wd, sh, 15u))) + m; }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
    let m = vec4<f32>(wf16(o + 2u));
    let sh = 4u * r;
    return array<vec4<f32>, 4>(p41(d, m, buf_w[(o + 4u) >> 2u], sh), p41(d, m, buf_w[(o + 8u) >> 2u], sh),
                               p41(d, m, buf_w[(o + 12u) >> 2u], sh), p41(d, m, buf_w[(o + 16u) >> 2u], sh));
}
//#elif D0_Q5_0 or D0_Q5_1
// Q5_0: d:f16 qh:u32 qs[16], x = d * (q - 16); Q5_1: d:f16 m:f16 qh:u32 qs[16],
// x = d * q + m; bit j of qh is the fifth bit of element j.
const QK: u32 = 32u;
//#if D0_Q5_0
const QB: u32 = 22u;
const QH: u32 = 2u;
//#else
const QB: u32 = 24u;
const QH: u32 = 4u;
//#endif
fn p5(d: vec4<f32>, m: vec4<f32>, wd: u32, sh: u32, qh: u32, e0: u32) -> vec4<f32> {
    let q = bits4(wd, sh, 15u) | (bit4(qh, e0) << vec4<u32>(4u));
//#if D0_Q5_0
    return d * fi4(q, 16);
//#else
    return nofma4(d * f4(q)) + m;
//#endif
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
//#if D0_Q5_0
    let m = vec4<f32>(0.0);
//#else
    let m = vec4<f32>(wf16(o + 2u));
//#endif
    let qh = w32(o + QH) >> (16u * r);
    let qs = o + QH + 4u;
    let sh = 4u * r;
    return array<vec4<f32>, 4>(p5(d, m, w32(qs), sh, qh, 0u), p5(d, m, w32(qs + 4u), sh, qh, 4u),
                               p5(d, m, w32(qs + 8u), sh, qh, 8u), p5(d, m, w32(qs + 12u), sh, qh, 12u));
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
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
    let b = o + QS + 16u * r;
    return array<vec4<f32>, 4>(sbytes4(w32(b)) * d, sbytes4(w32(b + 4u)) * d,
                               sbytes4(w32(b + 8u)) * d, sbytes4(w32(b + 12u)) * d);
}
//#elif D0_Q2K
// scales[16] qs[64] d:f16 dmin:f16; sub-block j (16 values) = run j:
// x = d * (sc & 15) * q - dmin * (sc >> 4); value e = 128 c + 32 s + l has its two
// bits in byte 32 c + l at bit 2 s.
const QK: u32 = 256u;
const QB: u32 = 84u;
fn p2(dl: vec4<f32>, ml: vec4<f32>, wd: u32, sh: u32) -> vec4<f32> { return nofma4(dl * f4(bits4(wd, sh, 3u))) - ml; }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let sc = wb(o + r);
    let dl = vec4<f32>(wf16(o + 80u) * f32(sc & 0xfu));
    let ml = vec4<f32>(wf16(o + 82u) * f32(sc >> 4u));
    let sh = 2u * ((r & 7u) >> 1u);
    let b = (o + 16u + 32u * (r >> 3u) + 16u * (r & 1u)) >> 2u;
    return array<vec4<f32>, 4>(p2(dl, ml, buf_w[b], sh), p2(dl, ml, buf_w[b + 1u], sh),
                               p2(dl, ml, buf_w[b + 2u], sh), p2(dl, ml, buf_w[b + 3u], sh));
}
//#elif D0_Q3K
// hmask[32] qs[64] scales[12] d:f16; 16 signed 6-bit scales; value e: two low
// bits as Q2K (qs at byte 32), minus 4 where bit e / 32 of hmask[e % 32] is clear.
const QK: u32 = 256u;
const QB: u32 = 110u;
fn p3(dl: vec4<f32>, wd: u32, sh: u32, hm: u32, hb: u32) -> vec4<f32> {
    let q = vec4<i32>(bits4(wd, sh, 3u)) - vec4<i32>((bits4(hm, hb, 1u) ^ vec4<u32>(1u)) << vec4<u32>(2u));
    return dl * vec4<f32>(q);
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let lo4 = (wb(o + 96u + (r & 7u)) >> (4u * (r >> 3u))) & 0xfu;
    let hi2 = (wb(o + 104u + (r & 3u)) >> (2u * (r >> 2u))) & 3u;
    let dl = vec4<f32>(wf16(o + 108u) * f32(i32(lo4 | (hi2 << 4u)) - 32));
    let sh = 2u * ((r & 7u) >> 1u);
    let b = o + 32u + 32u * (r >> 3u) + 16u * (r & 1u);
    let h = o + 16u * (r & 1u);
    let hb = r >> 1u;
    return array<vec4<f32>, 4>(p3(dl, w32(b), sh, w32(h), hb), p3(dl, w32(b + 4u), sh, w32(h + 4u), hb),
                               p3(dl, w32(b + 8u), sh, w32(h + 8u), hb), p3(dl, w32(b + 12u), sh, w32(h + 12u), hb));
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
fn p45(dl: vec4<f32>, ml: vec4<f32>, wd: u32, sh: u32, hm: u32, hb: u32) -> vec4<f32> {
//#if D0_Q5K
    let q = bits4(wd, sh, 15u) | (bits4(hm, hb, 1u) << vec4<u32>(4u));
//#else
    let q = bits4(wd, sh, 15u);
//#endif
    return nofma4(dl * f4(q)) - ml;
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
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
    let dl = vec4<f32>(wf16(o) * f32(sc));
    let ml = vec4<f32>(wf16(o + 2u) * f32(mn));
    let b = (o + QS + 32u * (r >> 2u) + 16u * (r & 1u)) >> 2u;
    let sh = 4u * (sb & 1u);
//#if D0_Q5K
    let h = (o + 16u + 16u * (r & 1u)) >> 2u;
    return array<vec4<f32>, 4>(p45(dl, ml, buf_w[b], sh, buf_w[h], sb), p45(dl, ml, buf_w[b + 1u], sh, buf_w[h + 1u], sb),
                               p45(dl, ml, buf_w[b + 2u], sh, buf_w[h + 2u], sb), p45(dl, ml, buf_w[b + 3u], sh, buf_w[h + 3u], sb));
//#else
    return array<vec4<f32>, 4>(p45(dl, ml, buf_w[b], sh, 0u, 0u), p45(dl, ml, buf_w[b + 1u], sh, 0u, 0u),
                               p45(dl, ml, buf_w[b + 2u], sh, 0u, 0u), p45(dl, ml, buf_w[b + 3u], sh, 0u, 0u));
//#endif
}
//#elif D0_Q6K
// ql[128] qh[64] scales:i8[16] d:f16; value e = 128 h + 32 s + l: low nibble
// s / 2 of ql[64 h + 32 (s % 2) + l], two high bits 2 s of qh[32 h + l]; minus 32.
const QK: u32 = 256u;
const QB: u32 = 210u;
fn p6(dl: vec4<f32>, wl: u32, lsh: u32, wq: u32, hsh: u32) -> vec4<f32> {
    return dl * fi4(bits4(wl, lsh, 15u) | (bits4(wq, hsh, 3u) << vec4<u32>(4u)), 32);
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let dl = vec4<f32>(wf16(o + 208u) * f32(extractBits(i32(wb(o + 192u + r)), 0u, 8u)));
    let h = r >> 3u;
    let s = (r & 7u) >> 1u;
    let l0 = 16u * (r & 1u);
    let ql = o + 64u * h + 32u * (s & 1u) + l0;
    let qh = o + 128u + 32u * h + l0;
    let lsh = 4u * (s >> 1u);
    let hsh = 2u * s;
    return array<vec4<f32>, 4>(p6(dl, w32(ql), lsh, w32(qh), hsh), p6(dl, w32(ql + 4u), lsh, w32(qh + 4u), hsh),
                               p6(dl, w32(ql + 8u), lsh, w32(qh + 8u), hsh), p6(dl, w32(ql + 12u), lsh, w32(qh + 12u), hsh));
}
//#elif D0_Q8K
// d:f32 qs:i8[256] bsums:i16[16]; x = d * q.
const QK: u32 = 256u;
const QB: u32 = 292u;
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(bitcast<f32>(buf_w[o >> 2u]));
    let b = (o + 4u + 16u * r) >> 2u;
    return array<vec4<f32>, 4>(d * sbytes4(buf_w[b]), d * sbytes4(buf_w[b + 1u]),
                               d * sbytes4(buf_w[b + 2u]), d * sbytes4(buf_w[b + 3u]));
}
//#endif

// Runs of 16 per block, and whether the format has element-granular tails.
const RPB: u32 = max(QK / 16u, 1u);
const FLOATW: bool = QK == 1u;
