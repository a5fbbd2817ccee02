"""The array fast path of the GGUF Llama against the Tensor-module path it replaces on the CPU."""

import numpy as np
import pytest
import torch

import tallow as tl
from tallow import config
from tallow.models import llama_decode
from tallow.models.llama import ContextLengthError
from tallow.models.quantized_llama import ModelWeights

from support.models import QLLAMA_CFG, save_llama_gguf

pytestmark = pytest.mark.skipif(not llama_decode.available(), reason="the C extension is not built")

# Largest |logit difference| between the two paths (logits' RMS is ~0.3).  F32/F16:
# summation order only.  Quantized: the products are the same bits for the same
# input (tests/quantized/test_native.py), but a norm that differs in its last bit
# can move an activation to the neighbouring 8-bit level, which moves logits by
# ~3e-3 per flip (measured max 0.016 over 7 positions for Q4_0; the Q4K products run
# the same kernels on both paths and agreed exactly).
BOUND = {"F32": 2e-5, "F16": 2e-5, "Q8_0": 0.03, "Q4_0": 0.03, "Q5_0": 0.03, "Q4K": 0.03}
CFG = dict(QLLAMA_CFG, max_position_embeddings=640, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    hf = LlamaForCausalLM(LlamaConfig(**CFG)).eval()
    d = tmp_path_factory.mktemp("decode")
    out = {}
    for fmt in BOUND:
        path = d / f"m-{fmt}.gguf"
        if fmt == "F16":
            _save_f16(hf, path)
        else:
            save_llama_gguf(hf, path, fmt)
        out[fmt] = str(path)
    return out


def _save_f16(hf, path):
    """The F32 file with every 2-D weight as F16 (as llama.cpp's F16 files hold them)."""
    from tallow.ggml.gguf_io import read_gguf, write_gguf

    tmp = str(path) + ".f32"
    save_llama_gguf(hf, tmp, "F32")
    f = read_gguf(tmp)
    tensors = {n: (t.dequantize().astype(np.float16) if len(t.shape) == 2 else t) for n, t in f.tensors.items()}
    write_gguf(path, tensors, f.metadata)


def run(model, prompt, steps):
    cache = model.new_cache()
    out = [model.forward(tl.Tensor([prompt], dtype="u32"), 0, cache).numpy()[0]]
    pos = len(prompt)
    for tok in steps:
        out.append(model.forward(tl.Tensor([[tok]], dtype="u32"), pos, cache).numpy()[0])
        pos += 1
    return np.array(out)


def tensor_path(path, monkeypatch):
    with config.settings.override(no_native=True):
        model = ModelWeights.from_gguf(path)
    assert model._decoder is None
    return model


@pytest.mark.parametrize("fmt", list(BOUND))
def test_logits_match_the_tensor_path(fmt, files, monkeypatch):
    fast = ModelWeights.from_gguf(files[fmt])
    assert fast._decoder is not None
    slow = tensor_path(files[fmt], monkeypatch)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, CFG["vocab_size"], 9).tolist()
    steps = rng.integers(0, CFG["vocab_size"], 6).tolist()
    a, b = run(fast, prompt, steps), run(slow, prompt, steps)
    assert np.abs(a - b).max() <= BOUND[fmt]
    if fmt in ("F32", "F16"):
        assert (a.argmax(-1) == b.argmax(-1)).all()


def test_the_key_value_cache_grows_past_its_first_allocation(files, monkeypatch):
    # 300 prompt positions then steps: the cache starts at 256 positions and doubles
    fast = ModelWeights.from_gguf(files["Q8_0"])
    slow = tensor_path(files["Q8_0"], monkeypatch)
    rng = np.random.default_rng(1)
    short = rng.integers(0, CFG["vocab_size"], 250).tolist()
    cache = fast.new_cache()
    fast.forward(tl.Tensor([short], dtype="u32"), 0, cache)
    more = rng.integers(0, CFG["vocab_size"], 12).tolist()
    got = [fast.forward(tl.Tensor([[t]], dtype="u32"), 250 + i, cache).numpy()[0] for i, t in enumerate(more)]
    assert cache._decode_state.cap == 512
    want = run(slow, short, more)[1:]
    assert np.abs(np.array(got) - want).max() <= BOUND["Q8_0"]


def test_all_position_logits(files, monkeypatch):
    fast = ModelWeights.from_gguf(files["Q4_0"])
    slow = tensor_path(files["Q4_0"], monkeypatch)
    ids = tl.Tensor([[3, 1, 4, 1, 5, 9, 2, 6]], dtype="u32")
    a = fast.logits(ids, 0, fast.new_cache()).numpy()
    b = slow.logits(ids, 0, slow.new_cache()).numpy()
    assert a.shape == b.shape == (1, 8, CFG["vocab_size"])
    assert np.abs(a - b).max() <= BOUND["Q4_0"]


