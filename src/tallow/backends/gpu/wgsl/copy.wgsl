// copy.wgsl: strided copies and fills.
//   copy:       (map) y[g] = a[layout(g)]          (a compact copy of a view)
//   copy_into:  y[layout_b(g)] = a[layout_a(g)]     (in place: a region of y)
//   fill_into:  y[layout_a(g)] = scalar              (in place)
//   fill:       y[g] = scalar ; arange (integers): y[g] = start + g * step
override MODE: u32 = 0u;

//#if INPLACE
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = lin(wid, nwg, lid);
    if (i >= pw(0u)) { return; }
    let g = pw(2u) + i;
//#if HAS_SRC
    st_y(map_idx(g, 1u), TY(ld_a(map_idx(g, 0u))));
//#else
    st_y(map_idx(g, 0u), sc(0u));
//#endif
}
//#else
fn elem(g: u32) -> TY {
//#if HAS_SRC
    return ld_a(map_idx(g, 0u));
//#else
//#if T_INT
    if (MODE == 1u) { return sc(0u) + TY(g) * sc(1u); }
//#endif
    return sc(0u);
//#endif
}
//#endif
