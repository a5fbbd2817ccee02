// quantized_formats.wgsl: GGML block decoders, one format per module (the flag
// D0_<type> picks it). The weight buffer buf_w is array<u32> holding the blocks
// back to back from byte 0 of its binding; blocks are not 4-byte aligned in
// general (Q4_0: 18 bytes), so fields are read as bytes / halves / unaligned
// words with shifts. The layouts are those of src/tallow/ggml/README.md (ggml-common.h).
//
// Every format provides
//   QK, QB     elements and bytes per block;
//   dq16(o, r, lim) -> array<vec4<f32>, 4>: piece r of the block at byte o, 16
//              values (a block holds QK / 16 pieces); value i of vec4 j is element
//              xoff(r, j) + i of the block. A piece is what a few loaded words
//              decode to: Q4_0's piece is 8 bytes of nibbles, elements 8 r .. + 7
//              and 16 + 8 r .. + 7, as in ggml's Metal kernels. Float formats
//              (QK = 1) take o = the element index of the piece's first element
//              (16 consecutive ones) and give 0 at or past the element index lim.
// The decoders are written without loops (four vec4s from a few words), which
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
fn xoff(r: u32, j: u32) -> u32 { return 4u * j; }
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
fn xoff(r: u32, j: u32) -> u32 { return 4u * j; }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(fv4(o, lim), fv4(o + 4u, lim), fv4(o + 8u, lim), fv4(o + 12u, lim));
}
//#elif D0_Q4_0 or D0_Q4_1 or D0_Q5_0 or D0_Q5_1
// Q4_0  d:f16 qs[16]                 x = d * (q - 8)
// Q4_1  d:f16 m:f16 qs[16]           x = d * q + m
// Q5_0  d:f16 qh:u32 qs[16]          x = d * (q - 16)
// Q5_1  d:f16 m:f16 qh:u32 qs[16]    x = d * q + m
// qs byte j holds element j (low nibble) and j + 16 (high); bit j of qh is the
// fifth bit of element j. Piece r: bytes 8 r .. 8 r + 7, both nibbles.
const QK: u32 = 32u;
//#if D0_Q4_0
const QB: u32 = 18u;
const QS: u32 = 2u;
//#elif D0_Q4_1
const QB: u32 = 20u;
const QS: u32 = 4u;
//#elif D0_Q5_0
const QB: u32 = 22u;
const QS: u32 = 6u;
//#else
const QB: u32 = 24u;
const QS: u32 = 8u;
//#endif
fn xoff(r: u32, j: u32) -> u32 { return 8u * r + 4u * (j & 1u) + 16u * (j >> 1u); }
fn p4(d: vec4<f32>, m: vec4<f32>, wd: u32, sh: u32, qh: u32, e0: u32) -> vec4<f32> {
//#if D0_Q5_0 or D0_Q5_1
    let q = bits4(wd, sh, 15u) | (bit4(qh, e0) << vec4<u32>(4u));
//#else
    let q = bits4(wd, sh, 15u);
//#endif
//#if D0_Q4_0
    return d * fi4(q, 8);
//#elif D0_Q5_0
    return d * fi4(q, 16);
//#else
    return nofma4(d * f4(q)) + m;
//#endif
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
//#if D0_Q4_1 or D0_Q5_1
    let m = vec4<f32>(wf16(o + 2u));
//#else
    let m = vec4<f32>(0.0);
//#endif
//#if D0_Q5_0 or D0_Q5_1
    let qh = w32(o + QS - 4u);
//#else
    let qh = 0u;
//#endif
    let w0 = w32(o + QS + 8u * r);
    let w1 = w32(o + QS + 8u * r + 4u);
    let e0 = 8u * r;
    return array<vec4<f32>, 4>(p4(d, m, w0, 0u, qh, e0), p4(d, m, w1, 0u, qh, e0 + 4u),
                               p4(d, m, w0, 4u, qh, e0 + 16u), p4(d, m, w1, 4u, qh, e0 + 20u));
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
fn xoff(r: u32, j: u32) -> u32 { return 16u * r + 4u * j; }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
    let b = o + QS + 16u * r;
    return array<vec4<f32>, 4>(sbytes4(w32(b)) * d, sbytes4(w32(b + 4u)) * d,
                               sbytes4(w32(b + 8u)) * d, sbytes4(w32(b + 12u)) * d);
}
//#elif D0_Q2K or D0_Q3K
// Q2K  scales[16] qs[64] d:f16 dmin:f16   x = d * (sc & 15) * q - dmin * (sc >> 4)
// Q3K  hmask[32] qs[64] scales[12] d:f16  x = d * sc * q, sc signed 6-bit (12 bytes)
// 16 sub-blocks of 16; value e = 128 c + 32 s + l has its two low bits in qs byte
// 32 c + l at bit 2 s; Q3K subtracts 4 where bit e / 32 of hmask[e % 32] is clear.
// Piece r: c = r / 8, l = 4 (r % 8) .. + 3, s = 0 .. 3 (four sub-blocks).
const QK: u32 = 256u;
//#if D0_Q2K
const QB: u32 = 84u;
const QS: u32 = 16u;
//#else
const QB: u32 = 110u;
const QS: u32 = 32u;
//#endif
fn xoff(r: u32, j: u32) -> u32 { return 128u * (r >> 3u) + 32u * j + 4u * (r & 7u); }
//#if D0_Q2K
fn p2(d: f32, dmin: f32, sc: u32, wd: u32, s: u32) -> vec4<f32> {
    let dl = vec4<f32>(d * f32(sc & 0xfu));
    let ml = vec4<f32>(dmin * f32(sc >> 4u));
    return nofma4(dl * f4(bits4(wd, 2u * s, 3u))) - ml;
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let c = r >> 3u;
    let l0 = 4u * (r & 7u);
    let wd = buf_w[(o + QS + 32u * c + l0) >> 2u];
    let sc = o + 8u * c + (l0 >> 4u);
    let d = wf16(o + 80u);
    let dmin = wf16(o + 82u);
    return array<vec4<f32>, 4>(p2(d, dmin, wb(sc), wd, 0u), p2(d, dmin, wb(sc + 2u), wd, 1u),
                               p2(d, dmin, wb(sc + 4u), wd, 2u), p2(d, dmin, wb(sc + 6u), wd, 3u));
}
//#else
fn q3sc(o: u32, j: u32) -> f32 {
    let lo4 = (wb(o + 96u + (j & 7u)) >> (4u * (j >> 3u))) & 0xfu;
    let hi2 = (wb(o + 104u + (j & 3u)) >> (2u * (j >> 2u))) & 3u;
    return f32(i32(lo4 | (hi2 << 4u)) - 32);
}
fn p3(d: f32, o: u32, j: u32, wd: u32, s: u32, hm: u32, hb: u32) -> vec4<f32> {
    let q = vec4<i32>(bits4(wd, 2u * s, 3u)) - vec4<i32>((bits4(hm, hb, 1u) ^ vec4<u32>(1u)) << vec4<u32>(2u));
    return vec4<f32>(d * q3sc(o, j)) * vec4<f32>(q);
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let c = r >> 3u;
    let l0 = 4u * (r & 7u);
    let wd = w32(o + QS + 32u * c + l0);
    let hm = w32(o + l0);
    let j0 = 8u * c + (l0 >> 4u);
    let d = wf16(o + 108u);
    return array<vec4<f32>, 4>(p3(d, o, j0, wd, 0u, hm, 4u * c), p3(d, o, j0 + 2u, wd, 1u, hm, 4u * c + 1u),
                               p3(d, o, j0 + 4u, wd, 2u, hm, 4u * c + 2u), p3(d, o, j0 + 6u, wd, 3u, hm, 4u * c + 3u));
}
//#endif
//#elif D0_Q4K or D0_Q5K
// Q4K  d:f16 dmin:f16 scales[12] qs[128]; Q5K: the same with qh[32] before qs.
// 8 sub-blocks of 32 with 6-bit scales and mins: x = d * sc * q - dmin * mn;
// sub-block 2 c + t is the nibbles t of qs bytes 32 c ..; Q5K's fifth bit of value
// 32 sb + l is bit sb of qh[l]. Piece r: c = r / 4, bytes 32 c + 8 (r % 4) .. + 7,
// both nibbles (sub-blocks 2 c and 2 c + 1).
const QK: u32 = 256u;
//#if D0_Q4K
const QB: u32 = 144u;
const QS: u32 = 16u;
//#else
const QB: u32 = 176u;
const QS: u32 = 48u;
//#endif
fn xoff(r: u32, j: u32) -> u32 { return 64u * (r >> 2u) + 8u * (r & 3u) + 4u * (j & 1u) + 32u * (j >> 1u); }
// get_scale_min_k4 for sub-blocks 2 c and 2 c + 1 from the 12 scale bytes (three
// aligned words): (scale, min, scale, min), branch free.
fn scmin2(o: u32, c: u32) -> vec4<u32> {
    let i = vec2<u32>(2u * c, 2u * c + 1u) & vec2<u32>(3u);
    let a = (vec2<u32>(buf_w[(o + 4u) >> 2u]) >> (8u * i)) & vec2<u32>(0xffu);
    let b = (vec2<u32>(buf_w[(o + 8u) >> 2u]) >> (8u * i)) & vec2<u32>(0xffu);
    let m = (vec2<u32>(buf_w[(o + 12u) >> 2u]) >> (8u * i)) & vec2<u32>(0xffu);
    var sc = a & vec2<u32>(63u);
    var mn = b & vec2<u32>(63u);
    if (c >= 2u) {
        sc = (m & vec2<u32>(15u)) | ((a >> vec2<u32>(6u)) << vec2<u32>(4u));
        mn = (m >> vec2<u32>(4u)) | ((b >> vec2<u32>(6u)) << vec2<u32>(4u));
    }
    return vec4<u32>(sc.x, mn.x, sc.y, mn.y);
}
fn p45(dl: vec4<f32>, ml: vec4<f32>, wd: u32, sh: u32, hm: u32, hb: u32) -> vec4<f32> {
//#if D0_Q5K
    let q = bits4(wd, sh, 15u) | (bits4(hm, hb, 1u) << vec4<u32>(4u));
//#else
    let q = bits4(wd, sh, 15u);
//#endif
    return nofma4(dl * f4(q)) - ml;
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let c = r >> 2u;
    let d = wf16(o);
    let dmin = wf16(o + 2u);
    let sm = scmin2(o, c);
    let dl0 = vec4<f32>(d * f32(sm.x));
    let ml0 = vec4<f32>(dmin * f32(sm.y));
    let dl1 = vec4<f32>(d * f32(sm.z));
    let ml1 = vec4<f32>(dmin * f32(sm.w));
    let b = (o + QS + 32u * c + 8u * (r & 3u)) >> 2u;
    let w0 = buf_w[b];
    let w1 = buf_w[b + 1u];
//#if D0_Q5K
    let h = (o + 16u + 8u * (r & 3u)) >> 2u;
    let h0 = buf_w[h];
    let h1 = buf_w[h + 1u];
//#else
    let h0 = 0u;
    let h1 = 0u;
//#endif
    return array<vec4<f32>, 4>(p45(dl0, ml0, w0, 0u, h0, 2u * c), p45(dl0, ml0, w1, 0u, h1, 2u * c),
                               p45(dl1, ml1, w0, 4u, h0, 2u * c + 1u), p45(dl1, ml1, w1, 4u, h1, 2u * c + 1u));
}
//#elif D0_Q6K
// ql[128] qh[64] scales:i8[16] d:f16; value e = 128 h + 32 s + l: low nibble
// s / 2 of ql[64 h + 32 (s % 2) + l], two high bits 2 s of qh[32 h + l], minus 32;
// x = d * scales[e / 16] * q. Piece r: h = r / 8, l = 4 (r % 8) .. + 3, s = 0 .. 3.
const QK: u32 = 256u;
const QB: u32 = 210u;
fn xoff(r: u32, j: u32) -> u32 { return 128u * (r >> 3u) + 32u * j + 4u * (r & 7u); }
fn p6(d: f32, sc: u32, sb: u32, wl: u32, lsh: u32, wq: u32, hsh: u32) -> vec4<f32> {
    let dl = vec4<f32>(d * f32(extractBits(bitcast<i32>(sc), 8u * sb, 8u)));
    return dl * fi4(bits4(wl, lsh, 15u) | (bits4(wq, hsh, 3u) << vec4<u32>(4u)), 32);
}
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let h = r >> 3u;
    let l0 = 4u * (r & 7u);
    let ql0 = w32(o + 64u * h + l0);
    let ql1 = w32(o + 64u * h + 32u + l0);
    let qh = w32(o + 128u + 32u * h + l0);
    // scales of sub-blocks 8 h + 2 s + l0 / 16, s = 0 .. 3: bytes 0 and 2 of two words
    let sa = w32(o + 192u + 8u * h + (l0 >> 4u));
    let sb = w32(o + 196u + 8u * h + (l0 >> 4u));
    let d = wf16(o + 208u);
    return array<vec4<f32>, 4>(p6(d, sa, 0u, ql0, 0u, qh, 0u), p6(d, sa, 2u, ql1, 0u, qh, 2u),
                               p6(d, sb, 0u, ql0, 4u, qh, 4u), p6(d, sb, 2u, ql1, 4u, qh, 6u));
}
//#elif D0_IQ4_NL or D0_IQ4_XS
// IQ4_NL  d:f16 qs[16]                                  x = d * K[q]
// IQ4_XS  d:f16 scales_h:u16 scales_l[4] qs[128]        x = d * (ls - 32) * K[q]
// K = kvalues_iq4nl, four signed bytes a word (level q is byte q % 4 of word q / 4).
// As Q4_0, the 16 bytes of a 32-value (sub-)block hold element j in the low nibble of
// byte j and element j + 16 in its high nibble; piece r takes bytes 8 r .. 8 r + 7 (of
// sub-block r / 2 for IQ4_XS, whose scale ls has 4 bits in scales_l, 2 in scales_h).
const KV0: u32 = 0xBFAD9881u;
const KV1: u32 = 0xF6EADDCFu;
const KV2: u32 = 0x26190D01u;
const KV3: u32 = 0x71594535u;
fn kv4(q: vec4<u32>) -> vec4<f32> {
    let odd = (q & vec4<u32>(4u)) != vec4<u32>(0u);
    let wd = select(select(vec4<u32>(KV0), vec4<u32>(KV1), odd), select(vec4<u32>(KV2), vec4<u32>(KV3), odd),
                    q >= vec4<u32>(8u));
    let sh = vec4<u32>(24u) - (q & vec4<u32>(3u)) * vec4<u32>(8u);
    return vec4<f32>(bitcast<vec4<i32>>(wd << sh) >> vec4<u32>(24u));
}
//#if D0_IQ4_NL
const QK: u32 = 32u;
const QB: u32 = 18u;
fn xoff(r: u32, j: u32) -> u32 { return 8u * r + 4u * (j & 1u) + 16u * (j >> 1u); }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let d = vec4<f32>(wf16(o));
    let q = o + 2u + 8u * r;  // the piece's 8 bytes
