"""The bench's report of CPU time a virtual machine's host stole during a suite."""

import io
import json
import sys
import time
import types

import pytest

from tallow.bench import common


def test_stolen_percent_is_the_share_of_ticks_stolen_between_two_readings():
    assert common.stolen_percent((10, 1000), (60, 2000)) == pytest.approx(5.0)
    assert common.stolen_percent((10, 1000), (10, 3000)) == 0.0
    assert common.stolen_percent(None, (10, 1000)) is None
    assert common.stolen_percent((10, 1000), None) is None
    assert common.stolen_percent((10, 1000), (10, 1000)) is None  # no time passed


def test_cpu_ticks_reads_the_steal_column_of_proc_stat(monkeypatch):
    line = "cpu  4754268 253157 437158 9411021 32392 0 10229 153793 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    real_open = open

    def fake_open(path, *a, **k):
        return io.StringIO(line) if path == "/proc/stat" else real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    assert common.cpu_ticks() == (153793, 4754268 + 253157 + 437158 + 9411021 + 32392 + 0 + 10229 + 153793)
    line = "intr 1 2 3\n"  # not the counters
    assert common.cpu_ticks() is None
    line = "cpu  1 2 3\n"  # too old a kernel to count steal
    assert common.cpu_ticks() is None
    line = ""
    assert common.cpu_ticks() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_a_suite_prints_and_stores_the_stolen_share(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = types.SimpleNamespace(quick=True, repeats=1, json=str(out))

    def measure(repeats, quick):
        time.sleep(0.05)  # the clock ticks (100 a second) move on
        return {"rows": [1, 2]}

    assert common.run_suite(args, "demo", measure) == 0
    res = json.loads(out.read_text())
    assert res["demo"] == {"rows": [1, 2]}
    assert 0.0 <= res["host_steal_percent"] <= 100.0
    assert "CPU time stolen by the host during the suite" in capsys.readouterr().out
