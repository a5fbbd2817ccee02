"""The compiled C kernels against the numba and NumPy paths and the gguf package's codecs."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from hypothesis import given, settings
from hypothesis import strategies as st
from gguf import quants as gq

from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast
from tallow.quantized import ggml_type
from tallow.backends.cpu.quantized import vec_dot

pytestmark = pytest.mark.skipif(not native.available(), reason="the C extension is not built")

F = np.float32
ISAS = ["scalar", "avx2", "avx512vnni"]


def usable_isas():
    order = ISAS[: ISAS.index(native.status()["best_isa"]) + 1]
    return order


@pytest.fixture(params=ISAS)
def isa(request):
    if request.param not in usable_isas():
        pytest.skip(f"this CPU has no {request.param}")
    before = native.isa()
    native.set_isa(request.param)
    yield request.param
    native.set_isa(before)


def weight(name, n, k, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.02, (n, k)).astype(F)
    w[0, :32] = 0  # an all-zero block (d = 0)
    return ggml_type(name).quantize(w).reshape(-1)


def activations(m, k, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (m, k)).astype(F) * rng.uniform(1e-3, 1e3, (m, 1)).astype(F)
    if m > 1:
        x[1, :32] = 0  # an all-zero activation block
    return x


SHAPES = [(1, 32, 1), (13, 64, 1), (40, 576, 3), (37, 96, 6), (64, 1536, 1), (9, 160, 9)]
K_SHAPES = [(1, 256, 1), (13, 512, 1), (40, 1536, 3), (37, 256, 6), (9, 768, 9)]


def shapes_of(name):
    return K_SHAPES if ggml_type(name).block_size == 256 else SHAPES


@pytest.mark.parametrize("name,n,k,m", [(f, *s) for f in native.SUPPORTED for s in shapes_of(f)])
def test_kernels_equal_the_numba_path_bit_for_bit(isa, name, n, k, m):
    raw = weight(name, n, k)
    x = activations(m, k)
    nw = native.NativeWeight(raw, name, n, k)
    y = nw.matmul_t(x, num_threads=1)
    if fast.available():
        ref = fast.TiledWeight(raw, name, n, k).matmul_t(x, 1)
        np.testing.assert_array_equal(y, ref)
    # ggml's product from the gguf package's dequantized weight (an independent oracle):
    # exact up to float order with Q8_0's activations, within their rounding with Q8K's
    t = ggml_type(name)
    wq = gq.dequantize(raw.reshape(n, -1), GGMLQuantizationType[t.ggml_name.upper()]).astype(np.float64)
    if t.dot_type.name == "Q8_0":
        xq = gq.dequantize(gq.quantize(x, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)
        bound = 1e-5
    elif t.dot_type.name == "Q8_1":  # Q8_0's integers and d; the block sum s rounded to f16
        xq = gq.dequantize(gq.quantize(x, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)
        bound = 2e-3
    else:
        xq, bound = x, 1e-2
    ref64 = xq.astype(np.float64) @ wq.T
    scale = np.abs(xq).astype(np.float64) @ np.abs(wq).T
    assert np.all(np.abs(y - ref64) <= bound * scale + 1e-30)


@pytest.mark.parametrize("name", native.SUPPORTED)
def test_threads_and_batch_split_do_not_change_bits(name):
    n, k, m = 200, 512, 37
    raw = weight(name, n, k, seed=3)
    x = activations(m, k, seed=4)
    nw = native.NativeWeight(raw, name, n, k)
    one = nw.matmul_t(x, num_threads=1)
    native_min = native.MIN_WORK_PER_THREAD
    try:
        native.MIN_WORK_PER_THREAD = 1  # force the split on this small product
        two = nw.matmul_t(x, num_threads=2)
    finally:
        native.MIN_WORK_PER_THREAD = native_min
    np.testing.assert_array_equal(one, two)
    rows = np.stack([nw.matmul_t(x[i], num_threads=1) for i in range(m)])
    np.testing.assert_array_equal(one, rows)
    out = np.empty(n, F)
    np.testing.assert_array_equal(nw.matvec(np.ascontiguousarray(x[5]), out), one[5])


@pytest.mark.parametrize("name", ["Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q6K", "Q4K", "Q5K", "IQ4_XS"])
def test_isas_agree_on_large_activations(isa, name):
    n, k = 24, 4096
    raw = weight(name, n, k, seed=7)
    x = activations(4, k, seed=8) * F(1e30)  # scales near f16's range end
    y = native.NativeWeight(raw, name, n, k).matmul_t(x, 1)
    native.set_isa("scalar")
    np.testing.assert_array_equal(y, native.NativeWeight(raw, name, n, k).matmul_t(x, 1))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_activations_take_the_numpy_codec(bad):
    n, k = 16, 64
    raw = weight("Q8_0", n, k)
    x = activations(3, k)
    x[2, 5] = bad
    y = native.NativeWeight(raw, "Q8_0", n, k).matmul_t(x, 1)
    ref = vec_dot.matmul_t(x, raw, "Q8_0", n, k, num_threads=1)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    y1 = native.NativeWeight(raw, "Q8_0", n, k).matmul_t(x[2], 1)
    np.testing.assert_array_equal(np.isnan(y1), np.isnan(ref[2]))


def test_scalar_f16_rounding_matches_numpy():
    rng = np.random.default_rng(0)
    vals = np.concatenate([
        rng.uniform(-1, 1, 2000) * 10.0 ** rng.integers(-9, 6, 2000),
        [0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e6, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001, 3 * 2.0 ** -26,
         6.1e-5, 6.097e-5, np.inf, -np.inf],
    ]).astype(F)
    for v in vals:
        with np.errstate(over="ignore"):
            want = float(np.float32(v).astype(np.float16).astype(F))
        got = native._kernels.f16_round(float(v))
        assert got == want or (np.isnan(got) and np.isnan(want)), (v, got, want)


def test_shapes_and_types_are_checked():
    with pytest.raises(ValueError, match="multiple of 32"):
        native.NativeWeight(np.zeros(18, np.uint8), "Q4_0", 1, 16)
    with pytest.raises(ValueError, match="multiple of 256"):
        native.NativeWeight(np.zeros(144, np.uint8), "Q4K", 1, 128)
    with pytest.raises(ValueError, match="no compiled kernel"):
        native.repack(np.zeros(84, np.uint8), "Q2K", 1, 256)
    nw = native.NativeWeight(weight("Q4_0", 8, 64), "Q4_0", 8, 64)
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 64\)"):
        nw.matmul_t(np.zeros((2, 32), F))
    with pytest.raises(ValueError, match="bytes"):  # the C side checks the buffers' sizes
        native._kernels.matvec(native._kernels.Q4_0, nw.packed, 8, 64, np.zeros(32, F), np.zeros(8, F))
    assert nw.matmul_t(np.zeros((0, 64), F)).shape == (0, 8)


def test_single_rows_and_small_products_stay_on_one_thread():
    assert native.plan_threads(1, 1536, 576, 192, 2) == 1  # a layer's matrix-vector product
    assert native.plan_threads(4, 64, 576, 8, 2) == 1
    assert native.plan_threads(1, 49152, 576, 6144, 2) == 2  # a vocabulary-sized output layer
    assert native.plan_threads(1, 49152, 576, 6144, 1) == 1
    assert native.plan_threads(512, 1536, 576, 192, 2) == 2


@pytest.mark.parametrize("name", ["Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q8_0"])
def test_32_element_formats_keep_the_gguf_size(name):
    """The interleaved layouts hold exactly the file's bytes (no unpacked copy)."""
    raw = weight(name, 48, 576)
    assert native.NativeWeight(raw, name, 48, 576).nbytes == raw.nbytes


