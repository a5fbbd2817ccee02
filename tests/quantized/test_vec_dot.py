"""Quantized matmul against candle's vec_dot (scalar port), exact constructions and candle's own test values."""

import numpy as np
import pytest

from support.quantized_reference import QUANTIZED, reference_matmul
from tallow.quantized import ggml_type
from tallow.backends.cpu.quantized.vec_dot import PreparedWeight, matmul_t, matmul_t_dequantized, prepare_weight

F = np.float32
LAYOUTS = PreparedWeight.LAYOUTS


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((3, 512)).astype(F)
    x[1] *= 40.0
    w = (rng.standard_normal((5, 512)) * rng.uniform(0.1, 3, (5, 1))).astype(F)
    return x, w


@pytest.mark.parametrize("name", QUANTIZED)
def test_matches_candle_vec_dot(name, problem):
    x, w = problem
    t = ggml_type(name)
    raw = t.quantize(w)
    ref = reference_matmul(name, x, raw)
    # Scale of the summed terms: only float accumulation order may differ.
    scale = np.abs(x) @ np.abs(t.dequantize(raw).reshape(w.shape)).T
    tol = 1e-6 * scale
    plain = matmul_t_dequantized(x, raw, name, *w.shape)
    # The float product without activation quantization is measurably different,
    # so agreeing with ref within tol really checks the quantized semantics.
    assert (np.abs(plain - ref) > 20 * tol).any()
    for layout in LAYOUTS:
        got = prepare_weight(raw, name, *w.shape, layout=layout).matmul_t(x)
        assert got.dtype == F and got.shape == (3, 5)
        assert (np.abs(got - ref) <= tol).all(), (layout, np.abs(got - ref).max(), tol.min())


