// unary.wgsl: y = f(a). OP (an override constant) picks the function: one of the
// OP_* constants of the op table (tallow/op.py); scalars (affine, powf, elu, clamp)
// come from the parameter words via sc(k).
override OP: u32 = 0u;

fn f(x: T) -> T {
//#if T_FLOAT
    switch OP {
        case OP_NEG: { return -x; }
        case OP_ABS: { return abs(x); }
        case OP_EXP: { return m_exp(x); }
        case OP_LOG: { return m_log(x); }
        case OP_SIN: { return m_sin(x); }
        case OP_COS: { return m_cos(x); }
        case OP_TANH: { return m_tanh(x); }
        case OP_SQR: { return x * x; }
        case OP_SQRT: { return m_sqrt(x); }
        case OP_RECIP: { return T(1) / x; }
        case OP_RELU: { return m_max(x, T(0)); }
        case OP_GELU: {
            let inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
            return T(0.5) * x * (T(1) + m_tanh(inner));
        }
        case OP_GELU_ERF: { return T(0.5) * x * (T(1) + m_erf(x * T(0.7071067811865476))); }
        case OP_ERF: { return m_erf(x); }
        case OP_SILU: { return x * m_sigmoid(x); }
        case OP_SIGMOID: { return m_sigmoid(x); }
        case OP_FLOOR: { return floor(x); }
        case OP_CEIL: { return ceil(x); }
        case OP_ROUND: { return m_round(x); }
        case OP_SIGN: { return m_sign(x); }
        case OP_AFFINE: { return x * sc(0u) + sc(1u); }
        case OP_POWF: { return m_pow(x, sc(0u)); }
        case OP_ELU: {
            let neg = x < T(0) || (x == T(0) && T(1) / x < T(0));
            if (m_isnan(x)) { return x; }
            return select(x, m_expm1(x) * sc(0u), neg);
        }
        case OP_CLAMP: {
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
        case OP_NEG: { return T(0) - x; }
//#if T_SIGNED
        case OP_ABS: { return abs(x); }
        case OP_SIGN: { return select(select(T(0), T(-1), x < T(0)), T(1), x > T(0)); }
//#else
        case OP_ABS: { return x; }
        case OP_SIGN: { return select(T(0), T(1), x > T(0)); }
//#endif
        case OP_SQR: { return x * x; }
        case OP_RELU: { return max(x, T(0)); }
        case OP_AFFINE: { return x * sc(0u) + sc(1u); }
        case OP_CLAMP: {
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
