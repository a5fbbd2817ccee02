"""Exact top-k cosine search over an embedding index (``tallow embed --ray`` output).

The index is a directory of Parquet files with ``id``, optionally ``text``, and an
``embedding`` column of fixed-size float32 lists. ``Index`` never holds it whole:
the files are memory-mapped and read ``block_rows`` rows at a time; each block is
scored against all queries with one matrix product (tallow's matmul, on the CPU
or a GPU) and only the best ``k`` rows per query survive to the next block. So
the memory needed is one block plus ``k`` rows per query, whatever the index size.

The search is exact (every row is scored) and matches NumPy's brute force: ties
in the score go to the row that comes first in the index.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

import tallow as tl

from .distributed.index_store import MANIFEST, read_manifest, verify_files
from .errors import EmbeddingIndexError
from .models.identity import content_hash, model_name
from .models.packaged import default_embed_model
from .models.sentence import SentenceEmbedder

DEFAULT_BLOCK_ROWS = 65536


@dataclass(frozen=True)
class Hit:
    """One search result: the row's ``id``, its cosine ``score``, its ``row`` number
    in the index, and its ``text`` when the index kept the texts."""

    id: str
    score: float
    row: int
    text: str | None = None


class Index:
    """An embedding index directory, searched exactly by cosine similarity.

    ``device``: where the scores are computed ("cpu", "gpu" or a ``tl.Device``).
    ``model``: the sentence-transformers directory that embeds text queries
    (default: the model the index records, found by name where tallow knows it; a
    directory given or found must have the recorded content hash).
    ``block_rows``: rows scored at once. ``verify``: check every file's SHA-256
    against the manifest on opening (sizes and row counts are always checked).
    """

    def __init__(self, path, *, device="cpu", model=None, block_rows: int = DEFAULT_BLOCK_ROWS,
                 verify: bool = True):
        if int(block_rows) < 1:
            raise ValueError(f"Index: block_rows must be at least 1, got {block_rows}")
        self.path = os.fspath(path)
        self.manifest = read_manifest(self.path)
        if verify:
            verify_files(self.path, self.manifest)
        self.files = [os.path.join(self.path, f) for f in self.manifest["files"]]
        self.dim = int(self.manifest["dim"])
        self.device = tl.Device.parse(device) if isinstance(device, str) else device
        self.block_rows = int(block_rows)
        self.model_dir = os.fspath(model) if model is not None else None
        self._embedder = None

    def __len__(self) -> int:
        return int(self.manifest["rows"])

    def __repr__(self) -> str:
        return f"Index({self.path!r}, rows={len(self)}, dim={self.dim}, device={self.device})"

    # -- reading --------------------------------------------------------------

    def _parquet(self, path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not os.path.exists(path):
            raise EmbeddingIndexError(self._gone(path))
        try:
            return pq.ParquetFile(path, memory_map=True, page_checksum_verification=True)
        except (OSError, pa.ArrowException) as e:
            raise EmbeddingIndexError(f"{path}: not a readable Parquet file ({e}); rebuild the "
                                      "index") from None

    def _gone(self, path) -> str:
        """Why a file this Index listed is missing: the index was replaced, or damaged."""
        try:
            with open(os.path.join(self.path, MANIFEST), encoding="utf-8") as f:
                replaced = json.load(f).get("files") != self.manifest["files"]
        except (OSError, ValueError, AttributeError):
            replaced = False
        if replaced:
            return (f"{self.path}: the index was replaced since this Index opened it (a new "
                    f"run wrote it); open it again: Index({self.path!r})")
        return f"{path}: the index file is missing; rebuild the index"

    def _batches(self, pf, path, **kwargs):
        """``pf.iter_batches``, a damaged file's error an ``EmbeddingIndexError`` naming it."""
        import pyarrow as pa

        try:
            yield from pf.iter_batches(**kwargs)
        except (OSError, pa.ArrowException) as e:
            raise EmbeddingIndexError(f"{path}: damaged index file ({e}); rebuild the "
                                      "index") from None

    def blocks(self):
        """(first row number, (n, dim) float32 array) for each block of the index."""
        start = 0
        for path in self.files:
            pf = self._parquet(path)
            for batch in self._batches(pf, path, batch_size=self.block_rows,
                                       columns=["embedding"]):
                if batch.schema.names != ["embedding"] or \
                        not hasattr(batch.schema.field(0).type, "list_size"):
                    raise EmbeddingIndexError(f"{path}: damaged index file (no embedding "
                                              "column of fixed-size lists); rebuild the index")
                column = batch.column(0)
                if column.null_count:
                    raise EmbeddingIndexError(f"{path}: {column.null_count} rows have no embedding")
                if column.type.list_size != self.dim:
                    raise EmbeddingIndexError(f"{path}: embeddings of size {column.type.list_size}, "
                                              f"the index says {self.dim}")
                flat = column.values.to_numpy(zero_copy_only=False)
                # A sliced batch starts part-way into its values buffer.
                flat = flat[column.offset * self.dim:(column.offset + len(column)) * self.dim]
                yield start, flat.reshape(len(column), self.dim).astype(np.float32, copy=False)
                start += len(column)

    def embeddings(self) -> np.ndarray:
        """The whole (rows, dim) matrix in memory (for small indexes and checks)."""
        parts = [b for _, b in self.blocks()]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    def _rows(self, rows, columns):
        """{column: values} for the given global row numbers (any order)."""
        wanted = sorted(set(int(r) for r in rows))
        out = {c: {} for c in columns}
        start = 0
        for path in self.files:
            pf = self._parquet(path)
            meta = pf.metadata
            for g in range(meta.num_row_groups):
                n = meta.row_group(g).num_rows
                inside = [r for r in wanted if start <= r < start + n]
                if inside:
                    try:
                        table = pf.read_row_group(g, columns=columns)
                    except (OSError, ValueError) as e:  # pyarrow's errors are both
                        raise EmbeddingIndexError(f"{path}: damaged index file ({e}); rebuild "
                                                  "the index") from None
                    for c in columns:
                        col = table.column(c)
                        for r in inside:
                            out[c][r] = col[r - start].as_py()
                start += n
        return out

    # -- searching ------------------------------------------------------------

    def _query_model(self) -> str:
        """The model directory that embeds queries: the one given, or the one the index
        records, checked against its content hash."""
        recorded = self.manifest.get("model")
        if isinstance(recorded, str):  # a version-1 index records a path
            return self.model_dir or recorded
        if not isinstance(recorded, dict):
            if self.model_dir:
                return self.model_dir
            raise EmbeddingIndexError(f"{self.path}: the index names no model; pass model=DIR "
                                      "(--model DIR)")
        name, want = recorded.get("name"), recorded.get("sha256")
        where = self.model_dir or _known_model(name)
        if where is None:
            raise EmbeddingIndexError(
                f"{self.path}: the index was built with the model {name!r} (sha256 "
                f"{str(want)[:12]}...); pass its directory as model=DIR (--model DIR)")
        if want and content_hash(where) != want:
            raise EmbeddingIndexError(
                f"{where}: not the model that built the index {self.path} ({name!r}, sha256 "
                f"{str(want)[:12]}...): its content differs; pass that model's directory")
        return where

    def embed(self, texts) -> np.ndarray:
        """Query vectors for ``texts`` with the index's model (loaded on first use)."""
        if self._embedder is None:
            self.model_dir = self._query_model()
            self._embedder = SentenceEmbedder.from_pretrained(self.model_dir, device=self.device)
        vecs = self._embedder.encode(list(texts), normalize=True, show_progress_bar=False)
        if vecs.shape[1] != self.dim:
            raise EmbeddingIndexError(f"the model gives {vecs.shape[1]}-dimensional vectors, the "
                                      f"index holds {self.dim}-dimensional ones")
        return vecs

    def search(self, queries, k: int = 10):
        """The ``k`` rows most similar to each query, best first, as ``Hit`` lists.

        ``queries``: a string, a list of strings (embedded with the index's model),
        a (dim,) vector or a (m, dim) array. One query (a string or a vector) gives
        one list of hits; several give a list of lists."""
        single = isinstance(queries, str) or (isinstance(queries, np.ndarray) and queries.ndim == 1)
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, np.ndarray):
            queries = list(queries)
            if not queries or any(isinstance(t, str) and not t.strip() for t in queries):
                raise ValueError("Index.search: an empty query (give the text to search for)")
        if isinstance(queries, np.ndarray):
            q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        else:
            queries = list(queries)
            if not all(isinstance(t, str) for t in queries):
                raise TypeError("Index.search: queries must be strings or an array of vectors")
            q = self.embed(queries)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(f"Index.search: query vectors of shape {q.shape}, the index holds "
                             f"{self.dim}-dimensional ones")
        if int(k) < 1:
            raise ValueError(f"Index.search: k must be at least 1, got {k}")
        scores, rows = self.top_k(q, int(k))
        hits = self._hits(scores, rows)
        return hits[0] if single else hits

    def top_k(self, q: np.ndarray, k: int):
        """(scores, rows): (m, k') float32 and int64 arrays, k' = min(k, rows), best first."""
        q = np.asarray(q, dtype=np.float32)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        m = q.shape[0]
        qt = tl.Tensor.from_vec(np.ascontiguousarray(q.T), None, device=self.device)
        best_s = [np.zeros(0, np.float32) for _ in range(m)]
        best_r = [np.zeros(0, np.int64) for _ in range(m)]
        for start, block in self.blocks():
            e = tl.Tensor.from_vec(np.ascontiguousarray(block), None, device=self.device)
            norms = e.sqr().sum_keepdim(1).sqrt().clamp(1e-12, None)
            s = e.matmul(qt).broadcast_div(norms).numpy().T  # (m, n)
            for i in range(m):
                cand_s, cand_r = _block_candidates(s[i], start, k)
                merged_s = np.concatenate([best_s[i], cand_s])
                merged_r = np.concatenate([best_r[i], cand_r])
                # Best score first; equal scores in row order (NumPy's stable argsort).
                order = np.lexsort((merged_r, -merged_s))[:k]
                best_s[i], best_r[i] = merged_s[order], merged_r[order]
        return np.stack(best_s), np.stack(best_r)

    def _hits(self, scores, rows):
        if rows.size == 0:
            return [[] for _ in range(rows.shape[0])]
        columns = ["id"] + (["text"] if self.manifest.get("has_text") else [])
        values = self._rows(rows.reshape(-1), columns)
        text = values.get("text", {})
        return [[Hit(values["id"][int(r)], float(s), int(r), text.get(int(r)))
                 for s, r in zip(srow, rrow)] for srow, rrow in zip(scores, rows)]


def _known_model(name):
    """The directory of a model tallow can find by name (the default embedding model's
    package), or None."""
    found = default_embed_model()
    return found if found is not None and model_name(found) == name else None


def _block_candidates(scores, start, k):
    """The rows of one block that can still be among the best ``k``: every row scoring
    at least the block's k-th best (ties at that score all kept, so that the earliest
    row wins as in a full sort)."""
    n = scores.shape[0]
    if n > k:
        kth = np.partition(scores, n - k)[n - k]
        keep = np.flatnonzero(scores >= kth)
    else:
        keep = np.arange(n)
    return scores[keep], keep.astype(np.int64) + start
