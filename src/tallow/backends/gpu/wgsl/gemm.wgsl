// gemm.wgsl: batched matrix products y[b] = a[b] @ b[b] over strided operands.
// Word map: 0 M, 1 N, 2 K, 3 first batch of this dispatch, 4 a offset, 5 b offset,
// 6 a stride along m, 7 a stride along k, 8 b stride along k, 9 b stride along n,
// 10 batch rank, 11 / 12 the dispatch's first tile row / column, 16..21 batch shape,
// 24..29 a batch strides, 32..37 b batch strides. Any batch strides work (each
// batch's offset comes from its full index), which is what candle's Metal kernel gets
// wrong for non-mergeable batch dims. y is contiguous (batch, M, N). T accumulates
// (f32 for f16 / bf16).
//
// gemm: a 16x16 workgroup computes a 128 x 128 tile, each thread's 8 x 8 outputs in 16
// vec4 registers: rows 4 lid.y .. +3 and 64 + 4 lid.y .. +3, the same for columns.
// BK-deep slices of a and b sit in workgroup memory as vec4, so one k step is 4
// vector loads (two of them the same address across a row of threads) and 16 vector
// multiply-adds. Nothing is indexed at run time, so the accumulators stay in
// registers: a kernel holding them in arrays indexed by loop counters ran at 0.7
// TFLOPS on an H200 where this one runs at 14, and 5-8x slower on lavapipe. Override
// constants: BK (16; 8 for the 8-byte types, whose slices would pass the 16 KiB of
// workgroup memory every adapter has), the load order that reads consecutive
// addresses for the operands' transpositions (A_MMAJOR, B_KMAJOR), and ALIGNED (the
// sizes are multiples of the tile: no bounds checks).
// gemv: the matrix-vector path (m == 1 or n == 1): MAT_IS_B says which operand is
// the matrix; ROWS_WG uses a workgroup per output (k contiguous) instead of an
// invocation per output.
override A_MMAJOR: bool = false;
override B_KMAJOR: bool = false;
override ALIGNED: bool = false;
override MAT_IS_B: bool = false;
override ROWS_WG: bool = false;
override BK: u32 = 16u;

var<workgroup> red: array<T, 256>;

fn batch_off(bz: u32, sw: u32) -> u32 { return strided(bz, pw(10u), 16u, sw, 0u); }

var<workgroup> A4: array<vec4<T>, BK * 32u>;
var<workgroup> B4: array<vec4<T>, BK * 32u>;

