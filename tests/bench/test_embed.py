"""``tallow bench embed`` runs end to end on a tiny BERT, the three candidates agree, and
ONNX Runtime is reported as skipped (not an error) when it is not installed."""

import pytest

from tallow.bench import embed as bench


def test_embed_rows_without_onnxruntime(tiny_bert_dir, monkeypatch, capsys):
    monkeypatch.setattr(bench, "have_onnxruntime", lambda: None)
    res = bench.bench_embed(n=12, batch_size=4, repeats=1, threads=(1, 2),
                            model_dir=str(tiny_bert_dir))
    rows = res["rows"]
    assert [r["threads"] for r in rows] == [1, 2]
    for r in rows:
        assert r["tallow"] > 0 and r["torch"] > 0 and r["onnxruntime"] is None
        assert r["vs_torch"] == pytest.approx(r["tallow"] / r["torch"])
        assert r["min_cosine"]["torch"] >= bench.AGREE
    out = capsys.readouterr().out
    assert "onnxruntime: skipped (not installed" in out and "WARNING" not in out


@pytest.mark.slow
def test_embed_rows_with_onnxruntime(tiny_bert_dir, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    res = bench.bench_embed(n=12, batch_size=4, repeats=1, threads=(1,),
                            model_dir=str(tiny_bert_dir))
    (row,) = res["rows"]
    assert row["onnxruntime"] > 0
    assert row["vs_onnxruntime"] == pytest.approx(row["tallow"] / row["onnxruntime"])
    # tallow, PyTorch and the exported graph give the same embeddings
    assert set(row["min_cosine"]) == {"torch", "onnxruntime", "torch~onnxruntime"}
    assert min(row["min_cosine"].values()) >= bench.AGREE
    assert "graph exported" in capsys.readouterr().out
