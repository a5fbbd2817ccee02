"""A model file's context length costs memory only as far as it is used, and a
generation is bounded by ``max_context`` / ``--max-context``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tallow as tl
from tallow.models.generate import TextGenerator
from tallow.models.llama import ContextLengthError
from tallow.models.quantized_llama import ModelWeights
from tallow.models.rope_table import RopeTable

from support.models import LLAMA_CFG, make_bpe_tokenizer, save_llama_gguf

HUGE_CONTEXT = 2**31  # llama.context_length is a u32: 2^31 rows of rotary tables are 8 GiB+


@pytest.fixture(scope="module")
def gguf_pair(tmp_path_factory):
    """The same small Llama as GGUF twice: its true context (96) and a claimed 2^31."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("ctx")
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**LLAMA_CFG)).eval()
    small = save_llama_gguf(hf, d / "small.gguf", "F32", eos_token_id=0)
    hf.config.max_position_embeddings = HUGE_CONTEXT
    huge = save_llama_gguf(hf, d / "huge.gguf", "F32", eos_token_id=0)
    make_bpe_tokenizer(d / "tokenizer.json")
    return d, str(small), str(huge)


def test_rope_table_grows_to_the_values_of_a_full_one():
    inv = (1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16.0)).astype(np.float32)
    grown = RopeTable(inv, 3000)
    for n in (1, 300, 257, 1000, 5000):
        grown.reserve(n)
    full = np.outer(np.arange(3000, dtype=np.float32), inv).astype(np.float32)
    assert grown.rows == 3000
    np.testing.assert_array_equal(grown.cos, np.cos(full))
    np.testing.assert_array_equal(grown.sin, np.sin(full))


def test_huge_claimed_context_allocates_only_what_is_used(gguf_pair):
    """Under a 3 GiB address-space limit (the old up-front tables needed 8 GiB+), the
    model with a claimed 2^31 context loads and generates exactly what the one with
    its true context does."""
    d, small, huge = gguf_pair
    script = textwrap.dedent(f"""
        import resource, numpy as np
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        import tallow as tl
        from tallow.models.quantized_llama import ModelWeights
        from tallow.models.generate import TextGenerator
        from tallow.models.sentence import load_tokenizer
        tok = load_tokenizer({str(d / "tokenizer.json")!r})
        out = []
        for path in ({small!r}, {huge!r}):
            m = ModelWeights.from_gguf(path)
            assert m.config.max_position_embeddings == (96 if path == {small!r} else {HUGE_CONTEXT})
            g = TextGenerator(m, tok, temperature=0, eos_token_ids=[])
            out.append(g.generate([5, 17, 99, 3], 12).token_ids)
            logits = m.forward(tl.Tensor([[5, 17, 99]], dtype="u32"), 0).numpy()
            out.append(logits.tolist())
        assert out[0] == out[2], out
        assert out[1] == out[3]
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", TALLOW_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr[-3000:]


def test_max_context_bounds_a_generation(gguf_pair):
    from tallow.models.sentence import load_tokenizer

    d, _, huge = gguf_pair
    model = ModelWeights.from_gguf(huge)
    tok = load_tokenizer(str(d / "tokenizer.json"))
    gen = TextGenerator(model, tok, temperature=0, eos_token_ids=[], max_context=10)
    r = gen.generate([5, 17, 99, 3], 50)
    assert r.finish_reason == "context" and 4 + len(r.token_ids) == 11
    with pytest.raises(ContextLengthError, match="the prompt has 12 tokens, the context is 10"):
        gen.generate(list(range(1, 13)), 5)
    cache = model.new_cache(max_context=10)
    assert cache.max_positions == 10
    with pytest.raises(ContextLengthError):
        model.forward(tl.Tensor([list(range(1, 12))], dtype="u32"), 0, cache)
    with pytest.raises(ValueError, match="max_context must be at least 1"):
        TextGenerator(model, tok, max_context=0)


def test_cli_max_context(gguf_pair, capsys):
    from tallow.cli import main

    d, _, huge = gguf_pair
    assert main(["generate", "--model", huge, "--tokenizer", str(d / "tokenizer.json"),
                 "--prompt", "ab", "--temperature", "0", "--max-tokens", "40",
                 "--max-context", "8"]) == 0
    assert "(context)" in capsys.readouterr().err
