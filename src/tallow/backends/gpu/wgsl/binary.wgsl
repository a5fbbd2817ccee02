// binary.wgsl: y = a (op) b, or with a scalar operand (families binary_scalar:
// SCALAR_LEFT picks `s op a` over `a op s`). OP is one of the OP_* constants of the
// op table (tallow/op.py): OP_ADD ... OP_POW, OP_REM and OP_FLOOR_DIV (floored, as
// Python), OP_BIT_AND, OP_BIT_OR, OP_BIT_XOR (integers only).
override OP: u32 = 0u;
override SCALAR_LEFT: bool = false;

//#if T_FLOAT
// Python's % (the remainder takes the divisor's sign) and //, as PyTorch computes
// them: from the truncated remainder, corrected where the signs differ.
fn py_rem(a: T, b: T) -> T {
    var m = a - b * trunc(a / b);
    if (m != T(0) && ((b < T(0)) != (m < T(0)))) { m = m + b; }
    return m;
}

fn py_floor_div(a: T, b: T) -> T {
    if (b == T(0)) { return a / b; }
    let m = a - b * trunc(a / b);
    var d = (a - m) / b;
    if (m != T(0) && ((b < T(0)) != (m < T(0)))) { d = d - T(1); }
    var q = floor(d);
    if (d - q > T(0.5)) { q = q + T(1); }
    return q;
}
//#else
// Integers: the divisor was checked for zero before the launch.
fn py_rem(a: T, b: T) -> T {
    if (b == T(0)) { return T(0); }
//#if T_SIGNED
    // From the quotient, not `%`: NVIDIA's Vulkan driver computes the 64-bit signed
    // remainder as if both operands were unsigned (-1 % 5 gave 0).
    var m = a - (a / b) * b;
    if (m != T(0) && ((b < T(0)) != (m < T(0)))) { m = m + b; }
//#else
    let m = a % b;
//#endif
    return m;
}

fn py_floor_div(a: T, b: T) -> T {
    if (b == T(0)) { return T(0); }
    var q = a / b;
//#if T_SIGNED
    let m = a - q * b;
    if (m != T(0) && ((b < T(0)) != (m < T(0)))) { q = q - T(1); }
//#endif
    return q;
}
//#endif

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
        case OP_REM: { return py_rem(a, b); }
        case OP_FLOOR_DIV: { return py_floor_div(a, b); }
//#else
        case OP_DIV: { return select(a / b, T(0), b == T(0)); }
        case OP_MAXIMUM: { return max(a, b); }
        case OP_MINIMUM: { return min(a, b); }
        case OP_REM: { return py_rem(a, b); }
        case OP_FLOOR_DIV: { return py_floor_div(a, b); }
        case OP_BIT_AND: { return a & b; }
        case OP_BIT_OR: { return a | b; }
        case OP_BIT_XOR: { return a ^ b; }
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
