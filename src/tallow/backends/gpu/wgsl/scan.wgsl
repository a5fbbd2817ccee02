// scan.wgsl: inclusive cumulative sums along one dim, one workgroup per row,
// 256 elements at a time (a Hillis-Steele scan in workgroup memory plus the
// running total of the previous chunks). T accumulates (f32 for f16 / bf16;
// integers wrap in their dtype).
// Word map: 0 rows, 1 m (scanned length), 2 kept rank, 4 input offset,
// 5 input stride along the dim, 6 output stride along the dim,
// 16..23 kept shape, 24..31 input kept strides, 32..39 output kept strides.
var<workgroup> buf: array<T, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = wid.y * nwg.x + wid.x;
    if (r >= pw(0u)) { return; }
    let m = pw(1u);
    let rank = pw(2u);
    let in0 = pw(4u) + strided(r, rank, 16u, 24u, 0u);
    let out0 = strided(r, rank, 16u, 32u, 0u);
    let sin = pw(5u);
    let sout = pw(6u);
    var carry = T(0);
    for (var base = 0u; base < m; base = base + WG) {
        let j = base + lid;
        var v = T(0);
        if (j < m) { v = T(ld_a(in0 + j * sin)); }
        buf[lid] = v;
        workgroupBarrier();
        for (var s = 1u; s < WG; s = s << 1u) {
            var add = T(0);
            if (lid >= s) { add = buf[lid - s]; }
            workgroupBarrier();
            buf[lid] = buf[lid] + add;
            workgroupBarrier();
        }
        if (j < m) { st_y(out0 + j * sout, TY(carry + buf[lid])); }
        carry = carry + buf[WG - 1u];
        workgroupBarrier();
    }
}
