// cmp.wgsl: bool masks of a (op) b or a (op) scalar. OP is one of the OP_* constants
// of the op table (tallow/op.py): OP_EQ ... OP_GE.
override OP: u32 = 0u;

fn f(a: T, b: T) -> bool {
    switch OP {
        case OP_EQ: { return a == b; }
        case OP_NE: { return !(a == b); }  // `!=` is ordered in naga: NaN != x would be false
        case OP_LT: { return a < b; }
        case OP_LE: { return a <= b; }
        case OP_GT: { return a > b; }
        case OP_GE, default: { return a >= b; }
    }
}

//#if SCALAR
fn elem(g: u32) -> TY { return select(0u, 1u, f(ld_a(map_idx(g, 0u)), sc(0u))); }
//#else
fn elem(g: u32) -> TY { return select(0u, 1u, f(ld_a(map_idx(g, 0u)), ld_b(map_idx(g, 1u)))); }
//#endif
