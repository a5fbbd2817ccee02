// softmax.wgsl: fused row kernels over the last dim, one workgroup per row,
// accumulating in T (f32 for f16 / bf16):
//   softmax:    y = exp(x - max) / sum(exp(x - max))
//   rms_norm:   y = x / sqrt(mean(x^2) + eps) * alpha
//   layer_norm: y = (x - mean) / sqrt(var + eps) * alpha + beta
// Word map as reduce.wgsl (the reduced view is the last dim), plus 5 alpha
// offset, 6 alpha stride, 7 beta offset, 10 beta stride, scalar 0 = eps.
// Rows of y are contiguous.
override OP: u32 = 0u;

var<workgroup> red: array<T, 256>;

fn at(r: u32, j: u32) -> T {
    let idx = pw(4u) + strided(r, pw(2u), 16u, 24u, 0u) + strided(j, pw(3u), 32u, 40u, 0u);
    return T(ld_a(idx));
}

fn wg_sum(lid: u32, v: T) -> T {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

fn wg_max(lid: u32, v: T) -> T {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { red[lid] = m_max(red[lid], red[lid + s]); }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let r = wid.y * nwg.x + wid.x;
    if (r >= pw(0u)) { return; }
    let m = pw(1u);
    let out0 = r * m;
    if (OP == 0u) {
        var mx = -m_inf();
        for (var j = lid; j < m; j = j + WG) { mx = m_max(mx, at(r, j)); }
        mx = wg_max(lid, mx);
        var s = T(0);
        for (var j = lid; j < m; j = j + WG) { s = s + m_exp(at(r, j) - mx); }
        s = wg_sum(lid, s);
        for (var j = lid; j < m; j = j + WG) { st_y(out0 + j, TY(m_exp(at(r, j) - mx) / s)); }
        return;
    }
    let eps = sc(0u);
    if (OP == 1u) {
        // Each invocation sums m / 256 squares, in blocks of 16: a plain running sum
        // of a long row of large values lost ~30 ulp before the tree reduction.
        var s = T(0);
        var j = lid;
        while (j < m) {
            var blk = T(0);
            for (var k = 0u; k < 16u && j < m; k = k + 1u) {
                let v = at(r, j);
                blk = blk + v * v;
                j = j + WG;
            }
            s = s + blk;
        }
        s = wg_sum(lid, s);
        let scale = T(1) / sqrt(s / T(m) + eps);
        for (var j = lid; j < m; j = j + WG) {
            let a = T(ld_b(pw(5u) + j * pw(6u)));
            st_y(out0 + j, TY(at(r, j) * scale * a));
        }
        return;
    }
    // Corrected two-pass statistics: the rounding of the first mean (large on rows
    // with a large mean) is measured as the mean `rest` of the centred values and
    // taken off again, so a constant row gives exactly 0.
    var s = T(0);
    for (var j = lid; j < m; j = j + WG) { s = s + at(r, j); }
    let mean = wg_sum(lid, s) / T(m);
    var c = T(0);
    var q = T(0);
    for (var j = lid; j < m; j = j + WG) { let d = at(r, j) - mean; c = c + d; q = q + d * d; }
    let rest = wg_sum(lid, c) / T(m);
    let var_ = max(wg_sum(lid, q) / T(m) - rest * rest, T(0));
    let scale = T(1) / sqrt(var_ + eps);
    for (var j = lid; j < m; j = j + WG) {
        let a = T(ld_b(pw(5u) + j * pw(6u)));
        let b = T(ld_c(pw(7u) + j * pw(10u)));
        st_y(out0 + j, TY(((at(r, j) - mean) - rest) * scale * a + b));
    }
}
