"""Quantized products over any row width that is a multiple of the block: widths past
the kernels' on-stack activation buffer (16,384) up to a 70B-class FFN's 28,672 and
32,768, through the single-row path (decode) and the batched one, against the numba
path (the same bits) and the dequantized weight in float64."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gq

from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast
from tallow.quantized import ggml_type

from .test_activation_rounding import weight_blocks

pytestmark = pytest.mark.skipif(not native.available(), reason="the C extension is not built")

F = np.float32


@pytest.mark.parametrize("k", [16640, 28672, 32768])
@pytest.mark.parametrize("name", native.SUPPORTED)
def test_wide_rows_multiply_on_every_path(name, k):
    n = 12  # a part-group of rows too
    raw = weight_blocks(name, n, k, seed=k % 97)
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, (2, k)).astype(F)
    nw = native.NativeWeight(raw, name, n, k)
    one = nw.matmul_t(x[:1], num_threads=1)  # the single-row (matvec) kernels
    two = nw.matmul_t(x, num_threads=1)  # the batched ones
    vec = nw.matvec(np.ascontiguousarray(x[0]), np.empty(n, F))
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(vec, two[0])
    if fast.available():
        np.testing.assert_array_equal(two, fast.TiledWeight(raw, name, n, k).matmul_t(x, 1))
    t = ggml_type(name)
    w64 = gq.dequantize(raw.reshape(n, -1), GGMLQuantizationType[t.ggml_name.upper()]).astype(np.float64)
    ref = x.astype(np.float64) @ w64.T
    scale = np.abs(x).astype(np.float64) @ np.abs(w64).T
    assert np.all(np.abs(two - ref) <= 1e-2 * scale)  # within the activations' 8-bit rounding
