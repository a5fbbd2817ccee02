"""Helpers of the distributed tests: a small mixed corpus written as text, JSONL and
Parquet files; reading an index back; stand-in models (in support.ray_fakes)."""

from __future__ import annotations

import json
import os

import numpy as np

from support import ray_fakes

CORPUS = [
    "tallow is a small tensor library",
    "candle is a minimalist ML framework for Rust",
    "The quick brown fox jumps over the lazy dog.",
    "Ray Data streams blocks between actors.",
    "short",
    "a",
    "Embeddings map sentences to points; similar sentences land close together.",
    "Das ist ein deutscher Satz mit Umlauten: äöü ß.",
    "日本語の文も埋め込むことができます。",
    "emoji 🙂 and symbols ∑ ∫ ≤ ≥",
    " leading and trailing spaces ",
    "Parquet stores columns; Arrow keeps them in memory without copies.",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
    "the cat sat on the mat",
    "a dog barked at the mailman all afternoon long",
    ("a long paragraph " + "with many repeated words " * 90).strip(),
    "Exact search scores every row of the index against the query.",
    "numbers 3.14159 2.71828 1.41421 and dates 2024-01-31",
    "questions? answers! quotes \"like this\" and 'this'",
    "final line of the tiny corpus",
]


def write_corpus(folder):
    """The corpus split over a text file, a JSONL file (some ids given) and a Parquet
    file (ids given); returns (paths, {id: text}) with the ids tallow must produce."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    expected = {}
    txt = os.path.join(folder, "part.txt")
    lines = CORPUS[:7]
    with open(txt, "w", encoding="utf-8") as f:
        for i, t in enumerate(lines):
            f.write(t + "\n")
            if i == 2:
                f.write("\n")  # blank lines are skipped but still counted in the ids
    n = 1
    for i, t in enumerate(lines):
        expected[f"{txt}:{n}"] = t
        n += 2 if i == 2 else 1
    jsonl = os.path.join(folder, "part.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for i, t in enumerate(CORPUS[7:14]):
            item = {"text": t, "id": f"doc-{i}"} if i % 2 == 0 else {"text": t}
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
            expected[f"doc-{i}" if i % 2 == 0 else f"{jsonl}:{i + 1}"] = t
    pq_path = os.path.join(folder, "part.parquet")
    rest = CORPUS[14:]
    pq.write_table(pa.table({"id": list(range(100, 100 + len(rest))), "text": rest}), pq_path)
    for i, t in enumerate(rest):
        expected[str(100 + i)] = t
    return [txt, jsonl, pq_path], expected


def read_index(path):
    """{id: (text or None, vector)} of an index, failing on a duplicated id."""
    import pyarrow.parquet as pq

    from tallow.distributed import read_manifest

    manifest = read_manifest(path)
    out = {}
    for f in manifest["files"]:
        table = pq.read_table(os.path.join(path, f))
        emb = table.column("embedding").combine_chunks()
        vecs = emb.values.to_numpy().reshape(len(emb), emb.type.list_size)
        texts = table.column("text").to_pylist() if "text" in table.column_names else [None] * len(emb)
        for i, t, v in zip(table.column("id").to_pylist(), texts, vecs):
            assert i not in out, f"id {i} appears twice"
            out[i] = (t, v)
    return out


def by_value():
    """Let Ray's workers unpickle the stand-in models without importing the tests."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(ray_fakes)


def assert_hash_vectors(index, expected, dim):
    assert sorted(index) == sorted(expected)
    for i, (text, vec) in index.items():
        assert text == expected[i]
        np.testing.assert_array_equal(vec, ray_fakes.hash_vector(expected[i], dim))
