// conv.wgsl: convolution helpers (all element-wise "map" kernels).
//   im2col:  cols (B, G, OH, OW, CG, KH, KW) of the input, zero outside it; a
//            batched GEMM with the kernel then gives the convolution.
//   convt:   the transposed convolution, one output element per invocation
//            (summing the input pixels and taps that land on it).
//   pool:    OP 0 average, 1 max over (KH, KW) windows.
// Words from 16 (im2col): G OH OW CG KH KW H W SH SW PH PW DH DW, x strides (4), x offset.
// Words from 16 (convt): CO OH OW COG CIG KH KW H W SH SW PH PW DH DW, x strides (4),
//   x offset, kernel strides (4), kernel offset.
// Words from 16 (pool): C OH OW KH KW SH SW, x strides (4), x offset.
override OP: u32 = 0u;

//#if IM2COL
fn elem(g: u32) -> TY {
    var r = g;
    let kx = r % pw(21u); r = r / pw(21u);
    let ky = r % pw(20u); r = r / pw(20u);
    let c = r % pw(19u); r = r / pw(19u);
    let ox = r % pw(18u); r = r / pw(18u);
    let oy = r % pw(17u); r = r / pw(17u);
    let grp = r % pw(16u);
    let b = r / pw(16u);
    let iy = i32(oy * pw(24u) + ky * pw(28u)) - pi32(26u);
    let ix = i32(ox * pw(25u) + kx * pw(29u)) - pi32(27u);
    if (iy < 0 || ix < 0 || iy >= pi32(22u) || ix >= pi32(23u)) { return TY(0); }
    let ch = grp * pw(19u) + c;
    return ld_a(pw(34u) + b * pw(30u) + ch * pw(31u) + u32(iy) * pw(32u) + u32(ix) * pw(33u));
}
//#elif CONVT
fn elem(g: u32) -> TY {
    var r = g;
    let ox = r % pw(18u); r = r / pw(18u);
    let oy = r % pw(17u); r = r / pw(17u);
    let co = r % pw(16u);
    let b = r / pw(16u);
    let cog = pw(19u);
    let cig = pw(20u);
    let grp = co / cog;
    let c = co % cog;
    let KH = pw(21u);
    let KW = pw(22u);
    let H = pi32(23u);
    let W = pi32(24u);
    let SH = pi32(25u);
    let SW = pi32(26u);
    var acc = T(0);
    for (var ci = 0u; ci < cig; ci = ci + 1u) {
        let ch = grp * cig + ci;
        let xb = pw(35u) + b * pw(31u) + ch * pw(32u);
        let kb = pw(40u) + ch * pw(36u) + c * pw(37u);
        for (var ky = 0u; ky < KH; ky = ky + 1u) {
            let ty = i32(oy) + pi32(27u) - i32(ky * pw(29u));
            if (ty < 0 || ty % SH != 0) { continue; }
            let iy = ty / SH;
            if (iy >= H) { continue; }
            for (var kx = 0u; kx < KW; kx = kx + 1u) {
                let tx = i32(ox) + pi32(28u) - i32(kx * pw(30u));
                if (tx < 0 || tx % SW != 0) { continue; }
                let ix = tx / SW;
                if (ix >= W) { continue; }
                let xv = T(ld_a(xb + u32(iy) * pw(33u) + u32(ix) * pw(34u)));
                let kv = T(ld_b(kb + ky * pw(38u) + kx * pw(39u)));
                acc = acc + xv * kv;
            }
        }
    }
    return TY(acc);
}
//#else
fn elem(g: u32) -> TY {
    var r = g;
    let ox = r % pw(18u); r = r / pw(18u);
    let oy = r % pw(17u); r = r / pw(17u);
    let c = r % pw(16u);
    let b = r / pw(16u);
    let KH = pw(19u);
    let KW = pw(20u);
    let base = pw(27u) + b * pw(23u) + c * pw(24u) + oy * pw(21u) * pw(25u) + ox * pw(22u) * pw(26u);
    var acc = T(ld_a(base));
    if (OP == 0u) { acc = T(0); }
    for (var ky = 0u; ky < KH; ky = ky + 1u) {
        for (var kx = 0u; kx < KW; kx = kx + 1u) {
            let v = T(ld_a(base + ky * pw(25u) + kx * pw(26u)));
            if (OP == 0u) {
                acc = acc + v;
            } else {
//#if T_FLOAT
                acc = m_max(acc, v);
//#else
                acc = max(acc, v);
//#endif
            }
        }
    }
    if (OP == 0u) {
//#if T_FLOAT
        acc = acc / T(KH * KW);
//#endif
    }
    return TY(acc);
}
//#endif
