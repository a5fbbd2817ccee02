// cast.wgsl: y = a converted to y's dtype, with NumPy's / Rust's rules: float to
// int truncates toward zero and saturates (NaN -> 0); int to int wraps; anything to
// bool is `!= 0` (NaN is true). Registers: bool/u8/u32 are u32, i8/i16/i32 are i32.
fn conv(x: TA) -> TY {
//#if FLOAT_A and A_IS_f64
    let nan = isnan64(x);
//#elif FLOAT_A
    let nan = isnan32(x);
//#endif
//#if Y_IS_bool
    return select(1u, 0u, x == TA(0));
//#elif A_IS_f64 and (Y_IS_f16 or Y_IS_bf16 or SMALL_Y)
    // Through f32 this would round twice (1 + 2^-11 + 2^-30 would become 1, not NumPy's
    // 1 + 2^-10): round to odd in f32 (24 bits, over the half's 11 + 2), so the one
    // rounding to the half type that follows is exact.
    var r = f32(x);
    let back = f64(r);
    if (!nan && back != x) {
        var b = bitcast<u32>(r);
        if (abs(back) > abs(x)) { b = b - 1u; }
        r = bitcast<f32>(b | 1u);
    }
    return r;
//#elif FLOAT_A and not A_IS_f64 and Y_IS_f64
    // An f32 subnormal from its bits: NVIDIA's driver flushes it to zero in the
    // conversion (bf16 -> f64 and f32 -> f64 lost 9.2e-41).
    let bits = bitcast<u32>(x);
    if ((bits & 0x7f800000u) == 0u) {
        let v = f64(bits & 0x007fffffu) * 1.401298464324817e-45;
        return select(v, -v, (bits & 0x80000000u) != 0u);
    }
    return TY(x);
//#elif FLOAT_A and FLOAT_Y
    return TY(x);
//#elif FLOAT_A and Y_IS_u8
    if (nan) { return 0u; }
    return u32(clamp(x, TA(0), TA(255)));
//#elif FLOAT_A and Y_IS_i8
    if (nan) { return 0i; }
    return i32(clamp(x, TA(-128), TA(127)));
//#elif FLOAT_A and Y_IS_i16
    if (nan) { return 0i; }
    return i32(clamp(x, TA(-32768), TA(32767)));
//#elif FLOAT_A and Y_IS_i32
    if (nan) { return 0i; }
    if (x >= TA(2147483647.0)) { return 2147483647i; }
    if (x <= TA(-2147483648.0)) { return -2147483647i - 1i; }
    return i32(x);
//#elif FLOAT_A and Y_IS_u32
    if (nan || x <= TA(0)) { return 0u; }
    if (x >= TA(4294967295.0)) { return 0xffffffffu; }
    return u32(x);
//#elif FLOAT_A and Y_IS_i64
    if (nan) { return 0li; }
    if (x >= TA(9.223372036854775807e18)) { return 9223372036854775807li; }
    if (x <= TA(-9.223372036854775808e18)) { return -9223372036854775807li - 1li; }
    return i64(x);
//#elif FLOAT_Y
    return TY(x);
//#elif Y_IS_i64 and A_IS_i64
    return x;
//#elif Y_IS_i64 and I32_A
    return i64(x);
//#elif Y_IS_i64
    // u32 -> i64 must zero-extend: i64(x) of a u32 sign-extends on some compilers
    // (2^31 became -2^31), so the high word is masked off.
    return i64(x) & 0xffffffffli;
//#elif A_IS_i64 and Y_IS_u8
    return u32(x & 0xffli);
//#elif A_IS_i64 and I32_Y
    return bitcast<i32>(u32(x & 0xffffffffli));
//#elif A_IS_i64
    return u32(x & 0xffffffffli);
//#elif I32_Y and not I32_A
    return bitcast<i32>(x);
//#elif I32_A and not I32_Y
    return bitcast<u32>(x);
//#else
    return TY(x);
//#endif
}

fn elem(g: u32) -> TY { return conv(ld_a(map_idx(g, 0u))); }
