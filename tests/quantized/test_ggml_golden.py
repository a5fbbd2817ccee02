"""Quantizers against ggml's own bytes (the reference routines llama.cpp's quantizer runs).

``fixtures/ggml_golden.npz`` was written by ggml itself (see
``fixtures/make_ggml_golden.py``); the rows cover varied scales and
distributions, all-zero and constant blocks, an empty sub-block, underflowing
squares, an outlier, values with few distinct levels (ties inside the scale
searches) and exact halves (ties in the activation roundings).
"""

import numpy as np
import pytest

from support.ggml_golden import golden
from tallow.quantized import ggml_type

# Weight formats as llama.cpp writes them, and the activation (dot) types.
QUANTIZED = ["Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "IQ4_NL", "IQ4_XS", "Q8_1", "Q8K"]


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantize_gives_ggmls_bytes(name):
    g = golden()
    t = ggml_type(name)
    ours = t.quantize(g["x"]).reshape(g[name].shape)
    bad = np.flatnonzero((ours != g[name]).reshape(-1, t.type_size).any(axis=1))
    assert bad.size == 0, f"{name}: {bad.size} of {ours.size // t.type_size} blocks differ, first {bad[:8]}"


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantize_is_row_independent(name):
    # Each row alone gives the bytes it gives in the batch (the fixture's rows were quantized together).
    g = golden()
    t = ggml_type(name)
    for i in (0, 6, len(g["x"]) - 1):
        np.testing.assert_array_equal(t.quantize(g["x"][i]), g[name][i])


def test_fixture_is_what_it_claims():
    g = golden()
    assert str(g["made_by"]).startswith("llama-cpp-python ")
    assert g["x"].dtype == np.float32 and g["x"].shape[1] == 512
    for name in QUANTIZED:
        t = ggml_type(name)
        assert g[name].shape == (g["x"].shape[0], t.nbytes(512))
