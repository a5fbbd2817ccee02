"""Block codecs against the oracles: the gguf package, ggml's bytes, candle's test values."""

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gq

from support.ggml_golden import golden
from support.quantized_samples import sample_matrix
from tallow.quantized import GGML_TYPES, ggml_type

F = np.float32
GGUF_QUANTIZE = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
GGUF_DEQUANTIZE = GGUF_QUANTIZE + ["Q2K", "Q3K", "Q4K", "Q5K", "Q6K"]
KQUANTS = ["Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "Q8K"]


def gguf_type(name):
    return GGMLQuantizationType[ggml_type(name).ggml_name.upper()]


def bits(a):
    a = np.ascontiguousarray(a, dtype=F)
    return a.view(np.uint32)


# ---------------------------------------------------------------- registry
@pytest.mark.parametrize("name", list(GGML_TYPES))
def test_registry_matches_ggml(name):
    t = ggml_type(name)
    g = gguf_type(name)
    assert t.type_id == int(g)
    if name == "Q8_1":
        # gguf-py still lists the old float-d/float-s layout (40 bytes); ggml's
        # block_q8_1 and candle's BlockQ8_1 hold two halves and 32 int8: 36.
        assert GGML_QUANT_SIZES[g] == (32, 40) and (t.block_size, t.type_size) == (32, 2 + 2 + 32)
    else:
        assert (t.block_size, t.type_size) == GGML_QUANT_SIZES[g]
    assert ggml_type(t.type_id) is t
    assert ggml_type(name.lower()) is t and ggml_type(t.ggml_name) is t


def test_registry_lookups_and_errors():
    assert ggml_type("q4k") is ggml_type("Q4_K") is ggml_type("Q4K") is ggml_type(12)
    assert ggml_type("Q4_0").dot_type is ggml_type("Q8_0")
    assert ggml_type("q5_1").dot_type.name == "Q8_1"
    assert ggml_type("Q6K").dot_type.name == "Q8K"
    with pytest.raises(ValueError, match="unknown GGML type"):
        ggml_type("q4_9")
    with pytest.raises(ValueError, match="unsupported GGML type id 4"):
        ggml_type(4)  # Q4_2, removed from ggml
    with pytest.raises(TypeError):
        ggml_type(1.5)


@pytest.mark.parametrize("name", ["Q4_0", "Q8_1", "Q4K", "Q8K"])
def test_bad_shapes_raise(name):
    t = ggml_type(name)
    with pytest.raises(ValueError, match="not a multiple of the block size"):
        t.quantize(np.zeros((3, t.block_size + 1), F))
    with pytest.raises(ValueError, match="scalar"):
        t.quantize(np.float32(1.0))
    raw = t.quantize(np.ones((2, t.block_size), F))
    with pytest.raises(ValueError, match="need"):
        t.dequantize(raw, 3 * t.block_size)
    with pytest.raises(ValueError, match="whole number"):
        t.dequantize(raw.reshape(-1)[:-1])


def test_quantize_keeps_leading_shape():
    x = np.ones((2, 3, 64), F)
    raw = ggml_type("Q4_0").quantize(x)
    assert raw.shape == (2, 3, 2 * 18) and raw.dtype == np.uint8
    assert ggml_type("Q4_0").dequantize(raw).shape == (2 * 3 * 64,)


# ---------------------------------------------------------------- gguf oracle
@pytest.mark.parametrize("name", GGUF_QUANTIZE)
@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_bit_identical_to_gguf(name, seed):
    x = sample_matrix(np.random.default_rng(seed), 24, 256)
    ours = ggml_type(name).quantize(x)
    theirs = gq.quantize(x, gguf_type(name)).view(np.uint8).reshape(ours.shape)
    np.testing.assert_array_equal(ours, theirs)


def test_quantize_rounding_edges_match_gguf():
    # Values that land exactly on .5 after scaling, and ties for the absmax.
    x = np.tile(np.arange(-16, 16, dtype=F) * F(0.5), (4, 1))
    x[1] = -x[1]
    x[2, 0], x[2, 1] = 7.0, -7.0  # equal magnitude: the first wins
    x[3] = np.float32(0.49999997)
    for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]:
        ours = ggml_type(name).quantize(x)
        theirs = gq.quantize(x, gguf_type(name)).view(np.uint8).reshape(ours.shape)
        np.testing.assert_array_equal(ours, theirs, err_msg=name)


