// gemm.wgsl: batched matrix products y[b] = a[b] @ b[b] over strided operands.
// Word map: 0 M, 1 N, 2 K, 3 first batch of this dispatch, 4 a offset, 5 b offset,
// 6 a stride along m, 7 a stride along k, 8 b stride along k, 9 b stride along n,
// 10 batch rank, 16..21 batch shape, 24..29 a batch strides, 32..37 b batch strides.
// Any batch strides work (each batch's offset comes from its full index), which is
// what candle's Metal kernel gets wrong for non-mergeable batch dims. y is
// contiguous (batch, M, N). T accumulates (f32 for f16 / bf16).
//
// gemm: a 16x16 workgroup computes a (16 TM) x (16 TN) tile, TM x TN per thread (at most
// 4 x 4, or 8 x 8 in the gemm_big family, whose registers only big GPUs afford),
// staging BK-deep slices of a and b in workgroup memory. Override constants pick
// the tile (TM, TN), the load order that reads consecutive addresses for the
// operands' transpositions (A_MMAJOR, B_KMAJOR), and drop bounds checks when the
// sizes are multiples of the tile (ALIGNED).
// gemv: the matrix-vector path (m == 1 or n == 1): MAT_IS_B says which operand is
// the matrix; ROWS_WG uses a workgroup per output (k contiguous) instead of an
// invocation per output.
override TM: u32 = 4u;
override TN: u32 = 4u;
override A_MMAJOR: bool = false;
override B_KMAJOR: bool = false;
override ALIGNED: bool = false;
override MAT_IS_B: bool = false;
override ROWS_WG: bool = false;
override BK: u32 = 16u;

var<workgroup> As: array<T, BK * 16u * TM>;
var<workgroup> Bs: array<T, BK * 16u * TN>;
var<workgroup> red: array<T, 256>;

fn batch_off(bz: u32, sw: u32) -> u32 { return strided(bz, pw(10u), 16u, sw, 0u); }

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = pw(0u);
    let N = pw(1u);
    let K = pw(2u);
    let bz = pw(3u) + wid.z;
    let aoff = pw(4u) + batch_off(bz, 24u);
    let boff = pw(5u) + batch_off(bz, 32u);
    let sam = pw(6u);
    let sak = pw(7u);
    let sbk = pw(8u);
    let sbn = pw(9u);
    let BM = 16u * TM;
    let BN = 16u * TN;
    let m0 = (pw(11u) + wid.y) * BM;  // the dispatch's first tile row and column
    let n0 = (pw(12u) + wid.x) * BN;
    let tid = lid.y * 16u + lid.x;
//#if BIG
    var acc: array<T, 64>;
//#else
    var acc: array<T, 16>;
//#endif
    for (var i = 0u; i < TM * TN; i = i + 1u) { acc[i] = T(0); }
    for (var kt = 0u; kt < K; kt = kt + BK) {
        for (var r = 0u; r < TM * BK / 16u; r = r + 1u) {
            let e = tid + r * 256u;
            var mm: u32;
            var kk: u32;
            if (A_MMAJOR) { mm = e % BM; kk = e / BM; } else { kk = e % BK; mm = e / BK; }
            let gm = m0 + mm;
            let gk = kt + kk;
            var v = T(0);
            if (ALIGNED || (gm < M && gk < K)) { v = T(ld_a(aoff + gm * sam + gk * sak)); }
            As[kk * BM + mm] = v;
        }
        for (var r = 0u; r < TN * BK / 16u; r = r + 1u) {
            let e = tid + r * 256u;
            var nn: u32;
            var kk: u32;
            if (B_KMAJOR) { kk = e % BK; nn = e / BK; } else { nn = e % BN; kk = e / BN; }
            let gn = n0 + nn;
            let gk = kt + kk;
            var v = T(0);
            if (ALIGNED || (gn < N && gk < K)) { v = T(ld_b(boff + gk * sbk + gn * sbn)); }
            Bs[kk * BN + nn] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
//#if BIG
            var av: array<T, 8>;
            var bv: array<T, 8>;
//#else
            var av: array<T, 4>;
            var bv: array<T, 4>;
//#endif
            for (var i = 0u; i < TM; i = i + 1u) { av[i] = As[kk * BM + lid.y + 16u * i]; }
            for (var j = 0u; j < TN; j = j + 1u) { bv[j] = Bs[kk * BN + lid.x + 16u * j]; }
            for (var i = 0u; i < TM; i = i + 1u) {
                for (var j = 0u; j < TN; j = j + 1u) {
                    acc[i * TN + j] = acc[i * TN + j] + av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    let ybase = bz * M * N;
    for (var i = 0u; i < TM; i = i + 1u) {
        let gm = m0 + lid.y + 16u * i;
        for (var j = 0u; j < TN; j = j + 1u) {
            let gn = n0 + lid.x + 16u * j;
            if (ALIGNED || (gm < M && gn < N)) { st_y(ybase + gm * N + gn, TY(acc[i * TN + j])); }
        }
    }
}

// gemv word map: 0 R (outputs per batch), 1 K, 3 first batch, 4 a offset,
// 5 b offset, 6 matrix stride along the outputs, 7 matrix stride along k,
// 8 vector stride along k, 10.. batch as above.
fn mat_at(off: u32) -> T {
    if (MAT_IS_B) { return T(ld_b(off)); }
    return T(ld_a(off));
}
fn vec_at(off: u32) -> T {
    if (MAT_IS_B) { return T(ld_a(off)); }
    return T(ld_b(off));
}

@compute @workgroup_size(256)
fn gemv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let R = pw(0u);
    let K = pw(1u);
    let bz = pw(3u) + wid.z;
    let aoff = pw(4u) + batch_off(bz, 24u);
    let boff = pw(5u) + batch_off(bz, 32u);
    var moff = aoff;
    var voff = boff;
    if (MAT_IS_B) { moff = boff; voff = aoff; }
    let sr = pw(6u);
    let sk = pw(7u);
    let sv = pw(8u);
    if (ROWS_WG) {
        let r = wid.y * nwg.x + wid.x;
        if (r >= R) { return; }
        var acc = T(0);
        for (var k = lid; k < K; k = k + WG) { acc = acc + mat_at(moff + r * sr + k * sk) * vec_at(voff + k * sv); }
        red[lid] = acc;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
            workgroupBarrier();
        }
        if (lid == 0u) { st_y(bz * R + r, TY(red[0])); }
    } else {
        let r = (wid.y * nwg.x + wid.x) * WG + lid;
        if (r >= R) { return; }
        var acc = T(0);
        for (var k = 0u; k < K; k = k + 1u) { acc = acc + mat_at(moff + r * sr + k * sk) * vec_at(voff + k * sv); }
        st_y(bz * R + r, TY(acc));
    }
}
