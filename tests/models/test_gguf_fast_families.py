"""Phi-3 and Gemma 3 GGUF files on the array fast path (``llama_decode``).

Oracle: the Tensor path (``gguf_decoder.load_gguf_decoder``: the family's own
``Llama``, itself checked against transformers in test_gguf_decoders.py) on the
same file. F32 files: logits within 1e-4 relative (float products, norms, rope and
softmax summed in another order); Q8_0 files: the same bits (the same quantized
products, and each product's Q8 activations round alike). Several sequences
stepped together must reproduce each sequence decoded alone bit for bit (the same
quantized products per row).

The files are laid out as llama.cpp's converter lays them out: Phi-3's fused
attn_qkv and gate|up ffn_up, its LongRoPE factors as tensors; Gemma's norms with
the one added, every sixth layer global.
"""

import math

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models import llama_decode
from tallow.models.gguf_decoder import load_gguf_decoder
from tallow.models.gguf_models import load_gguf_model
from tallow.models.quantized_llama import ModelWeights

from support.models import add_decoder_shape, write_hf_tensors

pytestmark = pytest.mark.skipif(not llama_decode.available(), reason="the compiled decode kernels are not built")

SMALL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0)
WINDOW = 10
# longer than the sliding window, and past Phi-3's original context (24) below
PROMPT = [(5 * i + 2) % 300 + 4 for i in range(30)]
STEPS = 16


def _phi3():
    from transformers import Phi3Config, Phi3ForCausalLM
    # LongRoPE with an original context of 24: the prompt crosses it, so positions
    # rotate with the short factors, then with the long ones
    half = SMALL["hidden_size"] // SMALL["num_attention_heads"] // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0,
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 0.7 * i for i in range(half)],
            "original_max_position_embeddings": 24}
    return Phi3ForCausalLM(Phi3Config(**SMALL, num_hidden_layers=2, max_position_embeddings=96,
                                      rope_parameters=rope, original_max_position_embeddings=24,
                                      tie_word_embeddings=False, pad_token_id=0))


def _gemma3(linear=False):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # linear: the global layers' positions scaled as Gemma 3 4B's are
    full = {"rope_type": "linear", "factor": 8.0} if linear else {"rope_type": "default"}
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "max_position_embeddings": 128, "tie_word_embeddings": True, "num_hidden_layers": 6,
        "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": WINDOW,
        "rope_parameters": {"full_attention": {**full, "rope_theta": 1e6},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}))


def write_gguf(hf, arch, path, quantized, phi3_window=0):
    """The model as llama.cpp's convert_hf_to_gguf.py writes it (2-D weights in Q8_0
    when ``quantized``)."""
    import gguf

    c = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    head_dim = add_decoder_shape(w, c)
    if arch == "gemma3":
        full = c.rope_parameters["full_attention"]
        w.add_rope_freq_base(full["rope_theta"])
        w.add_sliding_window(c.sliding_window)
        if full["rope_type"] == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
    else:
        rope = c.rope_parameters
        original = rope["original_max_position_embeddings"]
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_rope_dimension_count(head_dim)
        w.add_sliding_window(phi3_window)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(c.max_position_embeddings / original)
                                                  / math.log(original)))
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], np.float32))
    write_hf_tensors(w, hf, arch, quantized)


def _perturbed(build, seed):
    torch.manual_seed(seed)
    hf = build().eval()
    with torch.no_grad():  # transformers initialises norms to constants
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return hf


# (family, quantized, Phi-3's sliding window): Phi-3 with and without a window;
# "gemma3-linear": Gemma 3 with linear scaling on its global layers
CASES = [("phi3", False, 0), ("phi3", False, WINDOW), ("phi3", True, WINDOW),
         ("gemma3", False, 0), ("gemma3", True, 0), ("gemma3-linear", False, 0)]
BUILDERS = {"phi3": _phi3, "gemma3": _gemma3, "gemma3-linear": lambda: _gemma3(linear=True)}


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{'q8' if c[1] else 'f32'}-w{c[2]}")
def gguf_file(request, tmp_path_factory):
    name, quantized, window = request.param
    arch = name.split("-")[0]
    hf = _perturbed(BUILDERS[name], 3)
    path = tmp_path_factory.mktemp(arch) / "m.gguf"
    write_gguf(hf, arch, path, quantized, window)
    return str(path), quantized


