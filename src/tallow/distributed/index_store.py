"""An embedding index on disk: written whole or not at all, switched atomically,
checked when opened.

Layout of an index directory ``OUT``::

    OUT/_tallow_index.json      the manifest: rows, dimension, files, checksums, model
    OUT/gen-<time>-<random>/    one generation's Parquet files (id, text?, embedding)

A run writes its Parquet files into ``OUT/.partial-<pid>-<random>/``, checks them
(every row has one id), renames that folder to its generation name and only then
replaces the manifest (``tallow.atomic``: a rename). The manifest is the one
pointer: a reader sees the old index or the new one, never a mix, and a run that
fails or is killed leaves the previous index in place. The previous generation is
removed after the switch. A killed run's ``.partial-*`` folder (and any generation
the manifest does not name) is removed by the next run, which holds ``OUT/.lock``
(``flock``) while it writes, so two runs never write one index at once.

The manifest records each file's rows, size and SHA-256, and the Parquet files
carry page checksums: ``read_manifest`` checks rows and sizes, ``verify_files``
the content, so a truncated, replaced or bit-flipped file is an error naming it
rather than a silently shorter or different index.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import time

from ..atomic import write_text
from ..errors import DistributedError, EmbeddingIndexError

MANIFEST = "_tallow_index.json"  # "_": Parquet readers skip it
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: files at the top level, no checksums
PARQUET_SUFFIX = ".parquet"
PARTIAL_PREFIX = ".partial-"
GENERATION_PREFIX = "gen-"
LOCK = ".lock"
# Arguments of pyarrow's ParquetWriter for every index file.
PARQUET_WRITE_ARGS = {"write_page_checksum": True}


def _own_entry(name: str) -> bool:
    """Whether a directory entry is one tallow's index writer makes."""
    return (name in (MANIFEST, LOCK) or name.startswith((PARTIAL_PREFIX, GENERATION_PREFIX)))


