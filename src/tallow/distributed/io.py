"""Reading a corpus into a Ray Dataset, and writing an embedding index safely.

Inputs: text files (one text a line), JSONL (``.jsonl``/``.ndjson``: objects with
a ``text`` field and an optional ``id``, or plain strings) and Parquet (``.parquet``
files, or directories of them, with a text column and an optional id column).
Every row gets a string ``id``: its own when the input has one, else
``<path>:<n>`` (the n-th line of a text or JSONL file, the n-th row of a Parquet
file, counting from 1); lines end at ``\\n`` only (``tallow.text_lines``). Each
file is read whole by one Ray task.

The index is a directory of Parquet files (``id``, optionally ``text``, and
``embedding`` as a fixed-size list of float32) with ``_tallow_index.json``
describing it; ``write_index`` writes one, switched into place atomically
(``index_store`` has the layout and the rules).
"""

from __future__ import annotations

import os
import shutil

from ..errors import EmbeddingIndexError, FileFormatError
from ..text_lines import JSONL_SUFFIXES, file_items, read_utf8
from .index_store import (  # noqa: F401  (MANIFEST, read_manifest: re-exported)
    FORMAT_VERSION, LOCK, MANIFEST, PARQUET_SUFFIX, PARQUET_WRITE_ARGS, check_output_dir,
    new_partial_dir, read_manifest, remove_leftovers, switch_to, writer_lock,
)


def input_kind(path: str) -> str:
    if os.path.isdir(path) or path.endswith(PARQUET_SUFFIX):
        return "parquet"
    if path.endswith(JSONL_SUFFIXES):
        return "jsonl"
    return "text"


def expand_inputs(paths, text_column="text") -> list:
    """[(path, kind)] for the given files and directories, checked before any work:
    each exists, a directory holds Parquet files, a Parquet file has the text column."""
    if not paths:
        raise ValueError("no input files given")
    out = []
    for path in paths:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"--input: no such file or directory: {path}")
        kind = input_kind(path)
        if os.path.isdir(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(PARQUET_SUFFIX))
            if not files:
                raise FileNotFoundError(f"--input: {path} is a directory without .parquet files")
        else:
            files = [path]
        for f in files:
            if any(os.path.samefile(f, seen) for seen, _ in out):
                raise ValueError(f"--input: {f} is given twice (its rows would be embedded twice)")
            if kind == "parquet":
                _check_parquet(f, text_column)
            out.append((f, kind))
    return out


def _check_parquet(path, text_column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise FileFormatError(f"{path}: not a readable Parquet file ({e})") from None
    if text_column not in schema.names:
        raise FileFormatError(f"{path}: no column {text_column!r} (it has {', '.join(schema.names)})")
    if not pa.types.is_string(schema.field(text_column).type) and \
            not pa.types.is_large_string(schema.field(text_column).type):
        raise FileFormatError(f"{path}: column {text_column!r} is {schema.field(text_column).type}, "
                              "not text")


def _line_rows(path, name):
    """(ids, texts, line numbers) of a text or JSONL file (``tallow.text_lines`` splits
    its lines); an id given twice in the file is refused with both line numbers."""
    name = path if name is None else name
    ids, texts, lines, first_line = [], [], [], {}
    for n, given, text in file_items(path, read_utf8(path)):
        row_id = f"{name}:{n}" if given is None else given
        if row_id in first_line:
            raise FileFormatError(f"{path}:{n}: id {row_id!r} is used again (first on line "
                                  f"{first_line[row_id]}); every row needs its own id")
        first_line[row_id] = n
        ids.append(row_id)
        texts.append(text)
        lines.append(n)
    return ids, texts, lines


def read_text_file(path, name=None):
    """(ids, texts) of a text file: one text a line, blank lines skipped."""
    return _line_rows(path, name)[:2]


def read_jsonl_file(path, name=None):
    """(ids, texts) of a JSONL file: ``{"text": ..., "id": ...}`` objects or strings."""
    return _line_rows(path, name)[:2]


def read_parquet_file(path, text_column, id_column, name=None):
    """(ids, texts) of a Parquet file's text column and, when present, id column."""
    name = path if name is None else name
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    has_id = id_column in names
    table = pq.read_table(path, columns=[text_column] + ([id_column] if has_id else []))
    texts = table.column(text_column)
    if texts.null_count:
        raise FileFormatError(f"{path}: column {text_column!r} has {texts.null_count} missing texts")
    if has_id:
        ids = pc.cast(table.column(id_column), "string")
        if ids.null_count:
            raise FileFormatError(f"{path}: column {id_column!r} has {ids.null_count} missing ids")
        ids = ids.to_pylist()
        seen = {}
        for n, row_id in enumerate(ids, 1):
            if row_id in seen:
                raise FileFormatError(f"{path}: row {n}: id {row_id!r} is used again (first in "
                                      f"row {seen[row_id]}); every row needs its own id")
            seen[row_id] = n
    else:
        ids = [f"{name}:{n}" for n in range(1, table.num_rows + 1)]
    return ids, texts.to_pylist()


def read_files(batch, text_column="text", id_column="id"):
    """A Ray map step: a batch of files (path, name, kind) -> their rows (id, text)."""
    import pyarrow as pa

    ids, texts, sources = [], [], []
    for path, name, kind in zip(batch["path"].to_pylist(), batch["name"].to_pylist(),
                                batch["kind"].to_pylist()):
        if kind == "parquet":
            i, t = read_parquet_file(path, text_column, id_column, name)
            where = [f"{name} row {n}" for n in range(1, len(i) + 1)]
        else:
            i, t, lines = _line_rows(path, name)
            where = [f"{name}:{n}" for n in lines]
        ids += i
        texts += t
        sources += where
    # _source names each row's file and line for reports; embed_dataset drops it.
    return pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string()),
                     "_source": pa.array(sources, pa.string())})


