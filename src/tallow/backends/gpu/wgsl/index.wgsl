// index.wgsl: gathers and scatters along one dim.
//   gather (map):  y[g] = a[virtual(g) + id * stride], id = ids[ids_view(g)]
//                  (index_select, gather, embedding; an id equal to the "no
//                  index" sentinel, or out of range, gives 0)
//   scatter:       one invocation per column (every position but the dim): walks
//                  the dim in order, y[col + id * ystride] (+)= a[col + i * astride]
//                  (scatter, scatter_add, index_add; sentinel ids are skipped).
// Scalar words: 0 dim size, 2 stride along the dim (of y for scatter / of a for
// gather), 4 walk length, 5 ids stride, 6 src stride (scatter).
override ACCUMULATE: bool = false;

fn id_ok(id: TI) -> bool {
//#if I_IS_i64
    return id >= 0li && id < i64(pw(8u));
//#else
    return id < TI(pw(8u));
//#endif
}

//#if GATHER
fn elem(g: u32) -> TY {
    let id = ld_i(map_idx(g, 1u));
    if (!id_ok(id)) { return TY(0); }
    return ld_a(map_idx(g, 0u) + u32(id) * pw(10u));
}
//#else
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let col = lin(wid, nwg, lid);
    if (col >= pw(0u)) { return; }
    let ids0 = map_idx(col, 0u);
    let src0 = map_idx(col, 1u);
    let dst0 = map_idx(col, 2u);
    let walk = pw(12u);
    let sid = pw(13u);
    let ssrc = pw(14u);
    let sdst = pw(10u);
    for (var i = 0u; i < walk; i = i + 1u) {
        let id = ld_i(ids0 + i * sid);
        if (!id_ok(id)) { continue; }
        let d = dst0 + u32(id) * sdst;
        let v = ld_a(src0 + i * ssrc);
        if (ACCUMULATE) {
            st_y(d, ld_y(d) + v);
        } else {
            st_y(d, v);
        }
    }
}
//#endif