def test_q6k_keeps_the_gguf_size():
    """Q6K's values stay six bits (low four as nibbles, top two regrouped), not a byte each."""
    raw = weight("Q6K", 48, 512)
    assert native.NativeWeight(raw, "Q6K", 48, 512).nbytes == raw.nbytes


@pytest.mark.parametrize("name", ["Q5_0", "Q5_1"])
def test_fifth_bits_of_every_position_reach_the_product(name):
    """Each element's fifth bit alone: the product sees it at the right row and column."""
    t = ggml_type(name)
    n, k = 8, 32
    x = np.zeros((1, k), F)
    for col in (0, 3, 15, 16, 21, 31):
        x[:] = 0
        x[0, col] = 1.0
        w = np.zeros((n, k), F)
        w[np.arange(n), col] = np.linspace(0.5, 1.0, n)  # large: the fifth bit is set
        raw = t.quantize(w).reshape(-1)
        y = native.NativeWeight(raw, name, n, k).matmul_t(x, 1)
        ref = vec_dot.matmul_t(x, raw, name, n, k, num_threads=1)
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("name", ["Q6K", "IQ4_XS"])
def test_repacking_a_large_weight_holds_little_besides_its_result(name):
    """The unpacked values are made a slice of rows at a time: a vocabulary-sized output
    layer's repacking once peaked at several times its size in temporaries."""
    import tracemalloc

    from .test_activation_rounding import weight_blocks

    n, k = 4096, 2048
    raw = weight_blocks(name, n, k, seed=2)
    tracemalloc.start()
    try:
        fmt, packed = native.repack(raw, name, n, k)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < packed.nbytes + (8 << 20), (peak, packed.nbytes)  # (the unpacked values: 8 MiB)


