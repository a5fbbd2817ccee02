"""The compiled (numba) quantized matmul against candle's vec_dot (scalar port) and exact constructions."""

import numpy as np
import pytest

from support.quantized_reference import QUANTIZED, reference_matmul
from support.quantized_samples import sample_matrix
from tallow.backends.cpu.quantized import fast
from tallow.quantized import ggml_type, matmul_t_dequantized, prepare_weight

F = np.float32
# ggml's generic routines add the scaled block terms one by one: these agree bit for bit.
BIT_EXACT = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2K", "Q8K"]

pytestmark = pytest.mark.skipif(not fast.available(), reason=f"numba path unavailable: {fast.status()}")


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(31)
    x = rng.standard_normal((5, 512)).astype(F)  # a group of four rows and a single one
    x[1] *= 40.0
    x[2, :256] *= 1e-3
    w = (rng.standard_normal((7, 512)) * rng.uniform(0.1, 3, (7, 1))).astype(F)
    return x, w


@pytest.mark.parametrize("name", QUANTIZED)
def test_matches_candle_vec_dot(name, problem):
    x, w = problem
    t = ggml_type(name)
    raw = t.quantize(w)
    ref = reference_matmul(name, x, raw)
    got = fast.TiledWeight(raw, name, *w.shape).matmul_t(x)
    assert got.dtype == F and got.shape == (5, 7)
    plain = matmul_t_dequantized(x, raw, name, *w.shape)
    scale = np.abs(x) @ np.abs(t.dequantize(raw).reshape(w.shape)).T
    # The float product without activation quantization is far from ref: agreeing checks the method.
    assert (np.abs(plain - ref) > 20e-6 * scale).any()
    if name in BIT_EXACT:
        np.testing.assert_array_equal(got, ref)
    else:  # Q3K..Q6K scale each super-block's integer sum at once, not in ggml's eight lanes
        assert (np.abs(got - ref) <= 1e-6 * scale).all(), np.abs(got - ref).max()


