"""The ``tallow`` command's argument handling: clear messages and exit codes, valid
--json files. The suites are stand-ins (the real ones take minutes); the models'
commands are covered end to end in tests/cli/test_embed_generate.py."""

import json
import os
import subprocess
import sys
import types

import pytest

from tallow.cli import bench as bench_cli
from tallow.bench.common import write_json
from tallow.cli import main


@pytest.fixture
def fake_suites(monkeypatch):
    """Two suites that record their calls; "one" writes JSON and a plot, "none"
    measures nothing (as the GPU suites do without an adapter)."""
    calls = []

    def run_one(args):
        calls.append(("one", args.json, args.plot))
        if args.plot:
            with open(args.plot, "wb") as f:
                f.write(b"png")
        write_json(args.json, {"value": 1.5})
        return 0

    def run_none(args):
        calls.append(("none", args.json, args.plot))
        print("no WebGPU adapter: nothing to measure")
        return 0

    for name, run in (("one", run_one), ("none", run_none), ("two", run_one)):
        mod = types.ModuleType(f"tallow.bench._fake_{name}")
        mod.run = run
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(bench_cli, "SUITES", {n: f"_fake_{n}" for n in ("one", "none", "two")})
    monkeypatch.setattr(bench_cli, "ALL_ORDER", ("one", "none", "two"))
    monkeypatch.setattr(bench_cli, "DRAWING", ("one", "two"))
    return calls


def usage_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    return err


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_bench_repeats_must_be_positive(value, capsys):
    assert "--repeats" in usage_error(["bench", "cpu", "--repeats", value], capsys)


def test_bench_unknown_suite(capsys):
    assert "invalid choice" in usage_error(["bench", "nope"], capsys)


def _results(data: dict) -> dict:
    """A suite's JSON without the machine it ran on (every file names it)."""
    assert data.pop("machine")["threads"] >= 1
    return data


def test_bench_all_json_keeps_every_suite(fake_suites, tmp_path):
    out = tmp_path / "all.json"
    assert main(["bench", "all", "--json", str(out)]) == 0
    data = _results(json.loads(out.read_text()))
    assert _results(data["one"]) == {"value": 1.5} and _results(data["two"]) == {"value": 1.5}
    assert "skipped" in data["none"]


def test_bench_json_of_a_suite_that_measured_nothing_is_valid(fake_suites, tmp_path):
    out = tmp_path / "none.json"
    assert main(["bench", "none", "--json", str(out)]) == 0
    assert "skipped" in json.loads(out.read_text())


def test_bench_json_of_one_suite_is_its_results(fake_suites, tmp_path):
    out = tmp_path / "one.json"
    assert main(["bench", "one", "--json", str(out)]) == 0
    assert _results(json.loads(out.read_text())) == {"value": 1.5}


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_bench_unwritable_output_fails_before_running(flag, fake_suites, tmp_path, capsys):
    target = tmp_path / "missing-dir" / "out"
    err = usage_error(["bench", "one", flag, str(target)], capsys)
    assert flag in err and "missing-dir" in err
    err = usage_error(["bench", "one", flag, str(tmp_path)], capsys)  # a directory
    assert flag in err
    assert fake_suites == []


def test_bench_plot_needs_matplotlib(fake_suites, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert "matplotlib" in usage_error(["bench", "one", "--plot", str(tmp_path / "p.png")], capsys)
    assert fake_suites == []


def test_bench_all_plot_gives_each_suite_its_file(fake_suites, tmp_path):
    plot = tmp_path / "fig.png"
    assert main(["bench", "all", "--plot", str(plot)]) == 0
    assert (tmp_path / "fig-one.png").exists() and (tmp_path / "fig-two.png").exists()


@pytest.mark.parametrize("command", ["info", "bench", "embed", "generate"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and "usage: tallow " + command in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["generate", "--model", "m", "--prompt", "p", "--max-tokens", "-1"],
    ["generate", "--model", "m", "--prompt", "p", "--max-tokens", "many"],
    ["generate", "--model", "m"],  # no --prompt (--model has a default)
    ["embed", "--batch-size", "0", "x"],
    [],
])
def test_bad_arguments_are_usage_errors(argv, capsys):
    usage_error(argv, capsys)


def test_python_dash_m_tallow():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "tallow", "--help"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0 and "usage: tallow" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "tallow", "bench", "--repeats", "0"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_info_names_the_thread_rule(capsys):
    import tallow as tl

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"threads:   {tl.utils.get_num_threads()} (rule: {tl.utils.num_threads_rule()}" in out


def test_embed_output_folder_is_checked_before_loading_a_model(tmp_path, capsys):
    err = usage_error(["embed", "x", "--model", str(tmp_path), "--output",
                       str(tmp_path / "missing" / "o.npy")], capsys)
    assert "--output" in err


def test_bench_json_is_strict_json(tmp_path):
    """NaN and infinities (a ratio over a zero time) are not JSON: they are written as null."""
    out = tmp_path / "r.json"
    write_json(str(out), {"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf")}})

    def reject(name):
        raise ValueError(f"not JSON: {name}")

    assert _results(json.loads(out.read_text(), parse_constant=reject)) == {"a": None, "b": [1.0, None],
                                                                            "c": {"d": None}}
