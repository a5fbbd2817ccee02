"""``tallow bench models`` runs end to end (tiny sizes: the figures themselves are the
README's, from a full run)."""

from tallow.bench import models as bench


def test_sentences_are_reproducible_and_mixed():
    a, b = bench.sentences(50), bench.sentences(50)
    assert a == b
    lengths = {len(s.split()) for s in a}
    assert min(lengths) <= 5 and max(lengths) >= 64


def test_bench_embed_and_llama_small(tiny_bert_dir, capsys):
    res = bench.bench_embed(n=12, batch_size=4, rounds=1, model_dir=str(tiny_bert_dir))
    assert res["tallow"] > 0 and res["sentence_transformers"] > 0
    assert res["min_cosine"] > 0.9999
    size = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                tie_word_embeddings=True)
    res = bench.bench_llama(prompt_len=4, new_tokens=4, rounds=1, size=size)
    assert res["same_tokens"] and res["tallow"] > 0 and res["transformers_forward_loop"] > 0
    out = capsys.readouterr().out
    assert "sent/s" in out and "tok/s" in out


def test_family_rows_decode_each_gguf_family(tmp_path, capsys):
    """Every family's random GGUF decodes under the benchmark's worker; with
    llama-cpp-python present, llama.cpp reads the same files to the same greedy tokens."""
    import os

    from tallow.bench import families

    python = os.environ.get("TALLOW_LLAMA_CPP_PYTHON", "/tmp/llamavenv/bin/python")
    python = python if os.path.exists(python) else None
    # a context of 1024: llama.cpp's worker opens 1024 positions, Phi-3's short factors
    tiny = dict(families.SHAPE, vocab=512, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128)
    res = families.bench_decoders(str(tmp_path), python, threads=(1,), repeats=1, decode=6,
                                  shape=tiny)
    assert {name.split()[0] for name in res["files"]} >= set(families.DECODER_FAMILIES)
    for name, by_t in res["files"].items():
        ours = by_t[1]["tallow"]
        assert ours["decode_tps"] > 0, (name, ours)
        if python:
            assert ours["first_tokens"] == by_t[1]["llama.cpp"]["first_tokens"], name
    assert "decoder families" in capsys.readouterr().out