fn put4(ybase: u32, gm: u32, gn: u32, M: u32, N: u32, v: vec4<T>) {
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (ALIGNED || (gm < M && gn + j < N)) { st_y(ybase + gm * N + gn + j, TY(v[j])); }
    }
}

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
    let m0 = (pw(11u) + wid.y) * 128u;
    let n0 = (pw(12u) + wid.x) * 128u;
    let tid = lid.y * 16u + lid.x;
    var c0 = vec4<T>(T(0));
    var c1 = vec4<T>(T(0));
    var c2 = vec4<T>(T(0));
    var c3 = vec4<T>(T(0));
    var c4 = vec4<T>(T(0));
    var c5 = vec4<T>(T(0));
    var c6 = vec4<T>(T(0));
    var c7 = vec4<T>(T(0));
    var c8 = vec4<T>(T(0));
    var c9 = vec4<T>(T(0));
    var c10 = vec4<T>(T(0));
    var c11 = vec4<T>(T(0));
    var c12 = vec4<T>(T(0));
    var c13 = vec4<T>(T(0));
    var c14 = vec4<T>(T(0));
    var c15 = vec4<T>(T(0));
    for (var kt = 0u; kt < K; kt = kt + BK) {
        for (var r = 0u; r < BK / 2u; r = r + 1u) {
            let e = tid + r * 256u;
            var mm: u32;
            var kk: u32;
            if (A_MMAJOR) { mm = e % 128u; kk = e / 128u; } else { kk = e % BK; mm = e / BK; }
            let gm = m0 + mm;
            let gk = kt + kk;
            var v = T(0);
            if (ALIGNED || (gm < M && gk < K)) { v = T(ld_a(aoff + gm * sam + gk * sak)); }
            A4[kk * 32u + mm / 4u][mm % 4u] = v;
        }
        for (var r = 0u; r < BK / 2u; r = r + 1u) {
            let e = tid + r * 256u;
            var nn: u32;
            var kk: u32;
            if (B_KMAJOR) { kk = e % BK; nn = e / BK; } else { nn = e % 128u; kk = e / 128u; }
            let gn = n0 + nn;
            let gk = kt + kk;
            var v = T(0);
            if (ALIGNED || (gn < N && gk < K)) { v = T(ld_b(boff + gk * sbk + gn * sbn)); }
            B4[kk * 32u + nn / 4u][nn % 4u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let a0 = A4[kk * 32u + lid.y];
            let a1 = A4[kk * 32u + 16u + lid.y];
            let b0 = B4[kk * 32u + lid.x];
            let b1 = B4[kk * 32u + 16u + lid.x];
            c0 = c0 + a0.x * b0;
            c1 = c1 + a0.x * b1;
            c2 = c2 + a0.y * b0;
            c3 = c3 + a0.y * b1;
            c4 = c4 + a0.z * b0;
            c5 = c5 + a0.z * b1;
            c6 = c6 + a0.w * b0;
            c7 = c7 + a0.w * b1;
            c8 = c8 + a1.x * b0;
            c9 = c9 + a1.x * b1;
            c10 = c10 + a1.y * b0;
            c11 = c11 + a1.y * b1;
            c12 = c12 + a1.z * b0;
            c13 = c13 + a1.z * b1;
            c14 = c14 + a1.w * b0;
            c15 = c15 + a1.w * b1;
        }
        workgroupBarrier();
    }
    let ybase = bz * M * N;
    put4(ybase, m0 + 4u * lid.y + 0u, n0 + 4u * lid.x, M, N, c0);
    put4(ybase, m0 + 4u * lid.y + 0u, n0 + 64u + 4u * lid.x, M, N, c1);
    put4(ybase, m0 + 4u * lid.y + 1u, n0 + 4u * lid.x, M, N, c2);
    put4(ybase, m0 + 4u * lid.y + 1u, n0 + 64u + 4u * lid.x, M, N, c3);
    put4(ybase, m0 + 4u * lid.y + 2u, n0 + 4u * lid.x, M, N, c4);
    put4(ybase, m0 + 4u * lid.y + 2u, n0 + 64u + 4u * lid.x, M, N, c5);
    put4(ybase, m0 + 4u * lid.y + 3u, n0 + 4u * lid.x, M, N, c6);
    put4(ybase, m0 + 4u * lid.y + 3u, n0 + 64u + 4u * lid.x, M, N, c7);
    put4(ybase, 64u + m0 + 4u * lid.y + 0u, n0 + 4u * lid.x, M, N, c8);
    put4(ybase, 64u + m0 + 4u * lid.y + 0u, n0 + 64u + 4u * lid.x, M, N, c9);
    put4(ybase, 64u + m0 + 4u * lid.y + 1u, n0 + 4u * lid.x, M, N, c10);
    put4(ybase, 64u + m0 + 4u * lid.y + 1u, n0 + 64u + 4u * lid.x, M, N, c11);
    put4(ybase, 64u + m0 + 4u * lid.y + 2u, n0 + 4u * lid.x, M, N, c12);
    put4(ybase, 64u + m0 + 4u * lid.y + 2u, n0 + 64u + 4u * lid.x, M, N, c13);
    put4(ybase, 64u + m0 + 4u * lid.y + 3u, n0 + 4u * lid.x, M, N, c14);
    put4(ybase, 64u + m0 + 4u * lid.y + 3u, n0 + 64u + 4u * lid.x, M, N, c15);
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
