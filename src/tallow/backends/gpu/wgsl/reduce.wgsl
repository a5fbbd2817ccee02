// reduce.wgsl: sum / max / min / argmax / argmin of each row of a strided view.
// The view is (kept dims..., reduced dims...): row r, element j of the row is at
//   off + strided(r, kept) + strided(j, reduced).
// Word map: 0 rows, 1 m (row length), 2 kept rank, 3 reduced rank, 4 offset,
// 5 P, 6 L: reduce_wg reduces chunk c (elements c*L .. c*L+L-1) of row r into output
// r*P + c (a first pass over long rows; P = 1, L = m for a single pass),
// 16..23 kept shape, 24..31 kept strides, 32..39 reduced shape, 40..47 reduced strides.
// OP: 0 sum, 1 max, 2 min, 3 argmax, 4 argmin. Entry points: reduce_wg (one
// workgroup per row, a tree in workgroup memory) and reduce_thread (one
// invocation per row, for short rows).
override OP: u32 = 0u;

var<workgroup> sv: array<T, 256>;
var<workgroup> si: array<u32, 256>;

fn at(r: u32, j: u32) -> T {
    let idx = pw(4u) + strided(r, pw(2u), 16u, 24u, 0u) + strided(j, pw(3u), 32u, 40u, 0u);
    return T(ld_a(idx));
}

fn is_nan(x: T) -> bool {
//#if T_FLOAT
    return m_isnan(x);
//#else
    return false;
//#endif
}

// Does (a, ia) beat (b, ib)? NaN beats everything (NumPy's max / argmax); ties
// go to the lower index.
fn beats(a: T, ia: u32, b: T, ib: u32) -> bool {
    let an = is_nan(a);
    let bn = is_nan(b);
    if (an || bn) {
        if (an && bn) { return ia < ib; }
        return an;
    }
    if (OP == 1u || OP == 3u) {
        if (a != b) { return a > b; }
    } else {
        if (a != b) { return a < b; }
    }
    return ia < ib;
}

fn identity() -> T { return T(0); }

fn store(r: u32, v: T, i: u32) {
//#if ARG
    st_y(r, i);
//#else
    st_y(r, TY(v));
//#endif
}

@compute @workgroup_size(256)
fn reduce_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let rc = wid.y * nwg.x + wid.x;
    let P = pw(5u);
    if (rc >= pw(0u) * P) { return; }
    let r = rc / P;
    let L = pw(6u);
    let j0 = (rc % P) * L;
    let m = min(pw(1u), j0 + L);
    var acc = identity();
    var ai = 0xffffffffu;
    var j = j0 + lid;
    if (OP != 0u && j < m) {
        acc = at(r, j);
        ai = j;
        j = j + WG;
    }
    for (; j < m; j = j + WG) {
        let v = at(r, j);
        if (OP == 0u) {
            acc = acc + v;
        } else if (beats(v, j, acc, ai)) {
            acc = v;
            ai = j;
        }
    }
    sv[lid] = acc;
    si[lid] = ai;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            if (OP == 0u) {
                sv[lid] = sv[lid] + sv[lid + s];
            } else if (si[lid + s] != 0xffffffffu
                       && (si[lid] == 0xffffffffu || beats(sv[lid + s], si[lid + s], sv[lid], si[lid]))) {
                sv[lid] = sv[lid + s];
                si[lid] = si[lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) { store(rc, sv[0], si[0]); }
}

@compute @workgroup_size(256)
fn reduce_thread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let r = lin(wid, nwg, lid);
    if (r >= pw(0u)) { return; }
    let m = pw(1u);
    var acc = identity();
    var ai = 0u;
    var j = 0u;
    if (OP != 0u) {
        acc = at(r, 0u);
        j = 1u;
    }
    for (; j < m; j = j + 1u) {
        let v = at(r, j);
        if (OP == 0u) {
            acc = acc + v;
        } else if (beats(v, j, acc, ai)) {
            acc = v;
            ai = j;
        }
    }
    store(r, acc, ai);
}
