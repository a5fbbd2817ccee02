"""The ``--busy`` rows: the competing process comes and goes, thread counts take turns
and are restored (tiny sizes: the figures are docs/benchmarks.md's, from full runs)."""

import os

import tallow as tl
from tallow.bench import common
from tallow.bench import cpu as bench_cpu
from tallow.bench import models as bench_models
from tallow.cli.main import main


def test_competing_process_runs_inside_and_ends_after():
    seen = {}
    real = common.busy_process

    def spy():
        seen["hog"] = real()
        return seen["hog"]

    common.busy_process, before = spy, common.busy_process
    try:
        with common.competing(True):
            assert seen["hog"].poll() is None  # running during the body
    finally:
        common.busy_process = before
    assert seen["hog"].poll() is not None  # ended (and reaped) after it
    with common.competing(False):
        pass  # no process at all


def test_by_threads_takes_turns_and_restores_the_count():
    before = tl.utils.get_num_threads()
    counts = []
    res = common.by_threads(lambda: counts.append(tl.utils.get_num_threads()), (1, 2), repeats=2)
    assert set(res) == {1, 2} and all(v >= 0 for v in res.values())
    assert sorted(set(counts)) == sorted({1, min(2, os.cpu_count() or 1)})
    assert tl.utils.get_num_threads() == before


def test_numpy_reference_gets_its_blas_threads_for_the_call_only():
    from threadpoolctl import threadpool_info

    def blas():
        return {d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}

    tl.utils.get_num_threads()  # tallow's policy in force: BLAS on one thread
    inside = common.with_blas_threads(blas, 2)()
    assert inside == {2}
    assert blas() == {1}


def test_bench_cpu_busy_rows(capsys):
    res = bench_cpu.bench_busy(repeats=1, passes=1, n=64)
    assert set(res) == {"quiet", "busy"}
    for state in res.values():
        rows = [v for k, v in state.items() if k != "load_average"]
        assert len(rows) == 3 and all(r["1"] > 0 and r["2"] > 0 for r in rows)
    assert "competing" in capsys.readouterr().out


def test_bench_models_busy_rows(tiny_bert_dir, capsys):
    res = bench_models.bench_embed_busy(n=8, batch_size=4, rounds=1, model_dir=str(tiny_bert_dir))
    assert set(res) == {"quiet", "busy"} and all(res[s]["1"] > 0 and res[s]["2"] > 0 for s in res)
    assert "time ratio" in capsys.readouterr().out


def test_busy_is_a_bench_option(capsys, monkeypatch):
    import tallow.bench.cpu

    seen = {}
    monkeypatch.setattr(tallow.bench.cpu, "run", lambda args: seen.setdefault("busy", args.busy) and 0)
    assert main(["bench", "cpu", "--busy"]) == 0
    assert seen["busy"] is True
