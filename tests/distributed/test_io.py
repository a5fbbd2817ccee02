"""The pieces of the distributed path that need no Ray runtime: readers, the output
directory rules, worker planning, and Ray staying out of ``import tallow``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tallow.distributed import plan_workers
from tallow.distributed.io import (
    MANIFEST, check_output_dir, expand_inputs, read_jsonl_file, read_manifest,
    read_parquet_file, read_text_file,
)
from tallow.errors import DistributedError, EmbeddingIndexError, FileFormatError


def test_import_tallow_loads_neither_ray_nor_pyarrow():
    code = ("import sys, tallow, tallow.search, tallow.distributed, tallow.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'pyarrow')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"


def test_text_and_jsonl_ids(tmp_path):
    t = tmp_path / "a.txt"
    t.write_text("\ufefffirst\n\n  \nsecond line\n", encoding="utf-8")
    assert read_text_file(str(t), "a.txt") == (["a.txt:1", "a.txt:4"], ["first", "second line"])
    j = tmp_path / "b.jsonl"
    j.write_text('{"text": "x", "id": 5}\n"plain"\n\n{"text": "y", "id": "k"}\n{"text": "z"}\n')
    assert read_jsonl_file(str(j), "b") == (["5", "b:2", "k", "b:5"], ["x", "plain", "y", "z"])


@pytest.mark.parametrize("line, message", [
    ("{not json", "b.jsonl:2: not valid JSON"),
    ('{"id": 3}', 'b.jsonl:2: a JSON object needs a "text" field'),
    ("42", "b.jsonl:2: expected a string"),
])
def test_jsonl_errors_name_the_line(tmp_path, line, message):
    j = tmp_path / "b.jsonl"
    j.write_text('"fine"\n' + line + "\n")
    with pytest.raises(FileFormatError, match=message):
        read_jsonl_file(str(j), "b.jsonl")


def test_parquet_inputs(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    with_ids = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [7, 8], "body": ["p", "q"]}), with_ids)
    assert read_parquet_file(str(with_ids), "body", "id") == (["7", "8"], ["p", "q"])
    no_ids = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["u", "v", "w"]}), no_ids)
    assert read_parquet_file(str(no_ids), "text", "id", "b") == (["b:1", "b:2", "b:3"], ["u", "v", "w"])
    # A directory of Parquet files is read file by file, in name order.
    folder = tmp_path / "dir"
    folder.mkdir()
    for name in ("2.parquet", "1.parquet"):
        pq.write_table(pa.table({"text": ["t"]}), folder / name)
    (folder / "notes.txt").write_text("not an input")
    assert expand_inputs([str(folder)]) == [(str(folder / "1.parquet"), "parquet"),
                                            (str(folder / "2.parquet"), "parquet")]
    with pytest.raises(FileFormatError, match="no column 'text'"):
        expand_inputs([str(with_ids)], "text")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "c.parquet")
    with pytest.raises(FileFormatError, match="not text"):
        expand_inputs([str(tmp_path / "c.parquet")])
    (tmp_path / "d.parquet").write_bytes(b"not parquet")
    with pytest.raises(FileFormatError, match="not a readable Parquet"):
        expand_inputs([str(tmp_path / "d.parquet")])


def test_inputs_checked_before_any_work(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        expand_inputs([str(tmp_path / "missing.txt")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="without .parquet files"):
        expand_inputs([str(tmp_path / "empty")])
    with pytest.raises(ValueError, match="no input"):
        expand_inputs([])
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(ValueError, match="given twice"):
        expand_inputs([str(tmp_path / "a.txt"), str(tmp_path / ".." / tmp_path.name / "a.txt")])


def test_output_directory_rules(tmp_path):
    assert check_output_dir(str(tmp_path / "new")) == str(tmp_path / "new")
    with pytest.raises(FileNotFoundError):
        check_output_dir(str(tmp_path / "no" / "such"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        check_output_dir(str(tmp_path / "file"))
    (tmp_path / "empty").mkdir()
    check_output_dir(str(tmp_path / "empty"))
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / MANIFEST).write_text("{}")
    (tmp_path / "index" / "x.parquet").write_text("")
    check_output_dir(str(tmp_path / "index"))  # a previous index may be replaced
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="non-empty directory"):
        check_output_dir(str(tmp_path / "other"))


def test_manifest_checks(tmp_path):
    (tmp_path / MANIFEST).write_text('{"format": "something-else"}')
    with pytest.raises(EmbeddingIndexError, match="not a tallow index of version 1 or 2"):
        read_manifest(str(tmp_path))
    (tmp_path / MANIFEST).write_text("{broken")
    with pytest.raises(EmbeddingIndexError, match="unreadable"):
        read_manifest(str(tmp_path))


def test_local_runtime_never_joins_ray_address():
    from tallow.distributed import local_init_kwargs

    kwargs = local_init_kwargs(num_cpus=3)
    assert kwargs["address"] == "local" and kwargs["num_cpus"] == 3
    assert kwargs["include_dashboard"] is False and kwargs["dashboard_host"] == "127.0.0.1"


def test_worker_plans():
    # The default leaves one CPU to the read and write tasks.
    assert plan_workers(8, 0) == {"num_workers": 7, "num_cpus": 1.0, "num_gpus": 0, "threads": 1}
    # More workers than CPUs but one: each asks for less, so the readers still fit.
    p = plan_workers(2, 0, num_workers=2)
    assert p["num_workers"] == 2 and p["num_cpus"] * 2 <= 1 and p["threads"] == 1
    p = plan_workers(16, 0, cpus_per_worker=4)
    assert p["num_workers"] == 3 and p["num_cpus"] == 4 and p["threads"] == 4
    assert plan_workers(1, 0)["num_workers"] == 1
    # GPU: one worker per GPU, each asking for a whole one.
    assert plan_workers(8, 2, device="gpu")["num_workers"] == 2
    assert plan_workers(8, 2, device="gpu")["num_gpus"] == 1
    with pytest.raises(DistributedError, match="no GPUs"):
        plan_workers(8, 0, device="gpu")
    with pytest.raises(DistributedError, match="3 GPU workers"):
        plan_workers(8, 2, device="gpu", num_workers=3)
    with pytest.raises(ValueError, match="device"):
        plan_workers(8, 0, device="tpu")
    with pytest.raises(ValueError, match="num_workers"):
        plan_workers(8, 0, num_workers=0)


# -- lines end at \n only; one id per row --------------------------------------


def test_form_feeds_and_line_separators_stay_inside_their_line(tmp_path):
    """pdftotext puts a form feed between pages; JSON allows U+2028 in strings.
    Neither ends a line, nor does a lone \\r: the line numbers (the ids) count \\n."""
    t = tmp_path / "f.txt"
    t.write_bytes("a\x0cb\nc\r\nd\u2028e\x1cf\rg\n\nh".encode())
    assert read_text_file(str(t), "f.txt") == (
        ["f.txt:1", "f.txt:2", "f.txt:3", "f.txt:5"], ["a\x0cb", "c", "d\u2028e\x1cf\rg", "h"])
    j = tmp_path / "f.jsonl"
    j.write_text('{"text": "x\u2028y\\fz"}\r\n"w\u2029"\n', encoding="utf-8")
    assert read_jsonl_file(str(j), "f") == (["f:1", "f:2"], ["x\u2028y\x0cz", "w\u2029"])


def test_non_utf8_file_names_the_file(tmp_path):
    t = tmp_path / "latin1.txt"
    t.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(FileFormatError, match=r"latin1.txt is not UTF-8 text \(byte 3 is 0xe9\)"):
        read_text_file(str(t))


def test_an_id_used_twice_in_a_file_is_refused(tmp_path):
    j = tmp_path / "d.jsonl"
    j.write_text('{"text": "x", "id": "a"}\n{"text": "y", "id": "b"}\n{"text": "z", "id": "a"}\n')
    with pytest.raises(FileFormatError, match=r"d.jsonl:3: id 'a' is used again \(first on line 1\)"):
        read_jsonl_file(str(j))
    # A given id equal to another line's <name>:<n> is a duplicate too.
    j.write_text('"first"\n{"text": "y", "id": "d:1"}\n')
    with pytest.raises(FileFormatError, match="id 'd:1' is used again"):
        read_jsonl_file(str(j), "d")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"id": [1, 2, 1], "text": ["p", "q", "r"]}), tmp_path / "d.parquet")
    with pytest.raises(FileFormatError, match=r"row 3: id '1' is used again \(first in row 1\)"):
        read_parquet_file(str(tmp_path / "d.parquet"), "text", "id")
