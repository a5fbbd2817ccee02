"""One rounding rule for quantized products' activations on every path: ties of
``x / d`` (Q8_0, Q8_1) and ``iscale * x`` (Q8K) round half to even, as ggml's x86
``quantize_row_q8_0`` (``_mm256_cvtps_epi32``) and ``quantize_row_q8_K`` do, bit-equal
across the C builds (scalar, AVX2, AVX-512 VNNI), the numba kernels and the NumPy codecs."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gq

from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast, vec_dot
from tallow.quantized import ggml_type

F = np.float32
ISAS = ["scalar", "avx2", "avx512vnni"]


def usable_isas():
    if not native.available():
        return []
    return ISAS[: ISAS.index(native.status()["best_isa"]) + 1]


def tie_row(k):
    """127 first (so Q8_0's d and Q8K's iscale are exactly 1 and -1), then .5 ties of
    both parities and both signs, and values just off a tie."""
    x = np.zeros(k, F)
    pattern = np.array([127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5, -126.5,
                        np.nextafter(F(0.5), F(1)), np.nextafter(F(2.5), F(0))], F)
    for start in range(0, k, 32):  # every Q8_0 block starts with its own 127
        x[start:start + len(pattern)] = pattern
    return x


def weight_blocks(name, n, k, seed=0):
    """Random blocks of a GGML type with small finite f16 scales: every bit pattern of
    the quants reaches the product."""
    t = ggml_type(name)
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (n * k // t.block_size, t.type_size), dtype=np.uint8)
    # the f16 fields' byte offsets: d (and Q4K/Q5K's dmin, Q4_1/Q5_1's m); Q6K's d ends its block
    fields = {"Q6K": [t.type_size - 2], "Q4K": [0, 2], "Q5K": [0, 2], "Q4_1": [0, 2], "Q5_1": [0, 2]}.get(name, [0])
    for at in fields:
        halves = rng.uniform(1e-3, 1e-2, len(blocks)).astype(np.float16)
        blocks[:, at:at + 2] = halves.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(-1)


def test_numpy_codecs_round_activation_ties_to_even():
    x = tie_row(256)
    q8_0 = ggml_type("Q8_0").quantize_activations(x).reshape(-1, 34)
    q = q8_0[:, 2:].view(np.int8).astype(F)
    np.testing.assert_array_equal(q.reshape(-1), np.rint(x))  # d = 1: q is x rounded
    assert q[0, 1] == 0 and q[0, 3] == 2 and q[0, 4] == 0 and q[0, 6] == -2
    q8_1 = ggml_type("Q8_1").quantize_activations(x).reshape(-1, 36)
    np.testing.assert_array_equal(q8_1[:, 4:].view(np.int8), q8_0[:, 2:].view(np.int8))
    q8k = ggml_type("Q8K").quantize_activations(x).reshape(-1, 292)
    np.testing.assert_array_equal(q8k[:, 4:260].view(np.int8).reshape(-1).astype(F), np.rint(-x))
    # the weight codec keeps ggml's reference rule (quantize_row_q8_0_ref, the gguf package)
    w = ggml_type("Q8_0").quantize(x).reshape(-1, 34)
    np.testing.assert_array_equal(w, gq.quantize(x.reshape(1, -1), GGMLQuantizationType.Q8_0).reshape(-1, 34))
    assert w[0, 2 + 1].view(np.int8) == 1


@pytest.mark.skipif(not native.available(), reason="the C extension is not built")
@pytest.mark.parametrize("isa", ISAS)
def test_c_quantizers_round_ties_to_even(isa):
    if isa not in usable_isas():
        pytest.skip(f"this CPU has no {isa}")
    k = 512
    x = tie_row(k).reshape(1, k)
    before = native.isa()
    native.set_isa(isa)
    try:
        kern = native._kernels
        xq, xd, xs = np.empty(k, np.int8), np.empty(k // 32, F), np.empty(k // 32, np.int32)
        assert kern.quantize_q8_0(x, 1, k, xq, xd, xs)
        np.testing.assert_array_equal(xq.astype(F), np.rint(x[0]))
        xq8k, xd8k, xbs = np.empty(k, np.int8), np.empty(k // 256, F), np.empty(k // 16, np.int32)
        assert kern.quantize_q8k(x, 1, k, xq8k, xd8k, xbs)
        np.testing.assert_array_equal(xq8k.astype(F), np.rint(-x[0]))
    finally:
        native.set_isa(before)


def _paths(name, raw, n, k, x):
    """The product of every path that can run here, by name."""
    out = {"numpy": vec_dot.matmul_t(x, raw, name, n, k, num_threads=1)}
    if fast.available():
        out["numba"] = fast.TiledWeight(raw, name, n, k).matmul_t(x, 1)
    before = native.isa() if native.available() else None
    try:
        for isa in usable_isas():
            native.set_isa(isa)
            nw = native.NativeWeight(raw, name, n, k)
            out[f"c-{isa}"] = nw.matmul_t(x, num_threads=1)
            out[f"c-{isa}-matvec"] = nw.matvec(np.ascontiguousarray(x[0]), np.empty(n, F))[None]
    finally:
        if before is not None:
            native.set_isa(before)
    return out


@pytest.mark.parametrize("name", ["Q4K", "Q5K", "Q6K", "IQ4_XS", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q8_0"])
def test_products_over_ties_are_the_same_bits_on_every_path(name):
    n, k = 16, 512
    raw = weight_blocks(name, n, k, seed=3)
    x = tie_row(k).reshape(1, k)
    results = _paths(name, raw, n, k, x)
    # the compiled paths (numba, every C build) give the same bits; the NumPy path
    # sums its blocks in one float GEMM (rounding at the 1e-7 level, checked below)
    compiled = {p: y for p, y in results.items() if p != "numpy"}
    first = next(iter(compiled.values()), results["numpy"])
    for path, y in compiled.items():
        np.testing.assert_array_equal(y, first, err_msg=f"{path} differs")
    # the oracle: the activation rounded half to even by hand, times the dequantized
    # weight in float64 (Q8_0's d and Q8K's 1/iscale are exactly +-1 here)
    t = ggml_type(name)
    w64 = gq.dequantize(raw.reshape(n, -1), GGMLQuantizationType[t.ggml_name.upper()]).astype(np.float64)
    x64 = np.rint(x[0]).astype(np.float64)
    ref = w64 @ x64
    scale = np.abs(w64) @ np.abs(x64)
    bound = 2e-3 if t.dot_type.name == "Q8_1" else 1e-5  # Q8_1's stored block sums are f16
    for path, y in results.items():  # a tie rounded the other way is ~1e-4 of the scale
        assert np.all(np.abs(y[0] - ref) <= bound * scale), path


def test_the_reported_q4k_tie_case():
    """A Q4_K product over [127, 0.5, 0, ...]: the .5 rounds to 0 on every path."""
    n, k = 8, 256
    raw = weight_blocks("Q4K", n, k, seed=11)
    x = np.zeros((1, k), F)
    x[0, 0], x[0, 1] = 127, 0.5
    results = _paths("Q4K", raw, n, k, x)
    w64 = gq.dequantize(raw.reshape(n, -1), GGMLQuantizationType.Q4_K).astype(np.float64)
    ref = w64[:, 0] * 127  # 0.5 * -1 rounds to -0: only the first column counts
    for path, y in results.items():
        np.testing.assert_allclose(y[0], ref, rtol=1e-5, err_msg=path)


@pytest.mark.skipif(not native.available(), reason="the C extension is not built")
@pytest.mark.parametrize("isa", ISAS)
def test_c_q8k_takes_the_first_element_of_largest_magnitude(isa):
    """ggml's Q8K scale comes from the first element of largest magnitude, its sign
    included: blocks whose maximum appears as +a and -a at various positions (both
    orders, in one vector lane group or apart), an all-zero block, -0.0, subnormals."""
    if isa not in usable_isas():
        pytest.skip(f"this CPU has no {isa}")
    from tallow.ggml import kquants

    rng = np.random.default_rng(5)
    rows = []
    for first, second in [(3, 10), (10, 3), (0, 255), (255, 0), (8, 9), (200, 7), (31, 32)]:
        r = rng.uniform(-1, 1, 256).astype(F)
        r[first], r[second] = F(-4.5), F(4.5)
        rows.append(r)
    rows.append(np.zeros(256, F))
    rows.append(np.full(256, -0.0, F))
    rows.append((rng.uniform(-1, 1, 256) * 1e-40).astype(F))  # subnormals only
    x = np.concatenate(rows).reshape(1, -1)
    k = x.shape[1]
    before = native.isa()
    native.set_isa(isa)
    try:
        xq, xd, xbs = np.empty(k, np.int8), np.empty(k // 256, F), np.empty(k // 16, np.int32)
        assert native._kernels.quantize_q8k(x, 1, k, xq, xd, xbs)
    finally:
        native.set_isa(before)
    d, q, bsums = kquants.q8k_fields(kquants.q8k_quantize(x.reshape(-1, 256)))
    np.testing.assert_array_equal(xq, q.reshape(-1))
    np.testing.assert_array_equal(xd, d.reshape(-1))
    np.testing.assert_array_equal(xbs, bsums.reshape(-1).astype(np.int32))
    assert xd[0] > 0 and xd[1] < 0  # d = -(the first largest) / 127: -4.5 first, then 4.5 first