@pytest.fixture
def tiled_rows():
    """Sets the row count from which products take the tiled kernels; restores it after."""
    before = native._kernels.set_tiled_min_rows(6)
    yield native._kernels.set_tiled_min_rows
    native._kernels.set_tiled_min_rows(before)


TILED_SHAPES = [(40, 512, 6), (37, 768, 13), (24, 256, 64), (9, 1536, 7), (200, 512, 37), (16, 28672, 6)]


@pytest.mark.skipif(not native.available() or native.status()["best_isa"] != "avx512vnni",
                    reason="the tiled kernels are the AVX-512 VNNI build's")
@pytest.mark.parametrize("name", native.SUPPORTED)
@pytest.mark.parametrize("n,k,m", TILED_SHAPES)
def test_tiled_kernels_equal_the_row_kernels_bit_for_bit(tiled_rows, name, n, k, m):
    """Sixteen weight rows a tile (an odd group count leaves a half-empty one, a ragged n a
    partial group), any activation row count, threads splitting at odd groups, scales from
    1e-3 up to near the top of the activations' f16 scales (Q8_0's d, Q8_1's block sums):
    the same bits as the row kernels and as one row at a time."""
    raw = weight(name, n, k, seed=11)
    x = activations(m, k, seed=12)
    x[-1] *= F(1e3 if name in ("Q4_1", "Q5_1") else 5e6) / np.abs(x[-1]).max()
    nw = native.NativeWeight(raw, name, n, k)
    tiled_rows(1)
    tiled = nw.matmul_t(x, num_threads=1)
    native_min = native.MIN_WORK_PER_THREAD
    try:
        native.MIN_WORK_PER_THREAD = 1
        split = nw.matmul_t(x, num_threads=2)
    finally:
        native.MIN_WORK_PER_THREAD = native_min
    tiled_rows(10 ** 9)
    rows = nw.matmul_t(x, num_threads=1)
    np.testing.assert_array_equal(tiled, rows)
    np.testing.assert_array_equal(split, rows)
    one = np.stack([nw.matmul_t(x[i], num_threads=1) for i in range(m)])
    np.testing.assert_array_equal(tiled, one)
    assert np.isfinite(tiled).all()


@pytest.mark.skipif(not native.available() or native.status()["best_isa"] != "avx512vnni",
                    reason="the tiled kernels are the AVX-512 VNNI build's")
@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(native.SUPPORTED), n=st.integers(1, 70), blocks=st.integers(1, 5),
       m=st.integers(1, 30), seed=st.integers(0, 2 ** 16))
def test_tiled_and_row_kernels_agree_on_any_shape(name, n, blocks, m, seed):
    """Any weight height, width and activation row count: the tiled path's bits are the
    row kernels'."""
    k = blocks * ggml_type(name).block_size
    raw = weight(name, n, k, seed=seed)
    x = activations(m, k, seed=seed + 1)
    nw = native.NativeWeight(raw, name, n, k)
    before = native._kernels.set_tiled_min_rows(1)
    try:
        tiled = nw.matmul_t(x, num_threads=1)
        native._kernels.set_tiled_min_rows(10 ** 9)
        rows = nw.matmul_t(x, num_threads=1)
    finally:
        native._kernels.set_tiled_min_rows(before)
    np.testing.assert_array_equal(tiled, rows)


def test_tiled_row_count_is_checked(tiled_rows):
    with pytest.raises(ValueError, match="< 1"):
        tiled_rows(0)
