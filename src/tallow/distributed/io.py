"""Reading a corpus into a Ray Dataset, and writing an embedding index safely.

Inputs: text files (one text a line), JSONL (``.jsonl``/``.ndjson``: objects with
a ``text`` field and an optional ``id``, or plain strings) and Parquet (``.parquet``
files, or directories of them, with a text column and an optional id column).
Every row gets a string ``id``: its own when the input has one, else
``<path>:<n>`` (the n-th line of a text or JSONL file, the n-th row of a Parquet
file, counting from 1). Each file is read whole by one Ray task.

The index is a directory of Parquet files (``id``, optionally ``text``, and
``embedding`` as a fixed-size list of float32) with ``_tallow_index.json``
describing it. It is written under a temporary name beside its destination and
renamed into place only once complete, so a failed run leaves any previous
index as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from ..errors import EmbeddingIndexError, FileFormatError
from ..text_lines import JSONL_SUFFIXES, file_items, read_utf8

MANIFEST = "_tallow_index.json"  # "_": Parquet readers skip it
FORMAT_VERSION = 1
PARQUET_SUFFIX = ".parquet"


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


def _read_line_file(path, name):
    """(ids, texts) of a text or JSONL file (``tallow.text_lines`` splits its lines);
    an id given twice in the file is refused with both line numbers."""
    name = path if name is None else name
    ids, texts, first_line = [], [], {}
    for n, given, text in file_items(path, read_utf8(path)):
        row_id = f"{name}:{n}" if given is None else given
        if row_id in first_line:
            raise FileFormatError(f"{path}:{n}: id {row_id!r} is used again (first on line "
                                  f"{first_line[row_id]}); every row needs its own id")
        first_line[row_id] = n
        ids.append(row_id)
        texts.append(text)
    return ids, texts


def read_text_file(path, name=None):
    """(ids, texts) of a text file: one text a line, blank lines skipped."""
    return _read_line_file(path, name)


def read_jsonl_file(path, name=None):
    """(ids, texts) of a JSONL file: ``{"text": ..., "id": ...}`` objects or strings."""
    return _read_line_file(path, name)


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

    ids, texts = [], []
    for path, name, kind in zip(batch["path"].to_pylist(), batch["name"].to_pylist(),
                                batch["kind"].to_pylist()):
        if kind == "parquet":
            i, t = read_parquet_file(path, text_column, id_column, name)
        elif kind == "jsonl":
            i, t = read_jsonl_file(path, name)
        else:
            i, t = read_text_file(path, name)
        ids += i
        texts += t
    return pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string())})


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


def check_output_dir(path) -> str:
    """The absolute destination of an index, checked before any work: its parent
    exists and is writable; if it exists, it is an index tallow wrote (replaced
    when the new one is complete) or an empty directory."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"--output: no such directory: {parent}")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"--output: cannot write in {parent}")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise FileExistsError(f"--output: {path} exists and is not a directory")
        if os.listdir(path) and not os.path.exists(os.path.join(path, MANIFEST)):
            raise FileExistsError(f"--output: {path} is a non-empty directory without {MANIFEST}; "
                                  "tallow replaces only indexes it wrote")
    return path


def write_index(ds, output, *, info: dict | None = None) -> dict:
    """Run ``ds`` (columns ``id``, ``embedding``, optionally ``text``) and write it as
    an index at ``output``, atomically as far as the file system allows: the files
    go to a temporary sibling directory, which replaces ``output`` only after every
    block is written. Returns the manifest written (rows, dimension, ...)."""
    import pyarrow.parquet as pq

    output = check_output_dir(output)
    parent, name = os.path.split(output)
    tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
    try:
        ds.write_parquet(tmp)
        files = sorted(f for f in os.listdir(tmp) if f.endswith(PARQUET_SUFFIX))
        rows, dim, has_text = 0, None, False
        for f in files:
            meta = pq.read_metadata(os.path.join(tmp, f))
            rows += meta.num_rows
            schema = meta.schema.to_arrow_schema()
            dim = schema.field("embedding").type.list_size
            has_text = "text" in schema.names
        if rows == 0:
            raise ValueError("the inputs hold no texts: nothing to index")
        manifest = {"format": "tallow-index", "version": FORMAT_VERSION, "rows": rows,
                    "dim": dim, "has_text": has_text, "files": files, **(info or {})}
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2)
        _replace_dir(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _replace_dir(new, dest):
    """Move directory ``new`` to ``dest``; a previous ``dest`` is removed only after."""
    if not os.path.exists(dest):
        os.rename(new, dest)
        return
    parent, name = os.path.split(dest)
    old = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
    os.rmdir(old)
    os.rename(dest, old)
    try:
        os.rename(new, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(path) -> dict:
    """An index directory's ``_tallow_index.json``, checked."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise EmbeddingIndexError(f"--index: no such directory: {path}")
    mpath = os.path.join(path, MANIFEST)
    if not os.path.exists(mpath):
        raise EmbeddingIndexError(f"{path}: not a tallow index (no {MANIFEST})")
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise EmbeddingIndexError(f"{mpath}: unreadable ({e})") from None
    if manifest.get("format") != "tallow-index" or manifest.get("version") != FORMAT_VERSION:
        raise EmbeddingIndexError(f"{mpath}: not a version-{FORMAT_VERSION} tallow index")
    missing = [f for f in manifest.get("files", []) if not os.path.exists(os.path.join(path, f))]
    if missing or not manifest.get("files"):
        raise EmbeddingIndexError(f"{path}: index files missing: {', '.join(missing) or 'all'}")
    return manifest