def check_output_dir(path) -> str:
    """The absolute destination of an index, checked before any work: its parent
    exists and is writable; if it exists, it is an index tallow wrote (replaced
    when the new one is complete), what a killed run left, or an empty directory."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"--output: no such directory: {parent}")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"--output: cannot write in {parent}")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise FileExistsError(f"--output: {path} exists and is not a directory")
        names = os.listdir(path)
        if names and not os.path.exists(os.path.join(path, MANIFEST)) and \
                not all(_own_entry(n) for n in names):
            raise FileExistsError(f"--output: {path} is a non-empty directory without {MANIFEST}; "
                                  "tallow replaces only indexes it wrote")
    return path


# -- reading ---------------------------------------------------------------------


def read_manifest(path) -> dict:
    """An index directory's manifest, checked against the files: each exists, and
    (version 2) has the size and row count the manifest records."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise EmbeddingIndexError(f"--index: no such directory: {path}")
    mpath = os.path.join(path, MANIFEST)
    if not os.path.exists(mpath):
        raise EmbeddingIndexError(f"{path}: not a tallow index (no {MANIFEST})")
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise EmbeddingIndexError(f"{mpath}: unreadable ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "tallow-index" or \
            manifest.get("version") not in READABLE_VERSIONS:
        raise EmbeddingIndexError(f"{mpath}: not a tallow index of version "
                                  f"{' or '.join(map(str, READABLE_VERSIONS))}")
    files = manifest.get("files")
    if not files or not isinstance(files, list):
        raise EmbeddingIndexError(f"{path}: the manifest lists no index files")
    missing = [f for f in files if not os.path.exists(os.path.join(path, f))]
    if missing:
        raise EmbeddingIndexError(f"{path}: index files missing: {', '.join(missing)} (the index "
                                  "is damaged, or was replaced while open: open it again)")
    if manifest["version"] >= 2:
        _check_sizes_and_rows(path, manifest)
    return manifest


def _check_sizes_and_rows(path, manifest) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    total = 0
    for name in manifest["files"]:
        want = manifest["checksums"][name]
        full = os.path.join(path, name)
        size = os.path.getsize(full)
        if size != want["bytes"]:
            raise EmbeddingIndexError(
                f"{full}: {size} bytes, the manifest says {want['bytes']}: the file was truncated "
                "or replaced; rebuild the index (tallow embed --ray)")
        try:
            rows = pq.read_metadata(full).num_rows
        except (OSError, pa.ArrowException) as e:
            raise EmbeddingIndexError(f"{full}: not a readable Parquet file ({e}); rebuild the "
                                      "index") from None
        if rows != want["rows"]:
            raise EmbeddingIndexError(f"{full}: {rows} rows, the manifest says {want['rows']}; "
                                      "rebuild the index")
        total += rows
    if total != manifest.get("rows"):
        raise EmbeddingIndexError(f"{path}: the files hold {total} rows, the manifest says "
                                  f"{manifest.get('rows')}; rebuild the index")


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_files(path, manifest) -> None:
    """Every file's SHA-256 against the manifest (version 2; version 1 has none)."""
    if manifest.get("version", 1) < 2:
        return
    for name in manifest["files"]:
        full = os.path.join(path, name)
        if file_sha256(full) != manifest["checksums"][name]["sha256"]:
            raise EmbeddingIndexError(f"{full}: its content differs from the checksum in the "
                                      "manifest (the file is damaged); rebuild the index")


# -- writing ---------------------------------------------------------------------


@contextlib.contextmanager
def writer_lock(output: str):
    """Hold ``OUT/.lock`` for one run (released by the kernel if the run is killed)."""
    import fcntl

    fd = os.open(os.path.join(output, LOCK), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise DistributedError(f"--output: another run is writing the index {output}; "
                                       "wait for it to finish") from None
            raise
        yield
    finally:
        os.close(fd)


def _current_files(output) -> set:
    try:
        with open(os.path.join(output, MANIFEST), encoding="utf-8") as f:
            return set(json.load(f).get("files", []))
    except (OSError, ValueError, AttributeError):
        return set()


def remove_leftovers(output: str) -> list:
    """Remove what killed or failed runs left: ``.partial-*`` folders and generations
    the manifest does not name, in ``output``; and the sibling ``.NAME.partial-*`` /
    ``.NAME.old-*`` folders of the earlier layout. Call with the writer lock held.
    Returns the paths removed."""
    live = {f.split("/")[0] for f in _current_files(output)}
    removed = []
    for name in os.listdir(output):
        full = os.path.join(output, name)
        if name.startswith(PARTIAL_PREFIX) or (name.startswith(GENERATION_PREFIX) and name not in live):
            shutil.rmtree(full, ignore_errors=True)
            removed.append(full)
    parent, base = os.path.split(output)
    for name in os.listdir(parent):
        if name.startswith((f".{base}.partial-", f".{base}.old-")):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed.append(os.path.join(parent, name))
    return removed


def new_partial_dir(output: str) -> str:
    """A fresh ``.partial-*`` folder in ``output``, with the umask's permissions."""
    path = os.path.join(output, f"{PARTIAL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(path)
    return path


def describe_files(folder: str, prefix: str) -> tuple:
    """(names relative to the index, {name: rows, bytes, sha256}) of a folder's Parquet files."""
    import pyarrow.parquet as pq

    names = sorted(f for f in os.listdir(folder) if f.endswith(PARQUET_SUFFIX))
    checks = {}
    for f in names:
        full = os.path.join(folder, f)
        checks[f"{prefix}/{f}"] = {"rows": pq.read_metadata(full).num_rows,
                                   "bytes": os.path.getsize(full), "sha256": file_sha256(full)}
    return [f"{prefix}/{f}" for f in names], checks


def switch_to(output: str, partial: str, manifest: dict) -> dict:
    """Make ``partial`` (inside ``output``) the index: rename it to a generation,
    replace the manifest (the atomic step), then remove the previous generation.
    ``manifest`` has everything but the file list, which this adds."""
    old_files = _current_files(output)
    generation = f"{GENERATION_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    files, checks = describe_files(partial, generation)
    os.rename(partial, os.path.join(output, generation))
    manifest = {**manifest, "files": files, "checksums": checks}
    write_text(os.path.join(output, MANIFEST), json.dumps(manifest, indent=2) + "\n")
    for old in old_files:
        top = old.split("/")[0]
        full = os.path.join(output, top)
        if top.startswith(GENERATION_PREFIX):
            shutil.rmtree(full, ignore_errors=True)
        elif top.endswith(PARQUET_SUFFIX):  # a version-1 index's files
            with contextlib.suppress(OSError):
                os.unlink(full)
    return manifest
