// cmp.wgsl: u8 masks of a (op) b or a (op) scalar. OP: 0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge.
override OP: u32 = 0u;

fn f(a: T, b: T) -> bool {
    switch OP {
        case 0u: { return a == b; }
        case 1u: { return !(a == b); }  // `!=` is ordered in naga: NaN != x would be false
        case 2u: { return a < b; }
        case 3u: { return a <= b; }
        case 4u: { return a > b; }
        default: { return a >= b; }
    }
}

//#if SCALAR
fn elem(g: u32) -> TY { return select(0u, 1u, f(ld_a(map_idx(g, 0u)), sc(0u))); }
//#else
fn elem(g: u32) -> TY { return select(0u, 1u, f(ld_a(map_idx(g, 0u)), ld_b(map_idx(g, 1u)))); }
//#endif
