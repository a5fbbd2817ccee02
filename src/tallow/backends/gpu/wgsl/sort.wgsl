// sort.wgsl: stable arg-sort of each row of the last dim (a bitonic network on
// (value, index) pairs, the index breaking ties, so the order is total and the
// result stable). Rows are padded to a power of two N with "after everything"
// entries (index 0xffffffff). Ascending puts NaN last; descending puts it first
// (what the CPU backend's NumPy formulation gives).
//   sort_local:  N <= 1024: one workgroup per row, the whole network in
//                workgroup memory; writes the first n indices of each row.
//   sort_init:   idx[r * N + i] = i (or the pad) for the global network;
//   sort_step:   one compare-exchange stage (k, j) of the global network.
// Word map: 0 rows, 1 n, 2 rank of the row view, 3 N, 4 offset, 5 last-dim
// stride, 6 k, 7 j, 16..23 row shape, 24..31 row strides.
override DESCENDING: bool = false;
const PAD: u32 = 0xffffffffu;

var<workgroup> kv: array<T, 1024>;
var<workgroup> ki: array<u32, 1024>;

fn val(r: u32, i: u32) -> T {
    return T(ld_a(pw(4u) + strided(r, pw(2u), 16u, 24u, 0u) + i * pw(5u)));
}

fn before(a: T, ia: u32, b: T, ib: u32) -> bool {
    if (ia == PAD) { return false; }
    if (ib == PAD) { return true; }
//#if T_FLOAT
//#if T_F64
    let an = isnan64(a);
    let bn = isnan64(b);
//#else
    let an = isnan32(a);
    let bn = isnan32(b);
//#endif
    if (an || bn) {
        if (an && bn) { return ia < ib; }
        return an == DESCENDING;
    }
//#endif
    if (a != b) { return (a < b) != DESCENDING; }
    return ia < ib;
}

@compute @workgroup_size(256)
fn sort_local(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let r = wid.y * nwg.x + wid.x;
    if (r >= pw(0u)) { return; }
    let n = pw(1u);
    let N = pw(3u);
    for (var i = lid; i < N; i = i + WG) {
        if (i < n) {
            kv[i] = val(r, i);
            ki[i] = i;
        } else {
            kv[i] = T(0);
            ki[i] = PAD;
        }
    }
    workgroupBarrier();
    for (var k = 2u; k <= N; k = k << 1u) {
        for (var j = k >> 1u; j > 0u; j = j >> 1u) {
            for (var i = lid; i < N; i = i + WG) {
                let l = i ^ j;
                if (l > i) {
                    let up = (i & k) == 0u;
                    let swap = select(before(kv[i], ki[i], kv[l], ki[l]), before(kv[l], ki[l], kv[i], ki[i]), up);
                    if (swap) {
                        let tv = kv[i]; kv[i] = kv[l]; kv[l] = tv;
                        let ti = ki[i]; ki[i] = ki[l]; ki[l] = ti;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    for (var i = lid; i < n; i = i + WG) { buf_y[r * n + i] = ki[i]; }
}

@compute @workgroup_size(256)
fn sort_init(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let g = lin(wid, nwg, lid);
    let N = pw(3u);
    if (g >= pw(0u) * N) { return; }
    let i = g % N;
    buf_y[g] = select(PAD, i, i < pw(1u));
}

@compute @workgroup_size(256)
fn sort_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let g = lin(wid, nwg, lid);
    let N = pw(3u);
    let half = N >> 1u;
    if (g >= pw(0u) * half) { return; }
    let r = g / half;
    let t = g % half;
    let k = pw(6u);
    let j = pw(7u);
    // the t-th pair (i, i ^ j) with i having bit j clear
    let i = ((t / j) * (2u * j)) + (t % j);
    let l = i + j;
    let a = buf_y[r * N + i];
    let b = buf_y[r * N + l];
    var av = T(0);
    var bv = T(0);
    if (a != PAD) { av = val(r, a); }
    if (b != PAD) { bv = val(r, b); }
    let up = (i & k) == 0u;
    let swap = select(before(av, a, bv, b), before(bv, b, av, a), up);
    if (swap) {
        buf_y[r * N + i] = b;
        buf_y[r * N + l] = a;
    }
}
