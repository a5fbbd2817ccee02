// math.wgsl: float math on the compute type T (f32, or f64 where the adapter has
// shader-f64). IEEE special cases are spelled out, because WGSL leaves many of
// them (log of a negative, pow of a negative, max with a NaN) to the driver, and
// the f64 transcendental functions are computed here in software: drivers are not
// required to implement them in double precision (llvmpipe returns garbage, and
// NVIDIA's compiler rejects log of a double, losing the device).

fn m_nan() -> T { return T(bitcast<f32>(F32_NAN_BITS)); }
fn m_inf() -> T { return T(bitcast<f32>(F32_INF_BITS)); }
// NaN tests: WGSL's `!=` is an *ordered* comparison in naga's output (NaN != NaN
// is false), so NaN is found from the bits (f32) or as "not equal to itself".
fn m_isnan(x: T) -> bool {
//#if T_F64
    return isnan64(x);
//#else
    return isnan32(x);
//#endif
}
fn m_isinf(x: T) -> bool { return abs(x) == m_inf(); }

// NaN-propagating max / min (NumPy's maximum / minimum).
fn m_max(a: T, b: T) -> T {
    if (m_isnan(a)) { return a; }
    if (m_isnan(b)) { return b; }
    return select(a, b, b > a);
}
fn m_min(a: T, b: T) -> T {
    if (m_isnan(a)) { return a; }
    if (m_isnan(b)) { return b; }
    return select(a, b, b < a);
}

// PyTorch's round: halves to the even neighbour. Written out (x - floor(x) is exact)
// rather than WGSL's round() because T may be f64.
fn m_round(x: T) -> T {
    let f = floor(x);
    let d = x - f;
    if (m_isnan(d)) { return x; }  // NaN and the infinities
    if (d > T(0.5)) { return f + T(1); }
    if (d < T(0.5)) { return f; }
    let odd = f - T(2) * floor(f * T(0.5));
    return f + odd;
}

fn m_sign(x: T) -> T {
    if (m_isnan(x)) { return x; }
    if (x > T(0)) { return T(1); }
    if (x < T(0)) { return T(-1); }
    return x;
}

fn m_sqrt(x: T) -> T {
    if (x < T(0)) { return m_nan(); }
    return sqrt(x);
}

//#if T_F64
// frexp of a positive finite double as (fraction in [0.5, 1), exponent), by exact
// scalings with powers of two: written with WGSL's frexp (whose exponent naga makes
// 64-bit for a double), the f64 log failed NVIDIA's Vulkan compiler ("NVVM
// compilation failed"), and a failed pipeline loses the whole device.
fn fr_down(me: vec2<f64>, p: f64, inv_p: f64, k: f64) -> vec2<f64> {
    return select(me, vec2<f64>(me.x * inv_p, me.y + k), me.x >= p);
}
fn fr_up(me: vec2<f64>, p: f64, below: f64, k: f64) -> vec2<f64> {
    return select(me, vec2<f64>(me.x * p, me.y - k), me.x < below);
}
fn m_frexp(x: T) -> vec2<T> {
    // A subnormal first goes up by 2^64, so that the steps below (1023 in all) reach 1.
    var me = select(vec2<f64>(x, 0.0), vec2<f64>(x * 18446744073709551616.0, -64.0),
                    x < 2.2250738585072014e-308);
    // Greedy binary steps: the exponent's bits from the highest, down to [1, 2).
    me = fr_down(me, 1.3407807929942597e+154, 7.458340731200207e-155, 512.0);
    me = fr_down(me, 1.157920892373162e+77, 8.636168555094445e-78, 256.0);
    me = fr_down(me, 3.402823669209385e+38, 2.938735877055719e-39, 128.0);
    me = fr_down(me, 1.8446744073709552e+19, 5.421010862427522e-20, 64.0);
    me = fr_down(me, 4294967296.0, 2.3283064365386963e-10, 32.0);
    me = fr_down(me, 65536.0, 1.52587890625e-05, 16.0);
    me = fr_down(me, 256.0, 0.00390625, 8.0);
    me = fr_down(me, 16.0, 0.0625, 4.0);
    me = fr_down(me, 4.0, 0.25, 2.0);
    me = fr_down(me, 2.0, 0.5, 1.0);
    me = fr_up(me, 1.3407807929942597e+154, 1.4916681462400413e-154, 512.0);
    me = fr_up(me, 1.157920892373162e+77, 1.727233711018889e-77, 256.0);
    me = fr_up(me, 3.402823669209385e+38, 5.877471754111438e-39, 128.0);
    me = fr_up(me, 1.8446744073709552e+19, 1.0842021724855044e-19, 64.0);
    me = fr_up(me, 4294967296.0, 4.656612873077393e-10, 32.0);
    me = fr_up(me, 65536.0, 3.0517578125e-05, 16.0);
    me = fr_up(me, 256.0, 0.0078125, 8.0);
    me = fr_up(me, 16.0, 0.125, 4.0);
    me = fr_up(me, 4.0, 0.5, 2.0);
    me = fr_up(me, 2.0, 1.0, 1.0);
    return vec2<f64>(me.x * 0.5, me.y + 1.0);
}
//#else
fn m_frexp(x: T) -> vec2<T> {
    let fr = frexp(x);
    return vec2<T>(fr.fract, T(fr.exp));
}
//#endif