@pytest.mark.parametrize("name", GGUF_DEQUANTIZE)
def test_dequantize_bit_identical_to_gguf(name):
    t = ggml_type(name)
    x = sample_matrix(np.random.default_rng(7), 8, 512)
    if name in KQUANTS:  # the gguf package has no K-quant quantizer: ggml's own bytes
        x = golden()["x"][:8]
        raw = golden()[name][:8].reshape(-1)
    else:
        raw = gq.quantize(x, gguf_type(name)).view(np.uint8).reshape(-1)
    ours = t.dequantize(raw, x.size)
    theirs = gq.dequantize(raw.reshape(8, -1), gguf_type(name)).reshape(-1)
    np.testing.assert_array_equal(bits(ours), bits(theirs))


@pytest.mark.parametrize("name", [n for n in GGUF_DEQUANTIZE if ggml_type(n).block_size > 1])
def test_dequantize_random_blocks_like_gguf(name):
    # Every bit pattern is a valid block once the f16 scale fields are finite.
    t = ggml_type(name)
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (64, t.type_size), dtype=np.uint8)
    ours = t.dequantize(raw)
    with np.errstate(invalid="ignore", over="ignore"):  # inf scales times 0 in gguf's code
        theirs = gq.dequantize(raw, gguf_type(name)).reshape(-1)
    assert np.isfinite(theirs).mean() > 0.5
    np.testing.assert_array_equal(bits(ours), bits(theirs))


def test_bf16_nan_stays_quiet_nan():
    x = np.array([np.nan, -np.inf, 1.0, 3.0e38], F)
    x_bits = x.view(np.uint32).copy()
    x_bits[0] = 0x7F800001  # a signalling NaN
    x = x_bits.view(F)
    ours = ggml_type("BF16").quantize(x)
    theirs = gq.quantize(x, GGMLQuantizationType.BF16).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)
    assert np.isnan(ggml_type("BF16").dequantize(ours)[0])


# ---------------------------------------------------------------- without a gguf codec
@pytest.mark.parametrize("name", ["Q8_1", "Q8K"])
def test_dequantize_without_gguf_implementation(name):
    # candle's to_float for these: x = d * q, per block.
    t = ggml_type(name)
    rng = np.random.default_rng(5)
    x = sample_matrix(rng, 6, 512)
    raw = t.quantize(x).reshape(-1, t.type_size)
    if name == "Q8K":
        d = raw[:, :4].copy().view(F)
        q = raw[:, 4:260].copy().view(np.int8)
    else:
        d = raw[:, :2].copy().view(np.float16).astype(F)
        q = raw[:, 4:].copy().view(np.int8)
    expected = np.array([F(dd) * F(qq) for dd, row in zip(d[:, 0], q) for qq in row], F)
    np.testing.assert_array_equal(bits(t.dequantize(raw)), bits(expected))


def round3(x):
    """candle's round_vector: (1000 * x).round() / 1000 in f32, halves away from zero."""
    r = (F(1000) * np.asarray(x, F)).astype(np.float64)
    return (np.sign(r) * np.floor(np.abs(r) + 0.5)).astype(F) / F(1000)


def candle_test_vector(bound, size):
    v = np.arange(size, dtype=F)
    return (v - F(size / 2)) * F(bound) / F(size / 2)


# The checks of candle-core/tests/quantized_tests.rs (quantize_q2k .. quantize_q8k):
# dequantize(quantize(get_test_vector2(0.5, 1024)))[[0, 128, 256, 512, 800, 1023]], to 3 decimals,
# and the per-element tolerances for bound 0.5 and bound 128.  The points of Q2K..Q6K are what
# ggml's quantizers give (llama-cpp-python 0.3.36's ggml_quantize_chunk, then its dequantizer);
# candle's older quantizers give slightly different ones, and their Q2K tolerance (6.0 at bound
# 128) is below ggml's 7.79.  Q8K's are candle's asserted values.
CANDLE_POINTS = {
    "Q2K": ([-0.499, -0.366, -0.249, 0.0, 0.3, 0.499], 0.1, 8.0),
    "Q3K": ([-0.493, -0.37, -0.243, 0.0, 0.292, 0.492], 0.03, 3.5),
    "Q4K": ([-0.499, -0.373, -0.249, 0.0, 0.287, 0.484], 0.017, 4.5),
    "Q5K": ([-0.5, -0.373, -0.25, 0.0, 0.283, 0.493], 0.009, 2.5),
    "Q6K": ([-0.497, -0.372, -0.249, 0.0, 0.285, 0.495], 0.008, 2.0),
    "Q8K": ([-0.5, -0.374, -0.25, -0.0, 0.283, 0.499], 0.008, 0.6),
}


