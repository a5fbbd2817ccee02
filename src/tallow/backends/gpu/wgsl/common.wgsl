// common.wgsl: what every module starts with (WGSL has no #include, so the
// loader prepends this file and a generated binding prelude to each family file).
//
// Parameters: one 256-byte slot of a uniform ring, bound with a dynamic offset,
// read as 64 u32 words. Each family documents its own word map.
struct Params { w: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;

fn pw(i: u32) -> u32 { return P.w[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(pw(i)); }
fn pi32(i: u32) -> i32 { return bitcast<i32>(pw(i)); }

const WG: u32 = 256u;

// The linear invocation index of a 2-D grid of WG-wide workgroups (a grid is
// x * y workgroups because one dimension holds at most the adapter's limit, 65535 on most;
// kernel_args.grid lays it out).
fn lin(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

const F32_NAN_BITS: u32 = 0x7fc00000u;
fn isnan32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
const F32_INF_BITS: u32 = 0x7f800000u;

// -- f16 and bf16 codecs (bit exact, round to nearest even, as NumPy) ------------
fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8;
        return bitcast<f32>(bitcast<u32>(v) | s);
    }
    if (e == 31u) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let s = (x >> 16u) & 0x8000u;
    let ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        return s | 0x7c00u | select(0u, 0x200u | ((ax >> 13u) & 0x3ffu), ax > 0x7f800000u);
    }
    if (ax >= 0x477ff000u) { return s | 0x7c00u; }
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) { return s; }
        let e = ax >> 23u;
        let m = (ax & 0x7fffffu) | 0x800000u;
        let shift = 126u - e;
        let q = m >> shift;
        let rem = m & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        var r = q;
        if (rem > half || (rem == half && (q & 1u) == 1u)) { r = r + 1u; }
        return s | r;
    }
    var h = (ax >> 13u) - (112u << 10u);
    let rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) { h = h + 1u; }
    return s | h;
}

fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }

fn f32_to_bf16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) { return ((x >> 16u) | 0x40u) & 0xffffu; }
    return ((x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u) & 0xffffu;
}

//#if HAS_F64
fn isnan64(x: f64) -> bool { return !(x == x); }
// An f64 from its two 32-bit halves (WGSL cannot bitcast to f64).
fn f64_from_words(lo: u32, hi: u32) -> f64 {
    let e = (hi >> 20u) & 0x7ffu;
    let mant = f64(hi & 0xfffffu) * 4294967296.0 + f64(lo);
    var v: f64;
    if (e == 0x7ffu) {
        if (mant != 0.0) { return f64(bitcast<f32>(F32_NAN_BITS)); }
        v = f64(bitcast<f32>(F32_INF_BITS));
    } else if (e == 0u) {
        v = ldexp(mant, -1074);
    } else {
        v = ldexp(mant + 4503599627370496.0, i32(e) - 1075);
    }
    return select(v, -v, (hi & 0x80000000u) != 0u);
}
fn pf64(i: u32) -> f64 { return f64_from_words(pw(i), pw(i + 1u)); }
//#endif

//#if HAS_I64
// The low word in two halves below 2^31: lavapipe sign-extends i64(lo) for lo >= 2^31
// (2^31 came through as -2^31), so no half may have its top bit set.
fn i64_from_words(lo: u32, hi: u32) -> i64 {
    return (i64(bitcast<i32>(hi)) << 32u) | (i64(lo >> 16u) << 16u) | i64(lo & 0xFFFFu);
}
fn pi64(i: u32) -> i64 { return i64_from_words(pw(i), pw(i + 1u)); }
//#endif

// -- strided indexing -------------------------------------------------------------
// A layout in the parameter words: rank at RANK_W, shape at SHAPE_W.., and an
// operand's strides at its own STRIDE_W.., its start offset at its OFF_W.
fn strided(i: u32, rank: u32, shape_w: u32, stride_w: u32, off: u32) -> u32 {
    var rem = i;
    var idx = off;
    for (var d = rank; d > 0u; d = d - 1u) {
        let sz = pw(shape_w + d - 1u);
        idx = idx + (rem % sz) * pw(stride_w + d - 1u);
        rem = rem / sz;
    }
    return idx;
}

// -- element-wise ("map") kernels ----------------------------------------------------
// Word map: 0 n (elements of this dispatch), 1 output words, 2 base (global index
// of element 0 of this dispatch), 3 rank, 4 contiguous-operand bits, 5..7 operand
// offsets, 8..15 scalars (two words each), 16..23 shape, 24.. 8 strides per operand.
// CONTIG (an override constant) is set when every operand is contiguous: the
// pipeline then has no strided code at all.
override CONTIG: bool = false;