def _pow2_q8_activation(rng, m, k, block):
    """Activations whose Q8 scales are powers of two and whose values quantize exactly."""
    q = rng.integers(-120, 121, (m, k // block, block))
    q[:, :, 0] = 127  # the block maximum: d = 127 * 2**e / 127
    e = rng.integers(-6, -2, (m, k // block, 1))
    return (q * np.exp2(e)).astype(F).reshape(m, k), q.reshape(m, k), np.exp2(e)[..., 0]


@pytest.mark.parametrize("name", ["Q4_0", "Q5_0", "Q8_0"])
def test_integer_block_sums_are_exact(name):
    # With power-of-two scales every term is exact, so the result must be too.
    rng = np.random.default_rng(4)
    n, k = 7, 256
    q = rng.integers({"Q4_0": 0, "Q5_0": 0, "Q8_0": -128}[name], {"Q4_0": 16, "Q5_0": 32, "Q8_0": 128}[name], (n * k // 32, 32))
    d = np.exp2(rng.integers(-3, 1, (n * k // 32, 1))).astype(np.float16)
    if name == "Q8_0":
        raw = np.concatenate([d.view(np.uint8), q.astype(np.int8).view(np.uint8)], axis=1)
        wq = q
    else:
        lo, hi = q[:, :16], q[:, 16:]
        qs = ((lo & 15) | ((hi & 15) << 4)).astype(np.uint8)
        if name == "Q4_0":
            raw = np.concatenate([d.view(np.uint8), qs], axis=1)
            wq = q - 8
        else:
            qh = np.packbits((q >> 4).astype(np.uint8), axis=1, bitorder="little")
            raw = np.concatenate([d.view(np.uint8), qh, qs], axis=1)
            wq = q - 16
    x, xq, xd = _pow2_q8_activation(rng, 3, k, 32)
    # Exact value: sum over blocks of d_w * d_x * integer dot, in float64 (exact here).
    wq = wq.reshape(n, k // 32, 32)
    exact = np.einsum("ibt,jbt,jb,ib->ij", xq.reshape(3, k // 32, 32).astype(np.float64), wq.astype(np.float64),
                      d.astype(np.float64).reshape(n, k // 32), xd)
    for layout in LAYOUTS:
        got = prepare_weight(raw, name, n, k, layout=layout).matmul_t(x)
        np.testing.assert_array_equal(got, exact.astype(F), err_msg=layout)


def test_q8k_integer_sums_are_exact():
    rng = np.random.default_rng(6)
    n, k = 4, 512
    wq = rng.integers(-128, 128, (n * k // 256, 256))
    wd = np.exp2(rng.integers(-4, 0, (n * k // 256, 1))).astype(F)
    bsums = wq.reshape(-1, 16, 16).sum(-1).astype(np.int16)
    raw = np.concatenate([wd.view(np.uint8), wq.astype(np.int8).view(np.uint8), bsums.view(np.uint8)], axis=1)
    q = rng.integers(-100, 101, (2, k // 256, 256))
    q[:, :, 0] = -127  # Q8K: d = 1 / (-127 / max) = -2**e exactly
    e = np.exp2(rng.integers(-5, -2, (2, k // 256, 1)))
    x = (q * e).astype(F).reshape(2, k)
    exact = np.einsum("ibt,jbt,jb,ib->ij", q.astype(np.float64), wq.reshape(n, k // 256, 256).astype(np.float64),
                      wd.reshape(n, -1).astype(np.float64), e[..., 0])
    for layout in LAYOUTS:
        np.testing.assert_array_equal(prepare_weight(raw, "Q8K", n, k, layout=layout).matmul_t(x), exact.astype(F))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q4K", "Q6K"])
@pytest.mark.parametrize("layout", ["int", "f32"])
def test_rows_do_not_depend_on_the_batch(name, layout):
    # candle's qmm_batch asserts this on the CPU; 70 rows cross the internal row chunk.
    rng = np.random.default_rng(8)
    k, n = 512, 48
    w = rng.standard_normal((n, k)).astype(F)
    x = rng.standard_normal((70, k)).astype(F)
    p = prepare_weight(ggml_type(name).quantize(w), name, n, k, layout=layout)
    batch = p.matmul_t(x, num_threads=2)
    alone = np.concatenate([p.matmul_t(x[i : i + 1], num_threads=2) for i in range(0, 70, 23)])
    np.testing.assert_array_equal(batch[::23], alone)
    np.testing.assert_array_equal(p.matmul_t(x[:5], num_threads=2), batch[:5])


@pytest.mark.parametrize("name", ["Q4_0", "Q2K", "Q5K"])
def test_threads_agree(name):
    rng = np.random.default_rng(10)
    w = rng.standard_normal((32, 1024)).astype(F)
    x = rng.standard_normal((4, 1024)).astype(F)
    p = prepare_weight(ggml_type(name).quantize(w), name, 32, 1024)
    one, two = p.matmul_t(x, num_threads=1), p.matmul_t(x, num_threads=2)
    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-6 * np.abs(one).max())


# candle-core/tests/quantized_tests.rs, quantized_matmul / quantized_matmul_neg (CPU values).
CANDLE_Q4_0 = {
    False: [[85120.0, 214562.0, 345455.0, 474748.0],
            [213475.0, 604465.0, 1000686.0, 1388317.0],
            [341876.0, 994283.0, 1655709.0, 2301518.0]],
    True: [[243524.0, -19596.0, -285051.0, -549815.0],
           [23777.0, 21651.0, 19398.0, 18367.0],
           [-196472.0, 63012.0, 324585.0, 587902.0]],
}


@pytest.mark.parametrize("neg", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_candle_quantized_matmul_values(neg, layout):
    m, k, n = 3, 64, 4
    lhs = np.arange(m * k, dtype=F) - (F(m * k / 2) if neg else F(0))
    rhs = np.arange(k * n, dtype=F) - (F(k * n / 3) if neg else F(0))
    raw = ggml_type("Q4_0").quantize(rhs.reshape(n, k))
    got = prepare_weight(raw, "Q4_0", n, k, layout=layout).matmul_t(lhs.reshape(m, k))
    np.testing.assert_array_equal(np.round(got.astype(np.float64)), CANDLE_Q4_0[neg])


@pytest.mark.parametrize("name", QUANTIZED + ["F32", "F16", "BF16"])
def test_candle_test_matmul_error(name):
    # candle's test_matmul: (m, n, k) = (3, 4, 256) ramps, mean relative error <= 0.02.
    m, n, k = 3, 4, 256
    lhs = (np.arange(m * k, dtype=F) / F(m * k)).reshape(m, k)
    rhs = (np.arange(k * n, dtype=F) / F(n * k)).reshape(k, n)
    mm = lhs @ rhs
    res = matmul_t(lhs, ggml_type(name).quantize(np.ascontiguousarray(rhs.T)), name, n, k)
    assert np.mean(np.abs(mm - res) / np.abs(mm)) <= 0.02


# ggml_reference_matmul_error in candle's tests (the figures of ggml's test-quantize-fns), with
# ggml's quantizers (whose bytes test_ggml_golden checks) where candle's older ones measured
# less: Q2K 0.01072 (candle 0.004086), Q5K 0.00104 (0.000740), and Q5_1 0.00151 (0.00149) with
# ggml's Q8_1 block sums.  The overall bound stays ggml's 0.02.
GGML_DOT_ERROR = {"F32": 0.0, "F16": 0.00001, "BF16": 0.0002, "Q2K": 0.01072, "Q3K": 0.017,
                  "Q4K": 0.002425, "Q5K": 0.00104, "Q6K": 0.000952, "Q4_0": 0.001143, "Q4_1": 0.008,
                  "Q5_0": 0.001353, "Q5_1": 0.00151, "Q8_0": 0.000092, "Q8_1": 0.000092, "Q8K": 0.00065}


@pytest.mark.parametrize("name", list(GGML_DOT_ERROR))
def test_dot_product_error_within_ggml_reference(name):
    size = 32 * 128
    i = np.arange(size, dtype=F)
    cases = [
        (F(0.1) + F(2.0) * np.cos(i), F(0.1) + F(2.0) * np.cos(i + F(1.0)), 1.0),
        (i / F(size), i / F(size), 2.0),  # the case of candle issue #1526
    ]
    for a, b, err_m in cases:
        raw = ggml_type(name).quantize(a)
        got = matmul_t(b[None, :], raw, name, 1, size)[0, 0]
        reference = np.float32(np.dot(a.astype(np.float64), b.astype(np.float64)))
        err = abs(float(got) - float(reference)) / size
        assert err <= 0.02
        assert err - 0.00001 <= GGML_DOT_ERROR[name] * err_m


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
def test_float_weights_are_plain_products(name):
    # candle's QMatMul dequantizes F32/F16/BF16 weights and runs a float matmul.
    rng = np.random.default_rng(12)
    w = rng.standard_normal((6, 40)).astype(F)
    x = rng.standard_normal((2, 3, 40)).astype(F)
    raw = ggml_type(name).quantize(w)
    got = matmul_t(x, raw, name, 6, 40)
    deq = ggml_type(name).dequantize(raw).reshape(6, 40)
    assert got.shape == (2, 3, 6)
    np.testing.assert_array_equal(got.reshape(6, 6), x.reshape(6, 40) @ deq.T)


def test_dequantized_path_is_plain_float_product():
    rng = np.random.default_rng(13)
    w = rng.standard_normal((9, 256)).astype(F)
    x = rng.standard_normal((2, 256)).astype(F)
    raw = ggml_type("Q4K").quantize(w)
    expected = x @ ggml_type("Q4K").dequantize(raw).reshape(9, 256).T
    np.testing.assert_array_equal(matmul_t_dequantized(x, raw, "Q4K", 9, 256), expected)


def test_shapes_and_errors():
    raw = ggml_type("Q8_0").quantize(np.ones((4, 64), F))
    p = prepare_weight(raw, "Q8_0", 4, 64)
    assert p.matmul_t(np.ones((2, 5, 64), F)).shape == (2, 5, 4)
    assert p.matmul_t(np.ones(64, F)).shape == (4,)
    assert p.matmul_t(np.ones((0, 64), F)).shape == (0, 4)
    with pytest.raises(ValueError, match="expected"):
        p.matmul_t(np.ones((2, 32), F))
    with pytest.raises(ValueError, match="need"):
        prepare_weight(raw, "Q8_0", 5, 64)
    with pytest.raises(ValueError, match="multiple of the block size"):
        prepare_weight(raw, "Q8_0", 4, 48)
    with pytest.raises(ValueError, match="layout"):
        prepare_weight(raw, "Q8_0", 4, 64, layout="fast")


def test_prepared_memory_reported():
    w = np.random.default_rng(0).standard_normal((64, 512)).astype(F)
    raw = ggml_type("Q4_0").quantize(w)
    compact = prepare_weight(raw, "Q4_0", 64, 512)
    wide = prepare_weight(raw, "Q4_0", 64, 512, layout="f32")
    dense = prepare_weight(raw, "Q4_0", 64, 512, layout="dequantized")
    # int8 values plus one float scale per 32: 1.125 bytes per weight.
    assert compact.nbytes == 64 * 512 * 9 // 8
    assert wide.nbytes == 64 * 512 * (4 + 1 / 8)
    assert dense.nbytes == 64 * 512 * 4


def test_blas_thread_setting_is_restored():
    from threadpoolctl import threadpool_info

    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    p = prepare_weight(ggml_type("Q4_0").quantize(np.ones((8, 64), F)), "Q4_0", 8, 64)
    p.matmul_t(np.ones((3, 64), F), num_threads=2)
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


@pytest.mark.parametrize("name", ["Q4_0", "Q5_1", "Q3K", "Q4K"])
@pytest.mark.parametrize("layout", ["int", "f32"])
def test_chunk_size_does_not_change_results(monkeypatch, name, layout):
    # Small test shapes fit one chunk; force many chunks (and several row chunks).
    import tallow.backends.cpu.quantized.vec_dot as vd

    rng = np.random.default_rng(14)
    n, k = 40, 1024
    raw = ggml_type(name).quantize(rng.standard_normal((n, k)).astype(F))
    x = rng.standard_normal((7, k)).astype(F)
    p = prepare_weight(raw, name, n, k, layout=layout)
    one_chunk = p.matmul_t(x, num_threads=1), p.matmul_t(x[:1], num_threads=1)
    monkeypatch.setattr(vd, "_CHUNK", 2**10)
    monkeypatch.setattr(vd, "_ROWS", 3)
    assert p._chunk_groups(3) == vd._ACC < p.planes.shape[0]
    np.testing.assert_array_equal(p.matmul_t(x, num_threads=1), one_chunk[0])
    np.testing.assert_array_equal(p.matmul_t(x[:1], num_threads=1), one_chunk[1])


def test_concurrent_callers_with_different_thread_counts():
    # Callers sharing the worker pool (and the BLAS limit) must not disturb each other.
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(15)
    w = rng.standard_normal((64, 512)).astype(F)
    x = rng.standard_normal((3, 512)).astype(F)
    p = prepare_weight(ggml_type("Q4K").quantize(w), "Q4K", 64, 512)
    expected = {t: p.matmul_t(x, num_threads=t) for t in (1, 2, 3)}
    with ThreadPoolExecutor(6) as ex:
        jobs = [(t, ex.submit(p.matmul_t, x, t)) for t in (1, 2, 3) * 8]
        for t, job in jobs:
            np.testing.assert_array_equal(job.result(), expected[t])
