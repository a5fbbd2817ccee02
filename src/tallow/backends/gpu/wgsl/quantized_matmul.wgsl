// quantized_matmul.wgsl: y (m, n) = x (m, k) @ W(n, k)^T with W in GGML blocks
// (quantized_formats.wgsl), x f32 through a strided layout, y contiguous f32.
// The weights are dequantized in registers and multiplied by the f32 activations,
// accumulated in f32 (candle's Metal and ggml's GPU kernels do the same).
//
// Word map: 0 M (x rows of this dispatch), 1 N (W rows of this dispatch), 2 K,
// 3 x offset, 4 x stride along k, 5 rank of x's row dims, 6 W offset in its
// binding (bytes; float formats: elements), 7 bytes (elements) per W row,
// 8 y offset in its binding, 9 y row stride, 10 first x row of this dispatch,
// 16..23 x's row dims (merged), 24..31 their strides.
//
// qmv (small m): a workgroup of WQ invocations computes NR rows of W against MC
// (1 ... 16) rows of x; invocation t takes the runs of 16 weights t, t + WQ, ... of each row,
// decodes each run once for its NR rows and multiplies it with the MC matching
// runs of x; the NR x MC partial sums are then added in workgroup memory.
// qmm (larger m): a 16 x 16 workgroup computes a (16 TM) x 64 tile of y as the
// f32 GEMM does (TM x 4 per invocation), staging 32-deep slices of x and of the
// W tile, which is dequantized straight into workgroup memory (two pieces of
// each of its 64 rows per slice).
override MC: u32 = 1u;
override TM: u32 = 4u;
const NR: u32 = 4u;
const WQ: u32 = 64u;
const QBK: u32 = 32u;
const QBN: u32 = 64u;

var<workgroup> red: array<vec4<f32>, WQ * 8u>;
var<workgroup> Xs: array<f32, QBK * 16u * TM>;
var<workgroup> Ws: array<f32, QBK * QBN>;

fn nofma(v: f32) -> f32 { return v; }

fn xrow(mi: u32) -> u32 { return strided(pw(10u) + mi, pw(5u), 16u, 24u, pw(3u)); }

// Piece g (16 weights) of W row `row`.
fn wrun(row: u32, g: u32) -> array<vec4<f32>, 4> {
    let base = pw(6u) + row * pw(7u);
    if (FLOATW) { return dq16(base + 16u * g, 0u, base + pw(2u)); }
    return dq16(base + (g / RPB) * QB, g % RPB, 0u);
}

fn xld(i: u32, kk: u32, K: u32) -> f32 {
    if (FLOATW) { return select(0.0, ld_x(i), kk < K); }
    return ld_x(i);
}

// The values of x (row base xb) that multiply piece g of a W row.
fn xrun(xb: u32, g: u32, K: u32) -> array<vec4<f32>, 4> {
    let s = pw(4u);
    var v: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j = j + 1u) {
        let kk = xcol(g, j);
        let i = xb + kk * s;
        v[j] = vec4<f32>(xld(i, kk, K), xld(i + s, kk + 1u, K), xld(i + 2u * s, kk + 2u, K),
                         xld(i + 3u * s, kk + 3u, K));
    }
    return v;
}

fn dot16(a: array<vec4<f32>, 4>, b: array<vec4<f32>, 4>) -> f32 {
    return (dot(a[0], b[0]) + dot(a[1], b[1])) + (dot(a[2], b[2]) + dot(a[3], b[3]));
}

@compute @workgroup_size(64)
fn qmv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let M = pw(0u);
    let N = pw(1u);
    let K = pw(2u);
    let n0 = wid.x * NR;
    let m0 = wid.y * MC;
    if (n0 >= N) { return; }
    let runs = (K + 15u) / 16u;
    // Rows past the end repeat the last one (loads stay in bounds); not stored.
    let r1 = min(n0 + 1u, N - 1u);
    let r2 = min(n0 + 2u, N - 1u);
    let r3 = min(n0 + 3u, N - 1u);
    var acc: array<vec4<f32>, 16>;
    var xb: array<u32, 16>;
    for (var c = 0u; c < MC; c = c + 1u) { acc[c] = vec4<f32>(0.0); xb[c] = xrow(min(m0 + c, M - 1u)); }
    for (var g = lid; g < runs; g = g + WQ) {
        let w0 = wrun(n0, g);
        let w1 = wrun(r1, g);
        let w2 = wrun(r2, g);
        let w3 = wrun(r3, g);
        for (var c = 0u; c < MC; c = c + 1u) {
            let xv = xrun(xb[c], g, K);
            acc[c] = acc[c] + vec4<f32>(dot16(w0, xv), dot16(w1, xv), dot16(w2, xv), dot16(w3, xv));
        }
    }
    // The partial sums of 8 x rows at a time (red holds 8 KiB).
    let steps = (MC + 7u) / 8u;
    for (var c0 = 0u; c0 < 8u * steps; c0 = c0 + 8u) {
        if (steps > 1u) { workgroupBarrier(); }
        for (var c = c0; c < min(MC, c0 + 8u); c = c + 1u) { red[(c - c0) * WQ + lid] = acc[c]; }
        workgroupBarrier();
        if (lid < NR * 8u) {
            let c = lid / NR;
            let r = lid % NR;
            if (c0 + c < MC && n0 + r < N && m0 + c0 + c < M) {
                var s = 0.0;
                for (var t = 0u; t < WQ; t = t + 1u) { s = s + red[c * WQ + t][r]; }
                st_y(pw(8u) + (m0 + c0 + c) * pw(9u) + n0 + r, s);
            }
        }
    }
}