@pytest.mark.parametrize("name", list(CANDLE_POINTS))
def test_kquants_reproduce_candle_test_values(name):
    points, tol_small, tol_big = CANDLE_POINTS[name]
    t = ggml_type(name)
    src = candle_test_vector(0.5, 1024)
    dst = t.dequantize(t.quantize(src))
    got = round3(dst[[0, 128, 256, 512, 800, 1023]])
    np.testing.assert_allclose(got, np.array(points, F), rtol=0, atol=1e-6)
    assert np.abs(dst - src).max() < tol_small
    big = candle_test_vector(128.0, 1024)
    assert np.abs(t.dequantize(t.quantize(big)) - big).max() < tol_big


# quantize_q4_0 .. quantize_q5_1 in candle's tests: arange(128) round trips (first 36 values).
CANDLE_ARANGE = {
    "Q4_0": [-0.0, -0.0, 3.875, 3.875, 3.875, 3.875, 7.75, 7.75, 7.75, 7.75, 11.625, 11.625, 11.625,
             11.625, 15.5, 15.5, 15.5, 15.5, 19.375, 19.375, 19.375, 19.375, 23.25, 23.25, 23.25,
             23.25, 27.125, 27.125, 27.125, 27.125, 31.0, 31.0, 31.5, 31.5, 31.5, 31.5],
    "Q4_1": [0.0, 0.0, 2.066, 2.066, 4.133, 4.133, 6.199, 6.199, 8.266, 8.266, 10.332, 10.332,
             12.398, 12.398, 14.465, 14.465, 16.531, 16.531, 18.598, 18.598, 20.664, 20.664, 22.73,
             22.73, 24.797, 24.797, 26.863, 26.863, 28.93, 28.93, 30.996, 30.996, 32.0, 32.0,
             34.066, 34.066],
    "Q5_0": [-0.0, 1.938, 1.938, 3.875, 3.875, 5.813, 5.813, 7.75, 7.75, 9.688, 9.688, 11.625,
             11.625, 13.563, 13.563, 15.5, 15.5, 17.438, 17.438, 19.375, 19.375, 21.313, 21.313,
             23.25, 23.25, 25.188, 25.188, 27.125, 27.125, 29.063, 29.063, 31.0, 31.5, 31.5, 35.438,
             35.438],
    "Q5_1": [float(i) for i in range(36)],
}


@pytest.mark.parametrize("name", list(CANDLE_ARANGE))
def test_legacy_reproduce_candle_test_values(name):
    t = ggml_type(name)
    dst = t.dequantize(t.quantize(np.arange(128, dtype=F)))
    np.testing.assert_allclose(round3(dst[:36]), np.array(CANDLE_ARANGE[name], F), rtol=0, atol=1e-6)


# ggml_quantization_error_test in candle's tests: sqrt(sum sq err) / n on 0.1 + 2 cos(i).
CANDLE_RMSE = {"Q4_0": 0.002, "Q4_1": 0.002, "Q5_0": 0.002, "Q5_1": 0.002, "Q2K": 0.0075,
               "Q3K": 0.0040, "Q4K": 0.002, "Q5K": 0.002, "Q6K": 0.002, "Q8K": 0.002,
               "Q8_0": 0.002, "Q8_1": 0.002}


@pytest.mark.parametrize("name", list(CANDLE_RMSE))
def test_quantization_error_within_candle_bounds(name):
    src = F(0.1) + F(2.0) * np.cos(np.arange(32 * 128, dtype=F))
    t = ggml_type(name)
    dst = t.dequantize(t.quantize(src))
    err = np.sqrt(np.sum((dst.astype(np.float64) - src) ** 2)) / src.size
    assert err <= CANDLE_RMSE[name]
    # The error must also be far from zero for the lossy formats, so the bound means something.
    assert err > 1e-6


@pytest.mark.parametrize(
    "name,rel",
    [("Q8_0", 0.01), ("Q8K", 0.01), ("Q6K", 0.03), ("Q5_0", 0.05), ("Q5K", 0.05),
     ("Q4_0", 0.1), ("Q4K", 0.1), ("Q3K", 0.2), ("Q2K", 0.35)],
)
def test_relative_rmse_on_gaussian_weights(name, rel):
    x = np.random.default_rng(2).standard_normal((16, 1024)).astype(F)
    t = ggml_type(name)
    err = np.sqrt(np.mean((t.dequantize(t.quantize(x)) - x.reshape(-1)) ** 2))
    assert err < rel


def test_large_tensor_is_chunked_and_consistent():
    # More blocks than one internal chunk: chunk boundaries must not change the bytes.
    x = np.random.default_rng(9).standard_normal((4, 2 ** 17)).astype(F)
    t = ggml_type("Q4K")
    whole = t.quantize(x)
    parts = np.concatenate([t.quantize(x[i : i + 1]) for i in range(4)])
    np.testing.assert_array_equal(whole, parts)
