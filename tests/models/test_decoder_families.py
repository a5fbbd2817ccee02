"""Mistral, Qwen2/2.5, Qwen3, Gemma 3 and Phi-3 against Hugging Face transformers (small random models):
logits of a 32-token prompt and of 16 cached steps, and 16 greedy tokens."""

import os

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models.config import ModelFormatError
from tallow.models.decoders import decoder_config
from tallow.models.generate import TextGenerator
from tallow.models.llama import Llama, LlamaConfig
from tallow.models.sentence import load_tokenizer

from support.models import make_bpe_tokenizer

PROMPT = [(7 * i + 3) % 300 + 5 for i in range(32)]
STEPS = 16
SMALL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0)


def _mistral(**kw):
    from transformers import MistralConfig, MistralForCausalLM
    # a window shorter than the prompt, so the sliding mask hides keys
    return MistralForCausalLM(MistralConfig(**{**SMALL, "sliding_window": 12,
                                               "tie_word_embeddings": False, **kw}))


def _qwen2(**kw):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return Qwen2ForCausalLM(Qwen2Config(**{**SMALL, "tie_word_embeddings": True, **kw}))


def _qwen2_sliding():
    # sliding layers from layer 1 on, a full one first: both masks in one model
    return _qwen2(use_sliding_window=True, sliding_window=10, max_window_layers=1,
                  tie_word_embeddings=False)


def _qwen3(**kw):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(**{**SMALL, "head_dim": 32, "tie_word_embeddings": True,
                                           **kw}))


def _gemma3(**kw):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # 4 layers, the last global; a window shorter than the prompt; linear RoPE scaling
    # on the global layers as the larger Gemma 3 models have; a final soft cap
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "num_hidden_layers": 4, "head_dim": 16, "query_pre_attn_scalar": 24,
        "sliding_window": 10, "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True, **kw}))


def _phi3(**kw):
    from transformers import Phi3Config, Phi3ForCausalLM
    # LongRoPE with an original context of 32: the prompt rotates with the short
    # factors, the cached steps after it with the long ones
    half = SMALL["hidden_size"] // SMALL["num_attention_heads"] // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 0.7 * i for i in range(half)],
            "original_max_position_embeddings": 32}
    return Phi3ForCausalLM(Phi3Config(**{**SMALL, "rope_parameters": rope,
                                         "original_max_position_embeddings": 32,
                                         "tie_word_embeddings": False, "pad_token_id": 0,
                                         **kw}))


FAMILIES = {"mistral": _mistral, "qwen2": _qwen2, "qwen2-sliding": _qwen2_sliding,
            "qwen3": _qwen3, "gemma3": _gemma3, "phi3": _phi3}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    torch.manual_seed(1)
    hf = FAMILIES[request.param]()
    hf.config._attn_implementation = "eager"
    hf.eval()
    # random biases would otherwise stay zero (transformers initialises them so)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    d = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(d)
    make_bpe_tokenizer(os.path.join(d, "tokenizer.json"))
    return d, hf


def load(d, device=tl.cpu):
    cfg = decoder_config(d)
    vb = tl.nn.VarBuilder.from_safetensors(os.path.join(d, "model.safetensors"), dtype=tl.f32,
                                           device=device)
    return Llama.load(vb, cfg)


def hf_step(hf, ids, past):
    with torch.no_grad():
        out = hf(torch.tensor([ids]), past_key_values=past, use_cache=True)
    return out.logits[0].numpy(), out.past_key_values


def test_logits_match_transformers_prompt_and_cached_steps(family, device):
    d, hf = family
    ours = load(d, device)
    cache = ours.new_cache()
    got = ours.logits(tl.Tensor([PROMPT], dtype="u32", device=device), 0, cache).numpy()[0]
    want, past = hf_step(hf, PROMPT, None)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    pos = len(PROMPT)
    for _ in range(STEPS):
        nxt = int(np.argmax(want[-1]))
        got = ours.forward(tl.Tensor([[nxt]], dtype="u32", device=device), pos, cache).numpy()[0]
        want, past = hf_step(hf, [nxt], past)
        np.testing.assert_allclose(got, want[-1], atol=1e-4, rtol=0)
        pos += 1


def test_greedy_tokens_equal_transformers(family):
    d, hf = family
    gen = TextGenerator(load(d), load_tokenizer(d), temperature=0, repeat_penalty=1.0, eos_token_ids=[])
    res = gen.generate(PROMPT, max_tokens=STEPS)
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=STEPS, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    assert res.token_ids == want


def test_family_flags_are_read_from_the_config(family):
    d, hf = family
    cfg = decoder_config(d)
    mtype = hf.config.model_type
    assert cfg.qkv_bias == (mtype == "qwen2")
    assert cfg.qk_norm == (mtype in ("qwen3", "gemma3_text"))
    windows = [cfg.window(i) for i in range(cfg.num_hidden_layers)]
    if mtype == "gemma3_text":
        assert windows == [10, 10, 10, None] and cfg.sandwich_norms and cfg.qk_norm
        assert cfg.rope_scaling["factor"] == 8.0 and cfg.rope_local_theta == 1e4
        assert cfg.final_logit_softcapping == 30.0 and cfg.query_pre_attn_scalar == 24
    elif mtype == "mistral":
        assert windows == [12, 12, 12]
    elif mtype == "phi3":
        assert windows == [None] * 3
        assert cfg.rope_scaling["original_max_position_embeddings"] == 32
        assert cfg.rope_scaling["attention_factor"] == pytest.approx(
            np.sqrt(1 + np.log(128 / 32) / np.log(32)))
    elif hf.config.use_sliding_window:
        assert windows == [None, 10, 10]
    else:
        assert windows == [None] * 3



def test_an_unsupported_architecture_names_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "vocab_size": 10}')
    with pytest.raises(ModelFormatError, match="supported model_type: llama.*qwen3.*gemma3_text"):
        decoder_config(tmp_path)


def test_cli_generate_picks_the_family_from_config_json(family, capsys):
    from tallow.cli import main

    d, _ = family
    assert main(["generate", "--model", str(d), "--prompt", "the quick", "--max-tokens", "8",
                 "--temperature", "0", "--repeat-penalty", "1.0"]) == 0
    tok = load_tokenizer(d)
    ids = tok.encode("the quick").ids
    gen = TextGenerator(load(d), tok, temperature=0, repeat_penalty=1.0)
    want = "the quick" + gen.generate(ids, max_tokens=8).text
    assert capsys.readouterr().out == want + "\n"
