"""``tallow embed`` and ``tallow generate``."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tallow.cli import main
from tallow.models.generate import TextGenerator
from tallow.models.sentence import SentenceEmbedder, load_tokenizer

TEXTS = ["tallow is a small tensor library", "candle is a minimalist ML framework", "hello"]


@pytest.fixture(scope="module")
def st_tiny(tiny_bert_dir, tmp_path_factory):
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(tiny_bert_dir))
    dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") \
        else word.get_word_embedding_dimension()
    out = tmp_path_factory.mktemp("st_tiny")
    SentenceTransformer(modules=[word, models.Pooling(dim), models.Normalize()],
                        device="cpu").save(str(out))
    return out


def test_embed_prints_vectors_and_similarities(st_tiny, capsys):
    assert main(["embed", "--model", str(st_tiny)] + TEXTS) == 0
    out = capsys.readouterr().out
    assert "dimension 32" in out and "cosine similarity" in out
    assert all(repr(t)[:20] in out for t in TEXTS)


def test_embed_input_output_files(st_tiny, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("\n".join(TEXTS) + "\n\n")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": t}) if i % 2 else json.dumps(t)
                               for i, t in enumerate(TEXTS)) + "\n")
    want = SentenceEmbedder.from_pretrained(st_tiny).encode(TEXTS)
    npy = tmp_path / "out.npy"
    assert main(["embed", "--model", str(st_tiny), "--input", str(lines), "--output", str(npy),
                 "--batch-size", "2", "--no-progress"]) == 0
    np.testing.assert_allclose(np.load(npy), want, atol=1e-6)
    out = tmp_path / "out.jsonl"
    assert main(["embed", "--model", str(st_tiny), "--input", str(jsonl), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), want, atol=1e-6)


def test_embed_errors(st_tiny, tmp_path, capsys, tiny_llama):
    assert main(["embed", "--model", str(tmp_path / "none"), "x"]) == 1
    assert "no such model directory" in capsys.readouterr().err
    assert main(["embed", "--model", str(tiny_llama[0]), "x"]) == 1
    err = capsys.readouterr().err
    assert "'llama' is not a sentence-embedding architecture" in err and "supported: bert" in err
    assert main(["embed", "--model", str(st_tiny), "--input", str(tmp_path / "none.txt")]) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nottext": 1}\n')
    assert main(["embed", "--model", str(st_tiny), "--input", str(bad)]) == 1
    assert "text" in capsys.readouterr().err
    # An unknown output format is a usage error, before the model loads.
    assert main(["embed", "--model", str(st_tiny), "x", "--output", str(tmp_path / "o.csv")]) == 2


def test_embed_uses_minilm_by_default(minilm_dir, capsys):
    assert main(["embed", "one sentence"]) == 0
    assert "dimension 384" in capsys.readouterr().out


def test_generate_greedy_matches_text_generator(tiny_llama, capsys):
    from tallow.models.llama import Llama, LlamaConfig

    import tallow as tl

    d, _ = tiny_llama
    assert main(["generate", "--model", str(d), "--prompt", "the quick", "--max-tokens", "12",
                 "--temperature", "0", "--repeat-penalty", "1.0"]) == 0
    captured = capsys.readouterr()
    cfg = LlamaConfig.from_json(d)
    model = Llama.load(tl.nn.VarBuilder.from_safetensors(d / "model.safetensors"), cfg)
    res = TextGenerator(model, load_tokenizer(d), temperature=0, repeat_penalty=1.0).generate(
        "the quick", 12)
    assert captured.out == "the quick" + res.text + "\n"
    assert "tokens/s" in captured.err


def test_generate_errors(tiny_llama, minilm_dir, tmp_path, capsys):
    d, _ = tiny_llama
    long_prompt = "the quick brown fox " * 40
    assert main(["generate", "--model", str(d), "--prompt", long_prompt]) == 1
    err = capsys.readouterr()
    assert "context" in err.err and err.out == ""
    assert main(["generate", "--model", str(d), "--tokenizer",
                 os.path.join(minilm_dir, "tokenizer.json"), "--prompt", "x"]) == 1
    assert "tokenizer" in capsys.readouterr().err
    assert main(["generate", "--model", minilm_dir, "--prompt", "x"]) == 1
    assert "not a Llama model" in capsys.readouterr().err
    assert main(["generate", "--model", str(tmp_path / "none"), "--prompt", "x"]) == 1


def test_import_tallow_stays_light():
    code = ("import sys, tallow as tl; tl.nn.Linear(2, 2); tl.models.SentenceEmbedder; "
            "tl.models.llama.Llama; tl.models.generate.TextGenerator; "
            "bad = [m for m in ('torch', 'transformers', 'tokenizers', 'sentence_transformers') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_embed_reads_stdin(st_tiny, tmp_path, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(TEXTS) + "\n"))
    out = tmp_path / "o.npy"
    assert main(["embed", "--model", str(st_tiny), "--input", "-", "--output", str(out)]) == 0
    want = SentenceEmbedder.from_pretrained(st_tiny).encode(TEXTS)
    np.testing.assert_allclose(np.load(out), want, atol=1e-6)


def test_embed_follows_the_directory_on_normalising(tiny_bert_dir, tmp_path):
    """`tallow embed` gives sentence-transformers' numbers: a directory without a
    Normalize module gets raw pooled vectors (the Python API's default normalises)."""
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(tiny_bert_dir))
    dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") \
        else word.get_word_embedding_dimension()
    st = SentenceTransformer(modules=[word, models.Pooling(dim)], device="cpu")
    d = tmp_path / "st_raw"
    st.save(str(d))
    want = st.encode(TEXTS)
    assert not np.allclose(np.linalg.norm(want, axis=1), 1.0)
    out = tmp_path / "raw.npy"
    assert main(["embed", "--model", str(d), "--output", str(out)] + TEXTS) == 0
    np.testing.assert_allclose(np.load(out), want, atol=3e-5, rtol=1e-4)


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_embed_input_with_a_byte_order_mark(st_tiny, tmp_path, suffix):
    """Files saved by Windows editors start with a UTF-8 BOM: it is not part of the text."""
    from sentence_transformers import SentenceTransformer

    src = tmp_path / f"bom{suffix}"
    lines = TEXTS if suffix == ".txt" else [json.dumps(t) for t in TEXTS]
    src.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8-sig")
    out = tmp_path / "bom.jsonl"
    assert main(["embed", "--model", str(st_tiny), "--input", str(src), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    want = SentenceTransformer(str(st_tiny), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), want, atol=3e-5,
                               rtol=1e-4)
