"""docs/benchmarks.md is generated from the recorded JSON runs (``tallow bench
--record``, ``python -m tallow.bench.report``), never written by hand."""

from __future__ import annotations

import json
import pathlib

from tallow.bench import common
from tallow.bench.report import record, render, slug

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_write_json_carries_the_printed_tables_and_the_machine(tmp_path):
    common._printed_tables.clear()
    common.table("a title", ["shape", "ms"], [["64x64", 1.5], ["128", None]])
    out = tmp_path / "r.json"
    common.write_json(out, {"rows": [1]})
    res = json.loads(out.read_text())
    assert res["rows"] == [1]
    assert res["tables"] == [{"title": "a title", "header": ["shape", "ms"],
                              "rows": [["64x64", "1.500"], ["128", "-"]]}]
    assert res["machine"]["threads"] >= 1 and res["machine"]["processor"]
    # the next suite's JSON starts with no tables of its own
    common.write_json(out, {})
    assert "tables" not in json.loads(out.read_text())


def test_record_keeps_the_latest_run_per_machine_and_render_shows_its_tables(tmp_path):
    machine = {"processor": "Some CPU 9000", "arch": "x86_64", "simd": "AVX2", "threads": 2, "date": "2026-01-02"}
    old = {"machine": machine, "tables": [{"title": "superseded run", "header": ["a"], "rows": [["1"]]}]}
    new = {"machine": machine, "host_steal_percent": 0.5,
           "tables": [{"title": "steps", "header": ["workload", "x"], "rows": [["mlp", "0.8"]]}]}
    record(tmp_path, "train", old)
    path = record(tmp_path, "train", new)
    assert path.parent.name == slug(machine) == "some-cpu-9000-avx2-2t"
    page = render(tmp_path)
    assert "## Some CPU 9000 (x86_64, AVX2, 2 threads)" in page
    assert "### `tallow bench train` (2026-01-02; 0.5% of CPU time stolen by the host)" in page
    assert "| mlp | 0.8 |" in page and "superseded run" not in page
    assert "smoke run" not in page
    record(tmp_path, "train", dict(new, quick=True))
    assert "(2026-01-02; 0.5% of CPU time stolen by the host; `--quick`: a smoke run, not figures)" in render(tmp_path)


def test_run_suite_marks_a_quick_run(tmp_path):
    class Args:
        quick, repeats, json = True, 1, str(tmp_path / "q.json")

    common.run_suite(Args, "rows", lambda repeats, quick: [repeats, quick])
    res = json.loads((tmp_path / "q.json").read_text())
    assert res["rows"] == [1, True] and res["quick"] is True
    Args.quick = False
    common.run_suite(Args, "rows", lambda repeats, quick: [repeats, quick])
    assert "quick" not in json.loads((tmp_path / "q.json").read_text())


def test_the_benchmarks_page_is_the_rendering_of_docs_bench():
    assert (ROOT / "docs" / "benchmarks.md").read_text() == render(ROOT / "docs" / "bench")