def _decode(model, prompt, steps, fast):
    """The prompt's logits at every position, then ``steps`` greedy cached steps'."""
    cache = model.new_cache()
    ids = tl.Tensor([prompt], dtype="u32")
    logits = [model.logits(ids, 0, cache).numpy()[0]]
    tokens = [int(logits[0][-1].argmax())]
    for i in range(steps - 1):
        row = model.forward(tl.Tensor([[tokens[-1]]], dtype="u32"), len(prompt) + i, cache).numpy()
        logits.append(row)
        tokens.append(int(row[0].argmax()))
    return np.concatenate(logits), tokens


def _rel(x, y):
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


def test_fast_path_logits_and_greedy_tokens_are_the_tensor_paths(gguf_file):
    path, quantized = gguf_file
    fast = load_gguf_model(path)
    assert isinstance(fast, ModelWeights) and fast._decoder is not None
    tensor = load_gguf_decoder(path)
    got, got_tokens = _decode(fast, PROMPT, STEPS, True)
    want, want_tokens = _decode(tensor, PROMPT, STEPS, False)
    assert got_tokens == want_tokens
    # every position, the prompt's (past the window) and each cached step's
    if quantized:
        np.testing.assert_array_equal(got, want)
    for i in range(len(got)):
        assert _rel(got[i], want[i]) <= 1e-4, f"position {i}"


def test_sequences_stepped_together_equal_each_alone(gguf_file):
    path, quantized = gguf_file
    model = load_gguf_model(path)
    prompts = [PROMPT, PROMPT[:7], PROMPT[3:25]]

    def alone(prompt, tokens):
        cache = model.new_cache()
        rows = [model.forward(tl.Tensor([prompt], dtype="u32"), 0, cache).numpy()[0]]
        for i, t in enumerate(tokens):
            rows.append(model.forward(tl.Tensor([[t]], dtype="u32"), len(prompt) + i, cache).numpy()[0])
        return np.array(rows)

    seqs = [model.new_sequence() for _ in prompts]
    got = [[model.prefill(s, p)] for s, p in zip(seqs, prompts)]
    tokens = [[] for _ in prompts]
    for _ in range(6):
        step = [int(g[-1].argmax()) for g in got]
        rows = model.step_batch(seqs, step)
        for i, t in enumerate(step):
            tokens[i].append(t)
            got[i].append(rows[i])
    for i, p in enumerate(prompts):
        want = alone(p, tokens[i])
        if quantized:
            np.testing.assert_array_equal(np.array(got[i]), want, err_msg=f"sequence {i}")
        else:
            np.testing.assert_allclose(np.array(got[i]), want, atol=1e-4, rtol=0, err_msg=f"sequence {i}")


def test_a_final_soft_cap_is_applied_as_on_the_tensor_path(tmp_path, monkeypatch):
    """A Gemma config with a final logit soft cap (llama.cpp's Gemma 3 files state
    none, so the cap is set on the config both paths read): the fast path caps as
    the Tensor path does, and the cap changes the logits."""
    from tallow.models import gguf_decoder, quantized_llama

    hf = _perturbed(_gemma3, 5)
    path = str(tmp_path / "m.gguf")
    write_gguf(hf, "gemma3", path, quantized=False)
    uncapped, _ = _decode(load_gguf_model(path), PROMPT, 2, True)
    read = gguf_decoder.config_from_gguf

    def capped(f):
        cfg = read(f)
        cfg.final_logit_softcapping = 0.5
        return cfg

    monkeypatch.setattr(gguf_decoder, "config_from_gguf", capped)
    monkeypatch.setattr(quantized_llama, "family_config", capped)
    fast = load_gguf_model(path)
    assert fast._decoder is not None
    got, _ = _decode(fast, PROMPT, 2, True)
    want, _ = _decode(load_gguf_decoder(path), PROMPT, 2, False)
    assert np.abs(got).max() <= 0.5 and _rel(uncapped, got) > 0.1
    for i in range(len(got)):
        assert _rel(got[i], want[i]) <= 1e-4, f"position {i}"
