// binary.wgsl: y = a (op) b, or with a scalar operand (families binary_scalar:
// SCALAR_LEFT picks `s op a` over `a op s`). OP is one of the OP_* constants of the
// op table (tallow/op.py): OP_ADD ... OP_POW.
override OP: u32 = 0u;
override SCALAR_LEFT: bool = false;

fn f(a: T, b: T) -> T {
    switch OP {
        case OP_ADD: { return a + b; }
        case OP_SUB: { return a - b; }
        case OP_MUL: { return a * b; }
//#if T_FLOAT
        case OP_DIV: { return a / b; }
        case OP_MAXIMUM: { return m_max(a, b); }
        case OP_MINIMUM: { return m_min(a, b); }
        case OP_POW: { return m_pow(a, b); }
//#else
        case OP_DIV: { return select(a / b, T(0), b == T(0)); }
        case OP_MAXIMUM: { return max(a, b); }
        case OP_MINIMUM: { return min(a, b); }
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
