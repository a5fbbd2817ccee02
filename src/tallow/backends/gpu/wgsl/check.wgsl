// check.wgsl: find the first (lowest flat index) element that fails a check, for
// the errors the CPU backend raises (a zero integer divisor, an index out of
// range). z[0] starts at 0xffffffff; the check reads it back (one small readback).
//   zero:  a[g] == 0
//   range: a[g] >= sc(0) (or < 0), unless a[g] is the "no index" sentinel
override MODE: u32 = 0u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = lin(wid, nwg, lid);
    if (g >= pw(0u)) { return; }
    let v = ld_a(map_idx(g, 0u));
    var bad = false;
    if (MODE == 0u) {
        bad = v == TA(0);
    } else {
        let size = sc(0u);
//#if T_I64
        bad = (v < TA(0) || v >= size) && v != 9223372036854775807li;
//#elif T_I32
        bad = v < TA(0) || v >= size;
//#elif T_U8 or T_BOOL
        bad = v >= size;
//#else
        bad = v >= size && v != 0xffffffffu;
//#endif
    }
    if (bad) { atomicMin(&buf_z[0], g); }
}
