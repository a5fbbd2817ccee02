// binary.wgsl: y = a (op) b, or with a scalar operand (families binary_scalar:
// SCALAR_LEFT picks `s op a` over `a op s`). OP: 0 add, 1 sub, 2 mul, 3 div,
// 4 maximum, 5 minimum, 6 pow.
override OP: u32 = 0u;
override SCALAR_LEFT: bool = false;

fn f(a: T, b: T) -> T {
    switch OP {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
//#if T_FLOAT
        case 3u: { return a / b; }
        case 4u: { return m_max(a, b); }
        case 5u: { return m_min(a, b); }
        case 6u: { return m_pow(a, b); }
//#else
        case 3u: { return select(a / b, T(0), b == T(0)); }
        case 4u: { return max(a, b); }
        case 5u: { return min(a, b); }
//#endif
        default: { return a; }
    }
}

//#if SCALAR
fn elem(g: u32) -> TY {
    let x = ld_a(map_idx(g, 0u));
    let s = sc(0u);
    if (SCALAR_LEFT) { return f(s, x); }
    return f(x, s);
}
//#else
fn elem(g: u32) -> TY { return f(ld_a(map_idx(g, 0u)), ld_b(map_idx(g, 1u))); }
//#endif