fn map_idx(g: u32, k: u32) -> u32 {
    let off = pw(5u + k);
    if (CONTIG) { return off + g; }
    if ((pw(4u) & (1u << k)) != 0u) { return off + g; }
    return strided(g, pw(3u), 16u, 24u + 8u * k, off);
}

//#if HAS_SMALL
// -- the 8-, 6- and 4-bit float codecs (one byte per element; bit exact with ml_dtypes) --
// A sign-magnitude code of E exponent bits, M mantissa bits and bias B (no inf; NaN
// codes are handled by each format's function).
fn small_to_f32(h: u32, E: u32, M: u32, B: i32) -> f32 {
    let e = (h >> M) & ((1u << E) - 1u);
    let m = h & ((1u << M) - 1u);
    var v: f32;
    if (e == 0u) {
        v = ldexp(f32(m), 1 - B - i32(M));
    } else {
        v = ldexp(f32(m | (1u << M)), i32(e) - B - i32(M));
    }
    return select(v, -v, (h & (1u << (E + M))) != 0u);
}

// The code of a finite |a| rounded to nearest even (WGSL's round is half-to-even), in
// a format of M mantissa bits and bias B; above the largest finite code it grows on
// (the caller saturates or makes NaN). A mantissa rounded up to 2^(M+1) carries into
// the exponent field, as the code's layout wants.
fn small_magnitude(a: f32, M: u32, B: i32) -> u32 {
    let e_min = 1 - B;
    let e = i32((bitcast<u32>(a) >> 23u) & 0xffu) - 127;
    if (e < e_min) {
        return u32(round(ldexp(a, i32(M) - e_min)));
    }
    let q = u32(round(ldexp(a, i32(M) - e)));
    return (u32(e - e_min + 1) << M) + q - (1u << M);
}

// float8_e4m3fn: no infinity, 0x7f / 0xff are NaN; beyond 448 (after rounding) is NaN.
fn f8e4m3_to_f32(h: u32) -> f32 {
    if ((h & 0x7fu) == 0x7fu) { return bitcast<f32>(F32_NAN_BITS | ((h & 0x80u) << 24u)); }
    return small_to_f32(h, 4u, 3u, 7);
}
fn f32_to_f8e4m3(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let s = (x >> 24u) & 0x80u;
    let ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { return s | 0x7fu; }
    return s | min(small_magnitude(bitcast<f32>(ax), 3u, 7), 0x7fu);
}

// float6_e2m3fn, float6_e3m2fn, float4_e2m1fn: no infinity or NaN; out of range
// (infinity included) saturates to the largest finite value, NaN becomes a zero of
// the opposite sign (+NaN -> -0), as ml_dtypes converts it.
fn f6e2m3_to_f32(h: u32) -> f32 { return small_to_f32(h, 2u, 3u, 1); }
fn f6e3m2_to_f32(h: u32) -> f32 { return small_to_f32(h, 3u, 2u, 3); }
fn f4_to_f32(h: u32) -> f32 { return small_to_f32(h, 2u, 1u, 1); }
fn f32_to_saturating(f: f32, M: u32, B: i32, sign: u32, max_code: u32) -> u32 {
    let x = bitcast<u32>(f);
    let ax = x & 0x7fffffffu;
    let s = select(0u, sign, (x & 0x80000000u) != 0u);
    if (ax > 0x7f800000u) { return sign ^ s; }  // ml_dtypes: NaN becomes a zero of the other sign
    if (ax == 0x7f800000u) { return s | max_code; }
    return s | min(small_magnitude(bitcast<f32>(ax), M, B), max_code);
}
fn f32_to_f6e2m3(f: f32) -> u32 { return f32_to_saturating(f, 3u, 1, 0x20u, 0x1fu); }
fn f32_to_f6e3m2(f: f32) -> u32 { return f32_to_saturating(f, 2u, 3, 0x20u, 0x1fu); }
fn f32_to_f4(f: f32) -> u32 { return f32_to_saturating(f, 1u, 1, 0x8u, 0x7u); }

// float8_e8m0fnu: a biased power of two 2^(h - 127), 0xff is NaN; zero, negatives,
// infinity and NaN all become NaN; a mantissa of one half or more rounds up.
fn f8e8m0_to_f32(h: u32) -> f32 {
    if (h == 0xffu) { return bitcast<f32>(F32_NAN_BITS); }
    if (h == 0u) { return bitcast<f32>(0x00400000u); }
    return bitcast<f32>(h << 23u);
}
fn f32_to_f8e8m0(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    if (x == 0u || x >= 0x7f800000u) { return 0xffu; }
    let e = x >> 23u;
    let m = x & 0x7fffffu;
    if (e == 0u) { return select(0u, 1u, m >= 0x600000u); }
    return min(e + select(0u, 1u, m >= 0x400000u), 0xffu);
}
//#endif
