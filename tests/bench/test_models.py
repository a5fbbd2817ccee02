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