//#if T_F64
fn m_exp(x: T) -> T {
    if (m_isnan(x)) { return x; }
    if (x > 709.782712893384) { return m_inf(); }
    if (x < -745.1332191019412) { return T(0); }
    let k = floor(x * 1.4426950408889634 + 0.5);
    let r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
    var p = T(1.0 / 6227020800.0);
    p = p * r + T(1.0 / 479001600.0);
    p = p * r + T(1.0 / 39916800.0);
    p = p * r + T(1.0 / 3628800.0);
    p = p * r + T(1.0 / 362880.0);
    p = p * r + T(1.0 / 40320.0);
    p = p * r + T(1.0 / 5040.0);
    p = p * r + T(1.0 / 720.0);
    p = p * r + T(1.0 / 120.0);
    p = p * r + T(1.0 / 24.0);
    p = p * r + T(1.0 / 6.0);
    p = p * r + T(0.5);
    p = p * r + T(1.0);
    p = p * r + T(1.0);
    let ki = i32(k);
    // Two steps so that 2^k never overflows on its own near the ends of the range.
    let h = ki / 2;
    return ldexp(ldexp(p, h), ki - h);
}

fn m_log(x: T) -> T {
    if (m_isnan(x)) { return x; }
    if (x < T(0)) { return m_nan(); }
    if (x == T(0)) { return -m_inf(); }
    if (x == m_inf()) { return x; }
    let fr = m_frexp(x);
    // select, not a branch: llvmpipe's LLVM fails on a branchy f64 / i32 phi here
    let adj = fr.x < 0.70710678118654752440;
    let m = select(fr.x, fr.x * 2.0, adj);
    let e = select(fr.y, fr.y - 1.0, adj);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    var p = T(1.0 / 25.0);
    p = p * z + T(1.0 / 23.0);
    p = p * z + T(1.0 / 21.0);
    p = p * z + T(1.0 / 19.0);
    p = p * z + T(1.0 / 17.0);
    p = p * z + T(1.0 / 15.0);
    p = p * z + T(1.0 / 13.0);
    p = p * z + T(1.0 / 11.0);
    p = p * z + T(1.0 / 9.0);
    p = p * z + T(1.0 / 7.0);
    p = p * z + T(1.0 / 5.0);
    p = p * z + T(1.0 / 3.0);
    p = p * z + T(1.0);
    let lg = 2.0 * s * p;
    return e * 6.93147180369123816490e-01 + (lg + e * 1.90821492927058770002e-10);
}

