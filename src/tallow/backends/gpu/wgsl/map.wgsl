// map.wgsl: the entry point shared by element-wise families. The family defines
// `fn elem(g: u32) -> TY`, the value of output element g; each invocation writes
// one output word (EPW_Y elements for packed u8 / f16 / bf16 outputs).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let w = lin(wid, nwg, lid);
    if (w >= pw(1u)) { return; }
    let base = pw(2u);
//#if PACKED_Y
    let n = pw(0u);
    var word = 0u;
    for (var e = 0u; e < EPW_Y; e = e + 1u) {
        let i = w * EPW_Y + e;
        if (i < n) { word = word | (enc_y(elem(base + i)) << (e * BITS_Y)); }
    }
    buf_y[w] = word;
//#else
    buf_y[w] = elem(base + w);
//#endif
}