//#else
const QK: u32 = 256u;
const QB: u32 = 136u;
fn xoff(r: u32, j: u32) -> u32 { return 32u * (r >> 1u) + 8u * (r & 1u) + 4u * (j & 1u) + 16u * (j >> 1u); }
fn dq16(o: u32, r: u32, lim: u32) -> array<vec4<f32>, 4> {
    let ib = r >> 1u;
    let ls = ((wb(o + 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 15u) | (((wh(o + 2u) >> (2u * ib)) & 3u) << 4u);
    let d = vec4<f32>(wf16(o) * f32(i32(ls) - 32));
    let q = o + 8u + 16u * ib + 8u * (r & 1u);  // the piece's 8 bytes
//#endif
    let w0 = w32(q);
    let w1 = w32(q + 4u);
    return array<vec4<f32>, 4>(d * kv4(bits4(w0, 0u, 15u)), d * kv4(bits4(w1, 0u, 15u)),
                               d * kv4(bits4(w0, 4u, 15u)), d * kv4(bits4(w1, 4u, 15u)));
}
//#elif D0_Q8K
// d:f32 qs:i8[256] bsums:i16[16]; x = d * q.
const QK: u32 = 256u;
const QB: u32 = 292u;
fn xoff(r: u32, j: u32) -> u32 { return 16u * r + 4u * j; }
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
// The column (within a row of W) of value 4 j of piece g of that row.
fn xcol(g: u32, j: u32) -> u32 {
    if (FLOATW) { return 16u * g + 4u * j; }
    return (g / RPB) * QK + xoff(g % RPB, j);
}
