"""Qwen2, Qwen3, Gemma 3 and Phi-3 GGUF files (llama.cpp's names and metadata keys, f32)
against transformers: the GGUF path must give the same logits as the model it was
written from. The files are written as llama.cpp's convert_hf_to_gguf.py does for
these families (q/k rows not permuted; Gemma's norms stored with the one added)."""

import math
import os
import subprocess

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models.gguf_decoder import gguf_name
from tallow.models.gguf_models import load_gguf_model

from support.models import add_decoder_shape

PROMPT = [(5 * i + 2) % 300 + 4 for i in range(32)]
SMALL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
             bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return Qwen2ForCausalLM(Qwen2Config(**SMALL, num_hidden_layers=2))


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(**{**SMALL, "tie_word_embeddings": True},
                                        num_hidden_layers=2, head_dim=32))


def _gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    # llama.cpp's fixed Gemma 3 choices: every sixth layer global, local base 10000,
    # scores by head_dim ** -0.5
    return Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "tie_word_embeddings": True, "num_hidden_layers": 6, "head_dim": 16,
        "query_pre_attn_scalar": 16, "sliding_window": 10,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}))


def _phi3():
    from transformers import Phi3Config, Phi3ForCausalLM
    # LongRoPE with an original context of 256: llama.cpp picks the factors by its
    # context size (rounded up to 256, so the short ones here), tallow by position
    # (the short ones below 256)
    half = SMALL["hidden_size"] // SMALL["num_attention_heads"] // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 2.0,
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 0.7 * i for i in range(half)],
            "original_max_position_embeddings": 256}
    return Phi3ForCausalLM(Phi3Config(**{**SMALL, "max_position_embeddings": 512},
                                      num_hidden_layers=2, rope_parameters=rope,
                                      original_max_position_embeddings=256, pad_token_id=0))


FAMILIES = {"qwen2": _qwen2, "qwen3": _qwen3, "gemma3": _gemma3, "phi3": _phi3}


def write_gguf(hf, arch, path):
    import gguf

    c = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    # a placeholder SentencePiece vocabulary: llama.cpp takes its vocabulary size from it
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, c.vocab_size)])
    w.add_token_scores([0.0] * c.vocab_size)
    w.add_token_types([2, 3, 3] + [1] * (c.vocab_size - 3))
    head_dim = add_decoder_shape(w, c)
    theta = c.rope_parameters["full_attention"]["rope_theta"] if arch == "gemma3" else \
        c.rope_parameters["rope_theta"]
    w.add_rope_freq_base(theta)
    if arch == "gemma3":
        w.add_sliding_window(c.sliding_window)
    if arch == "phi3":
        # as convert_hf_to_gguf.py's Phi3MiniModel: fused projections kept, the
        # LongRoPE factors as tensors, the attention factor as a key
        rope = c.rope_parameters
        original = rope["original_max_position_embeddings"]
        scale = c.max_position_embeddings / original
        w.add_rope_scaling_orig_ctx_len(original)
        w.add_rope_dimension_count(head_dim)
        w.add_sliding_window(0)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)))
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], np.float32))
    sandwich = arch == "gemma3"
    for name, t in hf.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.detach().numpy().astype(np.float32)
        if arch == "gemma3" and name.endswith("norm.weight"):
            a = a + 1  # convert_hf_to_gguf.py's Gemma 3: norms scale by the stored weight
        w.add_tensor(gguf_name(name, sandwich, arch == "phi3"), np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    torch.manual_seed(2)
    hf = FAMILIES[request.param]()
    hf.config._attn_implementation = "eager"
    hf.eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp(request.param) / "model.gguf"
    write_gguf(hf, request.param, path)
    return path, hf


def test_gguf_logits_match_transformers(family, device):
    path, hf = family
    model = load_gguf_model(str(path), device)
    cache = model.new_cache()
    got = model.logits(tl.Tensor([PROMPT], dtype="u32", device=device), 0, cache).numpy()[0]
    with torch.no_grad():
        out = hf(torch.tensor([PROMPT]), use_cache=True)
    np.testing.assert_allclose(got, out.logits[0].numpy(), atol=1e-4, rtol=0)
    past, pos = out.past_key_values, len(PROMPT)
    nxt = int(out.logits[0, -1].argmax())
    for _ in range(16):
        got = model.forward(tl.Tensor([[nxt]], dtype="u32", device=device), pos, cache).numpy()[0]
        with torch.no_grad():
            out = hf(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        np.testing.assert_allclose(got, out.logits[0, -1].numpy(), atol=1e-4, rtol=0)
        past, pos, nxt = out.past_key_values, pos + 1, int(out.logits[0, -1].argmax())


def test_an_unsupported_gguf_architecture_lists_the_supported(tmp_path):
    import gguf

    from tallow.models.config import ModelFormatError

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "phi2")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFormatError, match="'phi2'; supported: llama, qwen2, qwen3, gemma3, phi3"):
        load_gguf_model(str(tmp_path / "m.gguf"))


