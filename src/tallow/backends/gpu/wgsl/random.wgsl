// random.wgsl: counter-based random numbers (Philox4x32-10): element g of a call
// is a pure function of (seed, the call's counter offset + g), so results are
// reproducible run to run and independent of how the work is scheduled.
//   OP 0: uniform in [lo, hi); OP 1: normal (Box-Muller) with mean, std.
// f16 / bf16 draw in f32 and round; f64 draws 53-bit uniforms.
// Scalars 0, 1: (lo, hi) or (mean, std); words 16, 17 seed, 18, 19 offset.
override OP: u32 = 0u;

fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, a * b);
}

fn philox(ctr_in: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var c = ctr_in;
    var k = key_in;
    for (var i = 0u; i < 10u; i = i + 1u) {
        let p0 = mulhilo(0xD2511F53u, c.x);
        let p1 = mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
        k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

fn uniform01(a: u32, b: u32) -> T {
//#if T_F64
    return (T(a >> 5u) * 67108864.0 + T(b >> 6u)) * (1.0 / 9007199254740992.0);
//#else
    return T(a >> 8u) * T(5.9604644775390625e-8);
//#endif
}

fn elem(g: u32) -> TY {
    let lo = pw(18u) + g;
    let hi = pw(19u) + select(0u, 1u, lo < g);
    let r = philox(vec4<u32>(lo, hi, 0x7a11u, 0u), vec2<u32>(pw(16u), pw(17u)));
    let u = uniform01(r.x, r.y);
    if (OP == 0u) {
        let v = sc(0u) + u * (sc(1u) - sc(0u));
        return TY(v);
    }
    let u1 = T(1) - u;
    let u2 = uniform01(r.z, r.w);
    let z = sqrt(T(-2) * m_log(u1)) * m_cos(T(6.283185307179586) * u2);
    return TY(sc(0u) + z * sc(1u));
}
