"""``tallow bench compile`` runs its rows end to end (no speed is asserted: speed is
measured by the bench itself): each workload recorded once, then replayed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tallow.bench.compile import bench_compile


def test_bench_compile_rows_record_once_and_replay():
    results = bench_compile(repeats=1, threads=(1,), number=1)
    assert [r["workload"].split()[0] for r in results] == ["5000", "MLP"]
    for r in results:
        assert r["compiled"] > 0 and r["eager"] > 0
        assert r["stats"]["recordings"] == 1 and r["stats"]["replays"] >= 2
    chain = results[0]["stats"]
    assert chain["fused_groups"] == 1 and chain["calls"] == 0


@pytest.mark.slow
def test_bench_compile_from_the_cli(tmp_path):
    out = tmp_path / "compile.json"
    run = subprocess.run([sys.executable, "-m", "tallow", "bench", "compile", "--quick", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "tl.compile" in run.stdout
    rows = json.loads(out.read_text())["compile"]
    assert {r["threads"] for r in rows} == {1, 2}