// sin and cos of |r| <= pi/4 (Taylor series, exact to double precision there).
fn sin_kernel(r: T) -> T {
    let z = r * r;
    var p = T(-1.0 / 121645100408832000.0);
    p = p * z + T(1.0 / 355687428096000.0);
    p = p * z + T(-1.0 / 1307674368000.0);
    p = p * z + T(1.0 / 6227020800.0);
    p = p * z + T(-1.0 / 39916800.0);
    p = p * z + T(1.0 / 362880.0);
    p = p * z + T(-1.0 / 5040.0);
    p = p * z + T(1.0 / 120.0);
    p = p * z + T(-1.0 / 6.0);
    return r + r * z * p;
}
fn cos_kernel(r: T) -> T {
    let z = r * r;
    var p = T(1.0 / 2432902008176640000.0);
    p = p * z + T(-1.0 / 6402373705728000.0);
    p = p * z + T(1.0 / 20922789888000.0);
    p = p * z + T(-1.0 / 87178291200.0);
    p = p * z + T(1.0 / 479001600.0);
    p = p * z + T(-1.0 / 3628800.0);
    p = p * z + T(1.0 / 40320.0);
    p = p * z + T(-1.0 / 720.0);
    p = p * z + T(1.0 / 24.0);
    p = p * z + T(-0.5);
    return 1.0 + z * p;
}
// (r, quadrant) with x = r + quadrant * pi/2 (Cody-Waite, three parts of pi/2).
fn trig_reduce(x: T) -> vec2<f64> {
    let k = floor(x * 0.63661977236758134308 + 0.5);
    let r = ((x - k * 1.57079632673412561417e+00) - k * 6.07710050630396597660e-11)
        - k * 2.02226624879595063154e-21;
    return vec2<f64>(r, k);
}
fn m_sin(x: T) -> T {
    if (m_isnan(x) || m_isinf(x)) { return m_nan(); }
    let rk = trig_reduce(x);
    let q = i32(rk.y) & 3;
    let r = rk.x;
    if (q == 0) { return sin_kernel(r); }
    if (q == 1) { return cos_kernel(r); }
    if (q == 2) { return -sin_kernel(r); }
    return -cos_kernel(r);
}
fn m_cos(x: T) -> T {
    if (m_isnan(x) || m_isinf(x)) { return m_nan(); }
    let rk = trig_reduce(x);
    let q = i32(rk.y) & 3;
    let r = rk.x;
    if (q == 0) { return cos_kernel(r); }
    if (q == 1) { return -sin_kernel(r); }
    if (q == 2) { return -cos_kernel(r); }
    return sin_kernel(r);
}
//#else
fn m_exp(x: T) -> T { return exp(x); }
fn m_log(x: T) -> T {
    if (m_isnan(x)) { return x; }
    let bits = bitcast<u32>(x) & 0x7fffffffu;
    if (bits == 0u) { return -m_inf(); }
    if (x < T(0)) { return m_nan(); }
    // Drivers flush subnormal inputs (log(1e-40) came out as log(2^-126)): a subnormal
    // is its bits times 2^-149, and its bits are an exact f32.
    if (bits < 0x00800000u) { return log(T(bits)) - T(103.27892990343185); }
    return log(x);
}
fn m_sin(x: T) -> T { return sin(x); }
fn m_cos(x: T) -> T { return cos(x); }
//#endif

// exp(x) - 1 without cancellation near 0.
fn m_expm1(x: T) -> T {
    if (abs(x) < T(0.5)) {
        var p = T(1.0 / 355687428096000.0);
        p = p * x + T(1.0 / 20922789888000.0);
        p = p * x + T(1.0 / 1307674368000.0);
        p = p * x + T(1.0 / 87178291200.0);
        p = p * x + T(1.0 / 6227020800.0);
        p = p * x + T(1.0 / 479001600.0);
        p = p * x + T(1.0 / 39916800.0);
        p = p * x + T(1.0 / 3628800.0);
        p = p * x + T(1.0 / 362880.0);
        p = p * x + T(1.0 / 40320.0);
        p = p * x + T(1.0 / 5040.0);
        p = p * x + T(1.0 / 720.0);
        p = p * x + T(1.0 / 120.0);
        p = p * x + T(1.0 / 24.0);
        p = p * x + T(1.0 / 6.0);
        p = p * x + T(0.5);
        p = p * x + T(1.0);
        return x * p;
    }
    return m_exp(x) - T(1);
}