def read_inputs(paths, *, text_column: str = "text", id_column: str = "id"):
    """A ``ray.data.Dataset`` of ``id`` and ``text`` (strings) from text, JSONL and
    Parquet inputs. The paths must be readable at the same place on every node."""
    import ray.data

    files = expand_inputs(paths, text_column)
    # Workers read the absolute path (their working directory is Ray's), while the
    # ids name the file as the user did.
    listing = ray.data.from_items([{"path": os.path.abspath(p), "name": p, "kind": k}
                                   for p, k in files], override_num_blocks=len(files))
    return listing.map_batches(read_files, fn_kwargs={"text_column": text_column,
                                                      "id_column": id_column},
                               batch_size=1, batch_format="pyarrow")


def index_columns(batch):
    """A Ray map step before writing: the index's columns in the index's types, whatever
    the steps after ``embed_dataset`` made of them (a row-wise ``filter`` turns the
    embedding into a list of doubles): ``id`` (string), ``text`` if kept, and
    ``embedding`` as a fixed-size list of float32."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.column_names
    for need in ("id", "embedding"):
        if need not in names:
            raise EmbeddingIndexError(f"write_index: the dataset has no {need!r} column (it has "
                                      f"{', '.join(names)})")
    emb = batch.column("embedding").combine_chunks()
    n = len(emb)
    if pa.types.is_fixed_size_list(emb.type) or pa.types.is_list(emb.type) or \
            pa.types.is_large_list(emb.type):
        lengths = pc.list_value_length(emb).to_numpy(zero_copy_only=False) if n else np.zeros(0)
        values = pc.list_flatten(emb).to_numpy(zero_copy_only=False)
    else:  # a tensor extension column, or anything else holding equal-length vectors
        rows = [np.asarray(v, dtype=np.float32).reshape(-1) for v in emb.to_pylist()]
        lengths = np.array([r.size for r in rows])
        values = np.concatenate(rows) if rows else np.zeros(0, np.float32)
    if n and (lengths.min() != lengths.max() or lengths.min() < 1):
        raise EmbeddingIndexError(f"write_index: embeddings of different sizes ({lengths.min()} "
                                  f"to {lengths.max()}) in one dataset")
    dim = int(lengths[0]) if n else 1
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.float32), pa.float32()),
                                               dim)
    out = {"id": pc.cast(batch.column("id"), pa.string())}
    if "text" in names:
        out["text"] = pc.cast(batch.column("text"), pa.string())
    out["embedding"] = column
    return pa.table(out)


def _summary(folder):
    """(rows, dim, has_text) of the Parquet files in ``folder``, refusing an id given
    to two rows."""
    import pyarrow.parquet as pq

    rows, dim, has_text, seen = 0, None, False, {}
    for f in sorted(x for x in os.listdir(folder) if x.endswith(PARQUET_SUFFIX)):
        path = os.path.join(folder, f)
        schema = pq.read_schema(path)
        dim = schema.field("embedding").type.list_size
        has_text = "text" in schema.names
        for row_id in pq.read_table(path, columns=["id"]).column("id").to_pylist():
            if row_id in seen:
                raise EmbeddingIndexError(
                    f"id {row_id!r} is given to two rows (rows {seen[row_id] + 1} and {rows + 1}"
                    " of the output; a JSONL or Parquet id may equal another file's <path>:<n>):"
                    " every row needs its own id; the previous index, if any, is unchanged")
            seen[row_id] = rows
            rows += 1
    return rows, dim, has_text


def write_index(ds, output, *, info: dict | None = None, on_written=None) -> dict:
    """Run ``ds`` (a Ray Dataset with columns ``id``, ``embedding`` and optionally
    ``text``, as ``embed_dataset`` makes) and write it as an index at ``output``;
    returns the manifest written (rows, dimension, files, checksums, ...).

    The switch is atomic and a failed or killed run leaves any previous index as it
    was (see ``tallow.distributed.index_store``). ``info``: more manifest entries;
    ``on_written``: called once the rows are written, returns more of them. Every id
    must be unique (an ``EmbeddingIndexError`` names the first one given twice)."""
    output = check_output_dir(output)
    created = not os.path.exists(output)
    os.makedirs(output, exist_ok=True)
    partial = None
    try:
        with writer_lock(output):
            remove_leftovers(output)
            partial = new_partial_dir(output)
            ds.map_batches(index_columns, batch_format="pyarrow").write_parquet(
                partial, **PARQUET_WRITE_ARGS)
            rows, dim, has_text = _summary(partial)
            if rows == 0:
                raise ValueError("the inputs hold no texts: nothing to index")
            manifest = {"format": "tallow-index", "version": FORMAT_VERSION, "rows": rows,
                        "dim": dim, "has_text": has_text, **(info or {}),
                        **(on_written() if on_written else {})}
            manifest = switch_to(output, partial, manifest)
            partial = None
    except BaseException:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        if created and set(os.listdir(output)) <= {LOCK}:
            shutil.rmtree(output, ignore_errors=True)
        raise
    return manifest