LLAMA_PYTHON = os.environ.get("TALLOW_LLAMA_CPP_PYTHON", "/tmp/llamavenv/bin/python")
_REFERENCE = r"""
import json, sys
import numpy as np
import llama_cpp
path, ids, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
res = {}
for kv, t in (("f32", llama_cpp.GGML_TYPE_F32), ("f16", llama_cpp.GGML_TYPE_F16)):
    m = llama_cpp.Llama(model_path=path, n_ctx=128, logits_all=True, verbose=False,
                        type_k=t, type_v=t)
    m.eval(ids)
    res[kv] = np.array(m.scores[:len(ids)], dtype=np.float32)
np.savez(out, **res)
"""


@pytest.mark.slow
def test_llama_cpp_reads_the_files_as_tallow_does(family, tmp_path):
    """llama.cpp (the llama-cpp-python wheel, in its own environment) on the same
    files: tallow's logits within llama.cpp's own f16-vs-f32 cache difference."""
    import json

    if not os.path.exists(LLAMA_PYTHON):
        pytest.skip(f"no llama-cpp-python environment at {LLAMA_PYTHON}")
    path, _ = family
    out = tmp_path / "ref.npz"
    subprocess.run([LLAMA_PYTHON, "-c", _REFERENCE, str(path), json.dumps(PROMPT), str(out)],
                   check=True, capture_output=True, timeout=300)
    ref = np.load(out)
    model = load_gguf_model(str(path))
    ours = model.logits(tl.Tensor([PROMPT], dtype="u32"), 0, model.new_cache()).numpy()[0]

    def rel(x, y):
        return float(np.linalg.norm(x - y) / np.linalg.norm(y))

    assert rel(ours, ref["f32"]) <= rel(ref["f16"], ref["f32"])
    assert np.mean(ours.argmax(-1) == ref["f32"].argmax(-1)) >= 0.9


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_llama_like_files_decode_on_the_fast_path(arch, tmp_path):
    """Qwen2 (biases) and Qwen3 (q/k norms) run on the Llama array path on the CPU,
    their q/k rows reordered for its interleaved rotation: the logits of a prompt,
    of cached steps and of two sequences stepped together are still transformers'."""
    from tallow.models import llama_decode
    from tallow.models.quantized_llama import ModelWeights

    if not llama_decode.available():
        pytest.skip("the compiled decode kernels are not built")
    torch.manual_seed(4)
    hf = FAMILIES[arch]()
    hf.config._attn_implementation = "eager"
    hf.eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    write_gguf(hf, arch, tmp_path / "m.gguf")
    model = load_gguf_model(str(tmp_path / "m.gguf"))
    assert isinstance(model, ModelWeights) and model._decoder is not None
    ids = PROMPT + [7, 19, 44, 3]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].numpy()
    cache = model.new_cache()
    got = [model.logits(tl.Tensor([PROMPT], dtype="u32"), 0, cache).numpy()[0]]
    for pos in range(len(PROMPT), len(ids)):
        got.append(model.forward(tl.Tensor([[ids[pos]]], dtype="u32"), pos, cache).numpy())
    np.testing.assert_allclose(np.concatenate(got), want, atol=1e-4, rtol=0)
    # two sequences, the second shorter, stepped together
    a, b = model.new_sequence(), model.new_sequence()
    model.prefill(a, PROMPT)
    model.prefill(b, PROMPT[:10])
    rows = model.step_batch([a, b], [7, PROMPT[10]])
    np.testing.assert_allclose(rows[0], want[len(PROMPT)], atol=1e-4, rtol=0)
    np.testing.assert_allclose(rows[1], want[10], atol=1e-4, rtol=0)


def test_quantized_fused_phi3_projections_split_by_rows(tmp_path, device):
    """A Q8_0 Phi-3 file: its fused attn_qkv / ffn_up are split into row ranges that
    stay quantized, on either device; the logits are those of the same file with
    every weight dequantized to f32 first (tallow's products on f32 weights)."""
    from tallow.bench.llm import quantize_file
    from tallow.ggml.gguf_io import read_gguf
    from tallow.ggml.gguf_io import write_gguf as write_tensors
    from tallow.quantized.qtensor import QTensor

    torch.manual_seed(5)
    hf = _phi3().eval()
    write_gguf(hf, "phi3", tmp_path / "f32.gguf")
    quantize_file(str(tmp_path / "f32.gguf"), str(tmp_path / "q8.gguf"), "Q8_0")
    f = read_gguf(str(tmp_path / "q8.gguf"))
    write_tensors(str(tmp_path / "deq.gguf"),
               {n: t.dequantize().astype(np.float32) for n, t in f.tensors.items()}, f.metadata)
    model = load_gguf_model(str(tmp_path / "q8.gguf"), device)
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_proj.weight, QTensor) and attn.q_proj.weight.shape == (64, 64)
    ids = tl.Tensor([PROMPT], dtype="u32", device=device)
    got = model.logits(ids, 0, model.new_cache()).numpy()[0]
    ref = load_gguf_model(str(tmp_path / "deq.gguf"))
    want = ref.logits(tl.Tensor([PROMPT], dtype="u32"), 0, ref.new_cache()).numpy()[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2
    assert np.mean(got.argmax(-1) == want.argmax(-1)) >= 0.9