fn m_tanh(x: T) -> T {
    if (m_isnan(x)) { return x; }
    let ax = abs(x);
    var t: T;
    if (ax > T(22)) {
        t = T(1);
    } else if (ax < T(0.55)) {
        let e = m_expm1(T(2) * ax);
        t = e / (e + T(2));
    } else {
        t = T(1) - T(2) / (m_exp(T(2) * ax) + T(1));
    }
    return select(t, -t, x < T(0));
}

fn m_sigmoid(x: T) -> T { return T(1) / (m_exp(-x) + T(1)); }

fn m_pow(x: T, y: T) -> T {
    if (y == T(0)) { return T(1); }
    // NumPy computes x ** 0.5 as sqrt(x) (so (-inf) ** 0.5 is NaN, not C's inf).
    if (y == T(0.5)) { return m_sqrt(x); }
    if (x == T(1)) { return T(1); }
    if (m_isnan(x) || m_isnan(y)) { return m_nan(); }
    let ax = abs(x);
    let yint = floor(y) == y;
    let yodd = yint && abs(y) < T(9007199254740992.0) && !(floor(y * T(0.5)) * T(2) == y);
    let neg = x < T(0) || (x == T(0) && T(1) / x < T(0));
    // A finite negative base with a non-integer exponent is NaN (C's pow).
    if (neg && !yint && !(ax == T(0)) && !(ax == m_inf())) { return m_nan(); }
    var r: T;
    if (ax == T(0)) {
        r = select(m_inf(), T(0), y > T(0));
    } else if (ax == m_inf()) {
        r = select(T(0), m_inf(), y > T(0));
    } else if (m_isinf(y)) {
        if (ax == T(1)) { return T(1); }
        r = select(select(m_inf(), T(0), y > T(0)), select(T(0), m_inf(), y > T(0)), ax > T(1));
        return r;
    } else {
        r = T(0);
        if (yint && abs(y) <= T(64)) {
            // Small integer powers are exact whenever the result is representable
            // (the driver's exp2(y * log2(x)) gave 6^4 = 1296.00098).
            let n = u32(abs(y));
            r = m_powi_exact(ax, i32(n));
            if (r == T(0)) {
                // Not representable: repeated squaring, a few roundings (the driver's
                // pow was off by up to 55 ulp).
                r = m_powi(ax, n);
            }
            // x^-n = 1 / x^n: one more rounding.
            if (y < T(0) && r != T(0)) { r = T(1) / r; }
        }
        if (r == T(0) || m_isinf(r)) {
//#if T_F64
            r = m_exp(y * m_log(ax));
//#else
            r = pow(ax, y);
//#endif
        }
    }
    if (neg && yodd) { r = -r; }
    return r;
}

// x^n for a small n >= 1, by repeated squaring.
fn m_powi(x: T, n: u32) -> T {
    var b = x;
    var e = n;
    var r = T(1);
    loop {
        if ((e & 1u) == 1u) { r = r * b; }
        e = e >> 1u;
        if (e == 0u) { break; }
        b = b * b;
    }
    return r;
}

// |x|^n exactly, when that is representable; 0 otherwise. |x| = m 2^k with m an odd
// integer, so |x|^n = m^n 2^(nk) is representable when m^n < 2^P (P the significand
// bits) and the exponent is in the normal range. Integer-valued products below
// 2^P are exact in T whatever the driver's optimiser does.
fn m_powi_exact(ax: T, n: i32) -> T {
//#if T_F64
    let P = T(9007199254740992.0);
    let bits = 53;
    let lo = T(2.2250738585072014e-308);
//#else
    let P = T(16777216.0);
    let bits = 24;
    let lo = T(1.17549435e-38);
//#endif
    let fr = m_frexp(ax);
    var m = fr.x * P;
    var k = i32(fr.y) - bits;
    for (var i = 0; i < bits; i = i + 1) {
        let h = m * T(0.5);
        if (floor(h) != h) { break; }
        m = h;
        k = k + 1;
    }
    let an = abs(n);
    var r = T(1);
    for (var i = 0; i < an; i = i + 1) {
        r = r * m;
        if (r >= P) { return T(0); }
    }
    let e = select(an, -an, n < 0) * k;
    if (e > 1100 || e < -1100) { return T(0); }
    let out = ldexp(r, e);
    if (m_isinf(out) || out < lo) { return T(0); }
    return out;
}

