"""Llama and TextGenerator against Hugging Face transformers (small random models)."""

import json
import os
import shutil

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models.config import ModelFormatError
from tallow.models.generate import (
    LogitsProcessor, TextGenerator, TokenOutputStream, apply_repeat_penalty,
)
from tallow.models.llama import Cache, ContextLengthError, Llama, LlamaConfig
from tallow.models.sentence import load_tokenizer

from support.models import save_llama

PROMPT = [5, 17, 99, 3, 200, 42, 7, 250, 11]


def load(d, device=tl.cpu, dtype=tl.f32):
    cfg = LlamaConfig.from_json(os.path.join(d, "config.json"))
    vb = tl.nn.VarBuilder.from_safetensors(os.path.join(d, "model.safetensors"), dtype=dtype,
                                           device=device)
    return Llama.load(vb, cfg)


def hf_step(hf, ids, past):
    with torch.no_grad():
        out = hf(torch.tensor([ids]), past_key_values=past, use_cache=True)
    return out.logits[0].numpy(), out.past_key_values


def check_against_hf(ours, hf, device, steps=20, atol=1e-4):
    cache = ours.new_cache()
    got = ours.logits(tl.Tensor([PROMPT], dtype="u32", device=device), 0, cache).numpy()[0]
    want, past = hf_step(hf, PROMPT, None)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)
    pos = len(PROMPT)
    for _ in range(steps):
        nxt = int(np.argmax(want[-1]))
        got = ours.forward(tl.Tensor([[nxt]], dtype="u32", device=device), pos, cache).numpy()[0]
        want, past = hf_step(hf, [nxt], past)
        np.testing.assert_allclose(got, want[-1], atol=atol, rtol=0)
        pos += 1
    assert cache.seq_len == pos


def test_config_reads_hf_json(tiny_llama):
    d, _ = tiny_llama
    cfg = LlamaConfig.from_json(d)
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == \
        (64, 4, 2, 16)
    assert cfg.rope_theta == 50000.0 and cfg.tie_word_embeddings and cfg.eos_token_ids == [0]
    # the older layout (rope_theta at the top level, as SmolLM2's config.json)
    old = json.loads((d / "config.json").read_text())
    old.pop("rope_parameters", None)
    old["rope_theta"] = 100000.0
    old["rope_scaling"] = None
    assert LlamaConfig.from_dict(old).rope_theta == 100000.0


def test_logits_match_transformers_prompt_and_20_cached_steps(tiny_llama, device):
    d, hf = tiny_llama
    check_against_hf(load(d, device), hf, device)


