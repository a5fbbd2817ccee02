// where.wgsl: y = c != 0 ? a : b (c any integer dtype).
fn elem(g: u32) -> TY {
    let c = ld_c(map_idx(g, 0u));
    if (c != TC(0)) { return ld_a(map_idx(g, 1u)); }
    return ld_b(map_idx(g, 2u));
}
