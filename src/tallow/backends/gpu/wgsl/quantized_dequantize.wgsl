// quantized_dequantize.wgsl: GGML blocks -> contiguous f32, bit for bit the NumPy
// codecs' values. One invocation per run of 16 values (quantized formats: a
// block holds QK / 16 runs; float formats: 16 elements, the last run cut at n).
// Word map: 0 runs of this dispatch, 1 elements of this dispatch (float formats:
// the run limit), 2 weight offset in its binding (bytes; float formats:
// elements), 3 output offset in its binding (elements), 15 zero (see nofma).

// A product rounded on its own: XOR with a parameter word that is always zero
// (the compiler cannot know it), so the product is never fused into an FMA with
// the add or subtract that follows it (the CPU codecs round twice).
fn nofma(v: f32) -> f32 { return bitcast<f32>(bitcast<u32>(v) ^ pw(15u)); }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = lin(wid, nwg, lid);
    if (g >= pw(0u)) { return; }
    var v: array<vec4<f32>, 4>;
    if (FLOATW) {
        v = dq16(pw(2u) + 16u * g, 0u, pw(2u) + pw(1u));
    } else {
        v = dq16(pw(2u) + (g / RPB) * QB, g % RPB, 0u);
    }
    if (FLOATW) {
        let y0 = pw(3u) + 16u * g;
        for (var i = 0u; i < 16u && 16u * g + i < pw(1u); i = i + 1u) { st_y(y0 + i, v[i / 4u][i % 4u]); }
        return;
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let e = pw(3u) + xcol(g, j);
        let q = v[j];
        st_y(e, q.x);
        st_y(e + 1u, q.y);
        st_y(e + 2u, q.z);
        st_y(e + 3u, q.w);
    }
}
