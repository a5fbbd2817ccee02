// unary.wgsl: y = f(a). OP (an override constant) picks the function; scalars
// (affine, powf, elu, clamp) come from the parameter words via sc(k).
override OP: u32 = 0u;

fn f(x: T) -> T {
//#if T_FLOAT
    switch OP {
        case 0u: { return -x; }
        case 1u: { return abs(x); }
        case 2u: { return m_exp(x); }
        case 3u: { return m_log(x); }
        case 4u: { return m_sin(x); }
        case 5u: { return m_cos(x); }
        case 6u: { return m_tanh(x); }
        case 7u: { return x * x; }
        case 8u: { return m_sqrt(x); }
        case 9u: { return T(1) / x; }
        case 10u: { return m_max(x, T(0)); }
        case 11u: {
            let inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
            return T(0.5) * x * (T(1) + m_tanh(inner));
        }
        case 12u: { return T(0.5) * x * (T(1) + m_erf(x * T(0.7071067811865476))); }
        case 13u: { return m_erf(x); }
        case 14u: { return x * m_sigmoid(x); }
        case 15u: { return m_sigmoid(x); }
        case 16u: { return floor(x); }
        case 17u: { return ceil(x); }
        case 18u: { return m_round(x); }
        case 19u: { return m_sign(x); }
        case 20u: { return x * sc(0u) + sc(1u); }
        case 21u: { return m_pow(x, sc(0u)); }
        case 22u: {
            let neg = x < T(0) || (x == T(0) && T(1) / x < T(0));
            if (m_isnan(x)) { return x; }
            return select(x, m_expm1(x) * sc(0u), neg);
        }
        case 23u: {
            var y = x;
            let flags = pw(12u);
            if ((flags & 1u) != 0u) { y = m_max(y, sc(0u)); }
            if ((flags & 2u) != 0u) { y = m_min(y, sc(1u)); }
            return y;
        }
        default: { return x; }
    }
//#else
    switch OP {
        case 0u: { return T(0) - x; }
//#if T_I64
        case 1u: { return abs(x); }
        case 19u: { return select(select(T(0), T(-1), x < T(0)), T(1), x > T(0)); }
//#else
        case 1u: { return x; }
        case 19u: { return select(T(0), T(1), x > T(0)); }
//#endif
        case 7u: { return x * x; }
        case 10u: { return max(x, T(0)); }
        case 20u: { return x * sc(0u) + sc(1u); }
        case 23u: {
            var y = x;
            let flags = pw(12u);
            if ((flags & 1u) != 0u) { y = max(y, sc(0u)); }
            if ((flags & 2u) != 0u) { y = min(y, sc(1u)); }
            return y;
        }
        default: { return x; }
    }
//#endif
}

fn elem(g: u32) -> TY { return f(ld_a(map_idx(g, 0u))); }
