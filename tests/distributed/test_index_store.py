"""The index on disk without a Ray runtime: ``write_index`` driven by a stand-in
dataset (pyarrow only). A damaged, truncated or replaced file is an error naming it;
the switch to a new index is one rename; a run killed mid-write leaves the previous
index searchable and its leftovers are removed by the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tallow.cli import main  # noqa: E402
from tallow.distributed.index_store import MANIFEST, read_manifest  # noqa: E402
from tallow.distributed.io import write_index  # noqa: E402
from tallow.errors import EmbeddingIndexError  # noqa: E402
from tallow.search import Index  # noqa: E402


class TableDataset:
    """What write_index asks of a Ray Dataset: map_batches over pyarrow tables, then
    write_parquet into a folder (one file per table, as Ray writes one per block)."""

    def __init__(self, tables, pause_after=None):
        self.tables, self.pause_after = tables, pause_after

    def map_batches(self, fn, batch_format="pyarrow"):
        return TableDataset([fn(t) for t in self.tables], self.pause_after)

    def write_parquet(self, folder, **arrow_args):
        for n, t in enumerate(self.tables):
            pq.write_table(t, os.path.join(folder, f"block-{n:04d}.parquet"), **arrow_args)
            if self.pause_after == n:
                print("written", flush=True)
                time.sleep(600)  # killed here by the test


def tables(rows=(40, 25), dim=6, seed=0, id_prefix="r", as_lists=False):
    """Blocks of (id, text, embedding); ``as_lists``: the embedding as list<double>, as a
    row-wise filter after embed_dataset leaves it."""
    rng = np.random.default_rng(seed)
    out, start = [], 0
    for n in rows:
        m = rng.standard_normal((n, dim)).astype(np.float32)
        ids = [f"{id_prefix}{start + i}" for i in range(n)]
        emb = pa.array([list(map(float, r)) for r in m], pa.list_(pa.float64())) if as_lists \
            else pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), dim)
        out.append(pa.table({"id": ids, "text": [f"text {i}" for i in ids], "embedding": emb}))
        start += n
    return out


def matrix(ts):
    return np.concatenate([np.asarray(t.column("embedding").to_pylist(), np.float32) for t in ts])


def test_written_index_checks_rows_sizes_and_checksums(tmp_path):
    out = str(tmp_path / "index")
    ts = tables()
    manifest = write_index(TableDataset(ts), out)
    assert manifest["rows"] == 65 and manifest["version"] == 2
    assert len(manifest["files"]) == 2 and all(f.startswith("gen-") for f in manifest["files"])
    for f in manifest["files"]:
        meta = pq.ParquetFile(os.path.join(out, f)).metadata
        assert manifest["checksums"][f]["rows"] == meta.num_rows
    np.testing.assert_array_equal(Index(out).embeddings(), matrix(ts))
    # The directory follows the umask (not mkdtemp's 0700).
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(out).st_mode & 0o777 == 0o777 & ~umask
    assert os.stat(os.path.join(out, manifest["files"][0])).st_mode & 0o777 == 0o666 & ~umask


def test_file_replaced_by_a_shorter_valid_one_is_refused(tmp_path):
    out = str(tmp_path / "index")
    manifest = write_index(TableDataset(tables()), out)
    victim = os.path.join(out, manifest["files"][0])
    pq.write_table(tables(rows=(22,))[0], victim)  # valid Parquet, fewer rows
    with pytest.raises(EmbeddingIndexError, match="bytes, the manifest says|rows, the manifest"):
        Index(out)


def test_truncated_file_is_refused_and_search_cli_prints_one_line(tmp_path, capsys):
    out = str(tmp_path / "index")
    manifest = write_index(TableDataset(tables()), out)
    victim = os.path.join(out, manifest["files"][1])
    data = open(victim, "rb").read()
    open(victim, "wb").write(data[: len(data) // 2])
    with pytest.raises(EmbeddingIndexError, match="truncated or replaced") as e:
        read_manifest(out)
    assert victim in str(e.value)
    assert main(["search", "--index", out, "anything", "--model", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and victim in err


@pytest.mark.parametrize("seed", range(12))
def test_flipped_bytes_never_change_a_vector_silently(tmp_path, seed):
    """A byte flipped anywhere in a file: the checksum on open refuses it; with the
    check off, Parquet's page checksums refuse the damaged page, or the vectors read
    are the original ones (a flip in unused bytes)."""
    out = str(tmp_path / "index")
    ts = tables(seed=seed)
    manifest = write_index(TableDataset(ts), out)
    rng = np.random.default_rng(seed)
    victim = os.path.join(out, manifest["files"][int(rng.integers(2))])
    data = bytearray(open(victim, "rb").read())
    at = int(rng.integers(4, len(data) - 8))
    data[at] ^= 1 << int(rng.integers(8))
    open(victim, "wb").write(bytes(data))
    # The checksum, or the footer's row count and readability when the flip is there.
    with pytest.raises(EmbeddingIndexError, match="differs from the checksum|not a readable "
                                                  "Parquet|rows, the manifest says") as e:
        Index(out)
    assert victim in str(e.value)
    try:
        got = Index(out, verify=False).embeddings()
    except EmbeddingIndexError as e:
        assert victim in str(e)
    else:
        np.testing.assert_array_equal(got, matrix(ts))


def test_filtered_dataset_writes_a_proper_index(tmp_path):
    """A row-wise filter after embed_dataset turns the embedding into list<double>."""
    out = str(tmp_path / "index")
    ts = tables(as_lists=True)
    manifest = write_index(TableDataset(ts), out)
    field = pq.read_schema(os.path.join(out, manifest["files"][0])).field("embedding")
    assert field.type == pa.list_(pa.float32(), 6)
    np.testing.assert_array_equal(Index(out).embeddings(), matrix(ts).astype(np.float32))


def test_an_id_given_to_two_rows_is_refused_and_the_old_index_kept(tmp_path):
    out = str(tmp_path / "index")
    write_index(TableDataset(tables()), out)
    before = sorted(os.listdir(out))
    a, b = tables(rows=(5, 5))
    b = b.set_column(0, "id", pa.array(["r0"] + b.column("id").to_pylist()[1:]))
    with pytest.raises(EmbeddingIndexError, match="id 'r0' is given to two rows"):
        write_index(TableDataset([a, b]), out)
    assert sorted(os.listdir(out)) == before
    assert len(Index(out)) == 65


def test_a_stale_index_says_it_was_replaced(tmp_path):
    out = str(tmp_path / "index")
    write_index(TableDataset(tables()), out)
    old = Index(out)
    write_index(TableDataset(tables(rows=(7,), seed=3)), out)
    with pytest.raises(EmbeddingIndexError, match="replaced since this Index opened it"):
        old.embeddings()
    assert len(Index(out)) == 7


def test_replacing_an_index_is_one_rename_of_the_manifest(tmp_path, monkeypatch):
    """The only change a reader can see is os.replace of the manifest; before it the
    old index is whole, after it the new one."""
    out = str(tmp_path / "index")
    write_index(TableDataset(tables()), out)
    renames = []
    real_replace, real_rename = os.replace, os.rename

    def replace(src, dst):
        if os.path.basename(dst) == MANIFEST:
            renames.append(("manifest", len(Index(out))))  # still the old index
        return real_replace(src, dst)

    def rename(src, dst):
        renames.append(("rename", os.path.basename(dst)[:4]))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    write_index(TableDataset(tables(rows=(9,))), out)
    assert renames == [("rename", "gen-"), ("manifest", 65)]
    assert len(Index(out)) == 9


def test_sigkill_mid_write_keeps_the_old_index_and_the_next_run_cleans_up(tmp_path):
    out = str(tmp_path / "index")
    write_index(TableDataset(tables()), out)
    before = Index(out).embeddings()
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {sys.path!r}
        from distributed.test_index_store import TableDataset, tables
        from tallow.distributed.io import write_index
        write_index(TableDataset(tables(rows=(30, 30, 30)), pause_after=1), {out!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        partials = [n for n in os.listdir(out) if n.startswith(".partial-")]
        assert len(partials) == 1 and len(os.listdir(os.path.join(out, partials[0]))) == 2
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # Killed mid-write: the old index is whole and searchable.
    np.testing.assert_array_equal(Index(out).embeddings(), before)
    # The next run removes what the killed one left.
    manifest = write_index(TableDataset(tables(rows=(11,))), out)
    assert sorted(os.listdir(out)) == sorted({".lock", MANIFEST, manifest["files"][0].split("/")[0]})
    assert len(Index(out)) == 11


def test_old_layout_leftovers_and_version_1_index_are_replaced(tmp_path):
    out = tmp_path / "index"
    out.mkdir()
    t = tables(rows=(4,))[0]
    pq.write_table(t, out / "old.parquet")
    (out / MANIFEST).write_text(json.dumps({"format": "tallow-index", "version": 1, "rows": 4,
                                            "dim": 6, "has_text": True, "files": ["old.parquet"]}))
    assert len(Index(str(out))) == 4
    (tmp_path / ".index.partial-abc123").mkdir()  # what the earlier layout's killed run left
    manifest = write_index(TableDataset(tables(rows=(3,))), str(out))
    assert not (out / "old.parquet").exists()
    assert sorted(os.listdir(tmp_path)) == ["index"]
    assert len(Index(str(out))) == 3 and manifest["version"] == 2


def test_empty_query_is_refused(tmp_path, capsys):
    out = str(tmp_path / "index")
    write_index(TableDataset(tables()), out)
    with pytest.raises(ValueError, match="empty query"):
        Index(out).search("  ")
    with pytest.raises(ValueError, match="empty query"):
        Index(out).search(["fine", ""])
    assert main(["search", "--index", out, ""]) == 1
    assert "empty query" in capsys.readouterr().err