@compute @workgroup_size(16, 16)
fn qmm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = pw(0u);
    let N = pw(1u);
    let K = pw(2u);
    let sxk = pw(4u);
    let BM = 16u * TM;
    let m0 = wid.y * BM;
    let n0 = wid.x * QBN;
    let tid = lid.y * 16u + lid.x;
    // A 32-deep slice t is pieces 2 t and 2 t + 1 of every W row: their columns,
    // in the pieces' order (a permutation of the slice's k: the sum is the same),
    // are what the x tile holds. This invocation loads slice column kx of x rows
    // m0 + tid / 32 + 8 i, i < 2 TM, and W piece 2 t + wg of tile row wn.
    let kx = tid % QBK;
    var xb: array<u32, 8>;
    for (var i = 0u; i < 2u * TM; i = i + 1u) { xb[i] = xrow(min(m0 + tid / QBK + 8u * i, M - 1u)); }
    let wn = tid / 2u;
    let wg = tid % 2u;
    let wrow = min(n0 + wn, N - 1u);
    // Row i of this invocation's outputs, columns lid.x + 16 j (j < 4), in register
    // i: named, not an array indexed by loop counters, which NVIDIA's compiler keeps
    // in memory (the float GEMM written that way ran 20x slower there).
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let slices = ((K + 15u) / 16u + 1u) / 2u;
    for (var t = 0u; t < slices; t = t + 1u) {
        let kk = xcol(2u * t + kx / 16u, (kx % 16u) / 4u) + kx % 4u;
        for (var i = 0u; i < 2u * TM; i = i + 1u) {
            let mm = tid / QBK + 8u * i;
            var v = 0.0;
            if (m0 + mm < M && kk < K) { v = ld_x(xb[i] + kk * sxk); }
            Xs[kx * BM + mm] = v;
        }
        if (tid < 2u * QBN) {
            let g = 2u * t + wg;
            var w = array<vec4<f32>, 4>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
            if (16u * g < K) { w = wrun(wrow, g); }
            let b = 16u * wg * QBN + wn;
            for (var j = 0u; j < 4u; j = j + 1u) {
                let q = w[j];
                Ws[b + (4u * j) * QBN] = q.x;
                Ws[b + (4u * j + 1u) * QBN] = q.y;
                Ws[b + (4u * j + 2u) * QBN] = q.z;
                Ws[b + (4u * j + 3u) * QBN] = q.w;
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < QBK; kk = kk + 1u) {
            let b = kk * QBN + lid.x;
            let bv = vec4<f32>(Ws[b], Ws[b + 16u], Ws[b + 32u], Ws[b + 48u]);
            let a = kk * BM + lid.y;
            acc0 = acc0 + Xs[a] * bv;
            // TM is a pipeline constant: the rows a smaller tile lacks are compiled out.
            if (TM > 1u) { acc1 = acc1 + Xs[a + 16u] * bv; }
            if (TM > 2u) { acc2 = acc2 + Xs[a + 32u] * bv; }
            if (TM > 3u) { acc3 = acc3 + Xs[a + 48u] * bv; }
        }
        workgroupBarrier();
    }
    qmm_put(m0 + lid.y, n0 + lid.x, M, N, acc0);
    if (TM > 1u) { qmm_put(m0 + lid.y + 16u, n0 + lid.x, M, N, acc1); }
    if (TM > 2u) { qmm_put(m0 + lid.y + 32u, n0 + lid.x, M, N, acc2); }
    if (TM > 3u) { qmm_put(m0 + lid.y + 48u, n0 + lid.x, M, N, acc3); }
}

// Outputs (gm, gn + 16 j), j < 4, inside the product.
fn qmm_put(gm: u32, gn: u32, M: u32, N: u32, v: vec4<f32>) {
    if (gm >= M) { return; }
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (gn + 16u * j < N) { st_y(pw(8u) + gm * pw(9u) + gn + 16u * j, v[j]); }
    }
}