def test_untied_head_and_llama3_rope_scaling(tmp_path):
    hf = save_llama(tmp_path, seed=1, tie_word_embeddings=False, num_key_value_heads=1,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    ours = load(tmp_path)
    assert ours.lm_head.weight is not ours.model.embed_tokens.weight
    assert ours.config.rope_scaling["rope_type"] == "llama3"
    check_against_hf(ours, hf, tl.cpu, steps=5)


def test_without_kv_cache_recomputes_the_same(tiny_llama):
    d, hf = tiny_llama
    ours = load(d)
    full = ours.logits(tl.Tensor([PROMPT], dtype="u32"), 0, ours.new_cache(use_kv_cache=False))
    want, _ = hf_step(hf, PROMPT, None)
    np.testing.assert_allclose(full.numpy()[0], want, atol=1e-4)


def test_greedy_generation_gives_transformers_token_ids(tiny_llama):
    d, hf = tiny_llama
    ours = load(d)
    tok = load_tokenizer(d)
    gen = TextGenerator(ours, tok, temperature=0, repeat_penalty=1.0, eos_token_ids=[])
    res = gen.generate(PROMPT, max_tokens=24)
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    assert res.token_ids == want
    assert res.finish_reason == "length" and res.prompt_tokens == len(PROMPT)
    # streaming yields exactly the decoded text
    text = "".join(gen.stream(PROMPT, max_tokens=24))
    assert text == tok.decode(want, skip_special_tokens=True) == res.text


def test_sampling_is_seeded_and_respects_top_k_top_p(tiny_llama):
    d, _ = tiny_llama
    ours, tok = load(d), load_tokenizer(d)
    a = TextGenerator(ours, tok, temperature=1.0, top_p=0.9, seed=1).generate("the quick", 12)
    b = TextGenerator(ours, tok, temperature=1.0, top_p=0.9, seed=1).generate("the quick", 12)
    c = TextGenerator(ours, tok, temperature=1.0, seed=2).generate("the quick", 12)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids or len(a.token_ids) < 3
    greedy = TextGenerator(ours, tok, temperature=0, repeat_penalty=1.0).generate("the quick", 8)
    top1 = TextGenerator(ours, tok, temperature=1.5, top_k=1, repeat_penalty=1.0,
                         seed=5).generate("the quick", 8)
    assert top1.token_ids == greedy.token_ids


def test_logits_processor_distributions():
    logits = np.array([2.0, 1.0, 0.5, -1.0, 3.0], np.float32)
    p = LogitsProcessor(temperature=1.0).probabilities(logits)
    e = np.exp(logits - logits.max())
    np.testing.assert_allclose(p, e / e.sum(), rtol=1e-6)
    pk = LogitsProcessor(temperature=1.0, top_k=2).probabilities(logits)
    assert set(np.nonzero(pk)[0]) == {0, 4}
    np.testing.assert_allclose(pk.sum(), 1.0)
    # top-p: the smallest set of most likely tokens whose mass reaches p
    srt = np.sort(p)[::-1]
    pp = LogitsProcessor(temperature=1.0, top_p=float(srt[0] + srt[1] * 0.5)).probabilities(logits)
    assert set(np.nonzero(pp)[0]) == {4, 0}
    pt = LogitsProcessor(temperature=0.5).probabilities(logits)
    e2 = np.exp((logits - logits.max()) / 0.5)
    np.testing.assert_allclose(pt, e2 / e2.sum(), rtol=1e-6)
    counts = np.bincount([LogitsProcessor(seed=s, temperature=1.0).sample(logits)
                          for s in range(400)], minlength=5) / 400
    np.testing.assert_allclose(counts, p, atol=0.08)
    with pytest.raises(ValueError):
        LogitsProcessor(top_p=1.5)
    # top_k=0 keeps every token (transformers' convention); a negative k is refused
    np.testing.assert_allclose(LogitsProcessor(temperature=1.0, top_k=0).probabilities(logits),
                               e / e.sum(), rtol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        LogitsProcessor(top_k=-1)


def test_repeat_penalty_matches_candle_rule():
    logits = np.array([2.0, -1.0, 0.5, 4.0], np.float32)
    out = apply_repeat_penalty(logits, 2.0, [0, 1, 1])
    np.testing.assert_allclose(out, [1.0, -2.0, 0.5, 4.0])
    assert apply_repeat_penalty(logits, 1.0, [0]) is logits


def test_token_output_stream_releases_whole_characters(tiny_llama):
    d, _ = tiny_llama
    tok = load_tokenizer(d)
    ids = tok.encode("héllo wörld ünïcode the quick").ids
    stream = TokenOutputStream(tok)
    pieces = [p for p in (stream.next_token(i) for i in ids) if p]
    rest = stream.decode_rest()
    text = "".join(pieces) + (rest or "")
    assert text == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_errors(tiny_llama, tmp_path, minilm_dir):
    d, _ = tiny_llama
    ours = load(d)
    tok = load_tokenizer(d)
    gen = TextGenerator(ours, tok, temperature=0)
    with pytest.raises(ContextLengthError, match="context"):
        gen.generate(list(range(1, 100)), 5)
    with pytest.raises(ContextLengthError):
        ours.forward(tl.zeros((1, 97), dtype=tl.u32), 0, ours.new_cache())
    cache = ours.new_cache()
    with pytest.raises(tl.ShapeMismatchError):
        ours.forward(tl.zeros((1, 2), dtype=tl.u32), 5, cache)
    # generation stops when the context is full
    res = gen.generate(list(range(1, 90)), 50)
    assert res.finish_reason == "context" and len(res.token_ids) == 96 - 89 + 1
    # a tokenizer that does not belong to the model
    with pytest.raises(ModelFormatError, match="tokenizer"):
        TextGenerator(ours, load_tokenizer(minilm_dir))
    # another architecture; a missing file
    with pytest.raises(ModelFormatError, match="bert"):
        LlamaConfig.from_json(os.path.join(minilm_dir, "config.json"))
    with pytest.raises(FileNotFoundError):
        LlamaConfig.from_json(tmp_path / "none.json")
    with pytest.raises(FileNotFoundError):
        tl.nn.VarBuilder.from_safetensors(tmp_path / "none.safetensors")
    with pytest.raises(ModelFormatError):
        Llama.load(tl.nn.VarBuilder.from_tensors({"x": tl.zeros((1,))}), ours.config)
    bad = json.loads((d / "config.json").read_text())
    bad["num_key_value_heads"] = 3
    with pytest.raises(ModelFormatError):
        LlamaConfig.from_dict(bad)
    # weights of the wrong size name the tensor
    small = tmp_path / "small"
    shutil.copytree(d, small)
    cfg = json.loads((small / "config.json").read_text())
    cfg["hidden_size"] = 32
    (small / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(tl.ShapeMismatchError, match="model.embed_tokens.weight"):
        load(small)


def test_bf16_weights_run(tiny_llama):
    d, hf = tiny_llama
    ours = load(d, dtype=tl.bf16)
    cache = ours.new_cache()
    assert cache.dtype == tl.bf16
    got = ours.forward(tl.Tensor([PROMPT], dtype="u32"), 0, cache).numpy()
    want, _ = hf_step(hf, PROMPT, None)
    # bf16 keeps ~3 significant digits: the logits agree loosely and the argmax usually
    assert np.abs(got[0] - want[-1]).max() < 0.1


def test_text_generator_on_every_device(tiny_llama, device):
    d, hf = tiny_llama
    ours = load(d, device)
    res = TextGenerator(ours, load_tokenizer(d), temperature=0, repeat_penalty=1.0,
                        eos_token_ids=[]).generate(PROMPT, max_tokens=10)
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=10, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    assert res.token_ids == want


def test_cache_grows_and_keeps_every_position():
    cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=700)
    cache = Cache(cfg)
    rng = np.random.default_rng(0)
    ks, vs, pos = [], [], 0
    for n in (5, 1, 300, 1, 200, 3, 100):
        k = rng.standard_normal((1, 1, n, 4)).astype(np.float32)
        v = rng.standard_normal((1, 1, n, 4)).astype(np.float32)
        ks.append(k)
        vs.append(v)
        kk, vv = cache.update(0, tl.Tensor(k), tl.Tensor(v), pos)
        pos += n
        np.testing.assert_array_equal(kk.numpy(), np.concatenate(ks, 2))
        np.testing.assert_array_equal(vv.numpy(), np.concatenate(vs, 2))
    kv = cache._kv[0]  # the layer's tallow.nn.KvCache
    assert kv.k_cache.all_data.shape[2] == 700  # 256 -> 512 -> capped at the context
    # rewinding overwrites from that position on
    k = np.ones((1, 1, 2, 4), np.float32)
    kk, _ = cache.update(0, tl.Tensor(k), tl.Tensor(k), 3)
    assert kk.shape == (1, 1, 5, 4)
    np.testing.assert_array_equal(kk.numpy()[0, 0, 3:], 1.0)


def _hf_greedy(hf, prompt, n, **kw):
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                          eos_token_id=None, pad_token_id=0, **kw)
    return out[0, len(prompt):].tolist()


def test_repeat_penalty_matches_transformers_and_last_n_zero_disables_it(tiny_llama):
    d, hf = tiny_llama
    ours, tok = load(d), load_tokenizer(d)

    def run(**kw):
        return TextGenerator(ours, tok, temperature=0, eos_token_ids=[], **kw).generate(
            PROMPT, 20).token_ids

    # transformers penalises the whole sequence: a window longer than it does the same
    assert run(repeat_penalty=2.0, repeat_last_n=1000) == _hf_greedy(
        hf, PROMPT, 20, repetition_penalty=2.0)
    # candle's rule: the last 0 tokens are an empty window, so no penalty at all
    assert run(repeat_penalty=2.0, repeat_last_n=0) == _hf_greedy(hf, PROMPT, 20)


def test_a_prompt_that_fills_the_context_still_gives_one_token(tiny_llama):
    """Positions 0..95 fit a context of 96: the last position's logits give one token."""
    d, hf = tiny_llama
    ours, tok = load(d), load_tokenizer(d)
    prompt = [int(t) for t in np.random.default_rng(0).integers(1, 320, 96)]
    res = TextGenerator(ours, tok, temperature=0, repeat_penalty=1.0,
                        eos_token_ids=[]).generate(prompt, 5)
    assert res.token_ids == _hf_greedy(hf, prompt, 1)
    assert res.finish_reason == "context"
    with pytest.raises(ContextLengthError):
        TextGenerator(ours, tok, temperature=0).generate(prompt + [1], 5)