def test_exact_integer_sums_with_power_of_two_scales():
    # Every term exact: the result must be the exact value, rounded once.
    rng = np.random.default_rng(4)
    n, k = 70, 256
    q = rng.integers(-128, 128, (n * k // 32, 32))
    d = np.exp2(rng.integers(-3, 1, (n * k // 32, 1))).astype(np.float16)
    raw = np.concatenate([d.view(np.uint8), q.astype(np.int8).view(np.uint8)], axis=1)
    xq = rng.integers(-120, 121, (5, k // 32, 32))
    xq[:, :, 0] = 127
    e = np.exp2(rng.integers(-6, -2, (5, k // 32, 1)))
    x = (xq * e).astype(F).reshape(5, k)
    exact = np.einsum("ibt,jbt,jb,ib->ij", xq.astype(np.float64), q.reshape(n, k // 32, 32).astype(np.float64),
                      d.astype(np.float64).reshape(n, k // 32), e[..., 0])
    np.testing.assert_array_equal(fast.TiledWeight(raw, "Q8_0", n, k).matmul_t(x), exact.astype(F))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q2K", "Q4K", "Q6K"])
def test_rows_do_not_depend_on_batch_tiles_or_threads(name):
    rng = np.random.default_rng(8)
    k, n = 512, 150  # 150 rows: the last tile is padded
    w = rng.standard_normal((n, k)).astype(F)
    x = rng.standard_normal((37, k)).astype(F)
    tw = fast.TiledWeight(ggml_type(name).quantize(w), name, n, k)
    assert tw.tiles * tw.jw >= n > (tw.tiles - 1) * tw.jw
    batch = tw.matmul_t(x, num_threads=2)
    np.testing.assert_array_equal(batch, tw.matmul_t(x, num_threads=1))
    alone = np.concatenate([tw.matmul_t(x[i : i + 1]) for i in range(0, 37, 9)])
    np.testing.assert_array_equal(batch[::9], alone)
    np.testing.assert_array_equal(tw.matmul_t(x.reshape(37, 1, k))[:, 0], batch)


@pytest.mark.parametrize("name", ["Q5_1", "Q3K", "Q5K"])
def test_agrees_with_numpy_path(name):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((40, 768)).astype(F)
    x = rng.standard_normal((6, 768)).astype(F)
    raw = ggml_type(name).quantize(w)
    a = fast.TiledWeight(raw, name, 40, 768).matmul_t(x)
    b = prepare_weight(raw, name, 40, 768).matmul_t(x)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


def test_large_weight_uses_threads_and_agrees():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((512, 1024)).astype(F)
    x = rng.standard_normal((4, 1024)).astype(F)
    raw = ggml_type("Q4K").quantize(w)
    tw = fast.TiledWeight(raw, "Q4K", 512, 1024)
    np.testing.assert_array_equal(tw.matmul_t(x, num_threads=2), tw.matmul_t(x, num_threads=1))
    ref = reference_matmul("Q4K", x[:1], raw[:3])
    scale = np.abs(x[:1]) @ np.abs(ggml_type("Q4K").dequantize(raw[:3]).reshape(3, 1024)).T
    assert (np.abs(tw.matmul_t(x[:1])[:, :3] - ref) <= 1e-6 * scale).all()


def test_memory_of_the_tiled_layout():
    w = np.zeros((256, 1024), F)
    # int8 values (4-bit ones two per byte) plus one f32 scale per block (and Q4_1's minimum)
    for name, per_weight in (("Q4_0", 0.625), ("Q8_0", 1.125), ("Q5_0", 1.125), ("Q4_1", 0.75)):
        tw = fast.TiledWeight(ggml_type(name).quantize(w), name, 256, 1024)
        assert tw.nbytes == 256 * 1024 * per_weight, name
    # values, d and dmin per 256, eight 6-bit scales and mins per 256 (one byte each)
    for name, values in (("Q4K", 0.5), ("Q5K", 1)):
        tw = fast.TiledWeight(ggml_type(name).quantize(w), name, 256, 1024)
        assert tw.nbytes == 256 * 1024 * (values + 8 / 256 + 16 / 256), name


def test_shapes_and_errors():
    w = np.ones((8, 64), F)
    tw = fast.TiledWeight(ggml_type("Q8_0").quantize(w), "Q8_0", 8, 64)
    assert tw.matmul_t(np.zeros((0, 64), F)).shape == (0, 8)
    assert tw.matmul_t(np.ones((2, 3, 64), F)).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="expected"):
        tw.matmul_t(np.ones((2, 32), F))
    with pytest.raises(ValueError, match="plain float"):
        fast.TiledWeight(w.view(np.uint8), "F32", 8, 64)
    with pytest.raises(ValueError, match="multiple of the block size"):
        fast.TiledWeight(np.zeros(8 * 18, np.uint8), "Q4_0", 8, 48)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("TALLOW_NO_NUMBA", "1")
    assert not fast.available() and fast.status()["disabled"]
    monkeypatch.setenv("TALLOW_NO_NUMBA", "0")
    assert fast.available()
    assert fast.status()["compile_seconds"] is not None


@pytest.mark.parametrize("name", ["Q4_0", "Q5_1", "Q8_1", "Q2K", "Q4K", "Q6K"])
def test_compiled_activation_quantization_is_the_codecs(name):
    # Dot types Q8_0, Q8_1 and Q8K: the compiled quantizer gives the NumPy codecs' values.
    rng = np.random.default_rng(12)
    k = 512
    x = sample_matrix(rng, 9, k)
    x[6, :64] = np.arange(64) * 0.5 - 16  # exact halves: rounding ties
    x[7] = rng.integers(-3, 4, k) * 0.25
    x[8, 5] = -x[8].max() * 1.5  # a negative extreme (Q8K keeps its sign)
    t = ggml_type(name)
    tw = fast.TiledWeight(t.quantize(np.ones((4, k), F)), name, 4, k)
    assert fast._state["quantize"] is not None
    got = tw.quantize_activations(x)
    want = tw._quantize_activations_numpy(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    bad = x.copy()
    bad[0, 3] = np.nan  # non-finite: the NumPy codec decides
    for a, b in zip(tw.quantize_activations(bad), tw._quantize_activations_numpy(bad)):
        np.testing.assert_array_equal(a, b)