// erf, after Sun's fdlibm s_erf.c (its published coefficients; freely
// distributable), evaluated in T.
fn m_erf(x: T) -> T {
    if (m_isnan(x)) { return x; }
    let ax = abs(x);
    let sgn = select(T(1), T(-1), x < T(0));
    if (ax < T(0.84375)) {
        if (ax < T(3.7252902984e-09)) { return x + T(1.28379167095512586316e-01) * x; }
        let z = x * x;
        let r = T(1.28379167095512558561e-01) + z * (T(-3.25042107247001499370e-01) + z * (T(-2.84817495755985104766e-02)
            + z * (T(-5.77027029648944159157e-03) + z * T(-2.37630166566501626084e-05))));
        let s = T(1) + z * (T(3.97917223959155352819e-01) + z * (T(6.50222499887672944485e-02) + z * (T(5.08130628187576562776e-03)
            + z * (T(1.32494738004321644526e-04) + z * T(-3.96022827877536812320e-06)))));
        return x + x * (r / s);
    }
    if (ax < T(1.25)) {
        let s = ax - T(1);
        let p = T(-2.36211856075265944077e-03) + s * (T(4.14856118683748331666e-01) + s * (T(-3.72207876035701323847e-01)
            + s * (T(3.18346619901161753674e-01) + s * (T(-1.10894694282396677476e-01) + s * (T(3.54783043256182359371e-02)
            + s * T(-2.16637559486879084300e-03))))));
        let q = T(1) + s * (T(1.06420880400844228286e-01) + s * (T(5.40397917702171048937e-01) + s * (T(7.18286544141962662868e-02)
            + s * (T(1.26171219808761642112e-01) + s * (T(1.36370839120290507362e-02) + s * T(1.19844998467991074170e-02))))));
        return sgn * (T(8.45062911510467529297e-01) + p / q);
    }
    if (ax >= T(6)) { return sgn; }
    let s = T(1) / (ax * ax);
    var r: T;
    var q: T;
    if (ax < T(2.857142857142857)) {
        r = T(-9.86494403484714822705e-03) + s * (T(-6.93858572707181764372e-01) + s * (T(-1.05586262253232909814e+01)
            + s * (T(-6.23753324503260060396e+01) + s * (T(-1.62396669462573470355e+02) + s * (T(-1.84605092906711035994e+02)
            + s * (T(-8.12874355063065934246e+01) + s * T(-9.81432934416914548592e+00)))))));
        q = T(1) + s * (T(1.96512716674392571292e+01) + s * (T(1.37657754143519042600e+02) + s * (T(4.34565877475229228821e+02)
            + s * (T(6.45387271733267880336e+02) + s * (T(4.29008140027567833386e+02) + s * (T(1.08635005541779435134e+02)
            + s * (T(6.57024977031928170135e+00) + s * T(-6.04244152148580987438e-02))))))));
    } else {
        r = T(-9.86494292470009928597e-03) + s * (T(-7.99283237680523006574e-01) + s * (T(-1.77579549177547519889e+01)
            + s * (T(-1.60636384855821916062e+02) + s * (T(-6.37566443368389627722e+02) + s * (T(-1.02509513161107724954e+03)
            + s * T(-4.83519191608651397019e+02))))));
        q = T(1) + s * (T(3.03380607434824582924e+01) + s * (T(3.25792512996573918826e+02) + s * (T(1.53672958608443695994e+03)
            + s * (T(3.19985821950859553908e+03) + s * (T(2.55305040643316442583e+03) + s * (T(4.74528541206955367215e+02)
            + s * T(-2.24409524465858183362e+01)))))));
    }
    // erfc(ax) = exp(-z*z - 0.5625) * exp((z - ax)(z + ax) + r/q) / ax, z = ax rounded to f32
    let z = T(f32(ax));
    let e = m_exp(-z * z - T(0.5625)) * m_exp((z - ax) * (z + ax) + r / q);
    return sgn * (T(1) - e / ax);
}