def test_weights_are_read_in_place_from_the_map(files):
    model = ModelWeights.from_gguf(files["F16"])
    dec = model._decoder
    for part in dec.layers[0].qkv.parts + [dec.layers[0].down, dec.output]:
        assert part.half and not part.w.flags.owndata  # a view of the file, not an f32 copy
    assert dec.emb_rows.table.dtype == np.uint8 and not dec.emb_rows.table.flags.owndata
    assert "model" not in model._modules  # the Tensor modules were never built
    assert model.model.layers[0].ffn_up.weight is not None  # ... until asked for


def test_dequantize_all_keeps_the_tensor_path(files, monkeypatch):
    monkeypatch.setenv("TALLOW_DEQUANTIZE_ALL", "1")
    assert ModelWeights.from_gguf(files["Q4_0"])._decoder is None


def test_errors_are_checked_before_any_work(files):
    model = ModelWeights.from_gguf(files["Q8_0"])
    cache = model.new_cache()
    with pytest.raises(ContextLengthError, match="context"):
        model.forward(tl.Tensor([[1] * (CFG["max_position_embeddings"] + 1)], dtype="u32"), 0, cache)
    with pytest.raises(tl.TallowError, match="vocabulary"):
        model.forward(tl.Tensor([[CFG["vocab_size"]]], dtype="u32"), 0, cache)
    with pytest.raises(tl.TallowError, match="past the 0 cached"):
        model.forward(tl.Tensor([[1]], dtype="u32"), 5, cache)
    assert cache.seq_len == 0


def test_embedding_rows_are_read_from_the_file_not_the_map(files):
    """Lookups read the rows with pread (the map's pages would make the whole table resident)."""
    from tallow.ggml.gguf_io import read_gguf

    for fmt in ("F16", "Q8_0"):
        t = read_gguf(files[fmt]).tensors["token_embd.weight"]
        table = t.data.reshape(t.shape[0], -1)
        rows = llama_decode.EmbeddingRows(table)
        assert rows.fd is not None
        ids = np.array([0, 7, t.shape[0] - 1, 7, 3])
        got = rows.take(ids)
        assert got.dtype == table.dtype and np.array_equal(got, table[ids])
    plain = llama_decode.EmbeddingRows(np.arange(12, dtype=np.uint8).reshape(4, 3))
    assert plain.fd is None and np.array_equal(plain.take(np.array([2, 0])), [[6, 7, 8], [0, 1, 2]])


@pytest.mark.skipif(not llama_decode.available(), reason="the compiled decode kernels are not built")
@pytest.mark.parametrize("s,pos0", [(300, 0), (300, 20), (5, 7)])
def test_prompt_attention_blocks_match_float64_at_every_thread_count(s, pos0, monkeypatch):
    """A prompt's attention by key head and block of queries (each block multiplying only
    the keys up to its last position): the causal softmax attention of float64, and the
    same bits at 1 and 2 threads."""
    from types import SimpleNamespace

    from tallow.backends.cpu.quantized.vec_dot import single_threaded_blas

    monkeypatch.setattr(llama_decode, "_ATTENTION_ROWS", 128)  # 300 queries: two blocks and a short one
    nh, nkv, d, cap = 6, 2, 16, 512
    rng = np.random.default_rng(s + pos0)
    q = rng.standard_normal((s, nh * d)).astype(np.float32)
    kc, vc = (rng.standard_normal((nkv, cap, d)).astype(np.float32) for _ in range(2))
    dec = SimpleNamespace(nh=nh, nkv=nkv, d=d, scale=d ** -0.5)
    got = {}
    for threads in (1, 2):
        att = np.full((s, nh * d), np.nan, np.float32)
        with single_threaded_blas():  # as the decoder's prompt runs it
            llama_decode.LlamaDecoder._prompt_attention(dec, q, kc, vc, att, s, pos0, threads)
        got[threads] = att
    np.testing.assert_array_equal(got[1], got[2])
    want = np.empty((s, nh, d))
    q64 = q.reshape(s, nh, d).astype(np.float64)
    for h in range(nh):
        k, v = kc[h // (nh // nkv)].astype(np.float64), vc[h // (nh // nkv)].astype(np.float64)
        for i in range(s):
            z = k[: pos0 + i + 1] @ q64[i, h] * dec.scale
            p = np.exp(z - z.max())
            want[i, h] = (p / p.sum()) @ v[: pos0 + i + 1]
    np.testing.assert_allclose(got[1].reshape(s, nh, d), want, rtol=1e-4, atol=2e-5)
