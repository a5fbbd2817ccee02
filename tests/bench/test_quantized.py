"""``tallow bench quantized`` runs end to end (small sizes; the README's figures come from full runs)."""

import json
import types

import pytest

from tallow.bench import quantized as bench


def test_bench_quantized_small(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "SIZE", 256)
    monkeypatch.setattr(bench, "BLAS_IDLE_S", 0.01)
    # the fresh-process probe has its own test
    probe = {"cold": {"kernel": 2.0, "import_and_kernel": 3.0}, "cached": {"kernel": 0.2, "import_and_kernel": 1.2}}
    monkeypatch.setattr(bench, "bench_first_use", lambda: probe)
    monkeypatch.setattr(bench, "bench_gpu", lambda *a, **k: {"skipped": "tested on its own"})
    path = tmp_path / "q.json"
    args = types.SimpleNamespace(quick=True, repeats=1, json=str(path))
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "W 256 x 256" in out and "memory held (MiB)" in out
    assert "cold compile 2.00 s, from its disk cache 0.20 s (plus 1.00 s" in out
    res = json.loads(path.read_text())["quantized"]
    assert set(res["cpu"]) == set(bench.QUICK_FORMATS)
    q4 = res["cpu"]["Q4_0"]
    assert q4["memory_bytes"]["blocks"] == 256 * 256 // 32 * 18
    assert q4["memory_bytes"]["f32"] == 256 * 256 * 4
    for batch in ("1", "32"):
        times = q4["seconds"][batch]
        assert {"f32", "numpy", "dequantized"} <= set(times) and all(t > 0 for t in times.values())


def test_first_use_probe_measures_cold_and_cached():
    first = bench.bench_first_use()
    if "error" in first:
        assert first["error"] == "numba is not available"
        return
    assert first["cold"]["kernel"] > first["cached"]["kernel"] > 0


def test_stream_small():
    res = bench.bench_stream(count=2, n=256, k=256, repeats=1, quiet=True, blas_idle=0.01)
    if "skipped" in res:
        return
    assert res["count"] == 2 and res["f32_bytes"] == 2 * 256 * 256 * 4
    for fmt in ("Q4_0", "Q8_0"):
        r = res[fmt]
        assert all(r[c] > 0 for c in ("f32", "numba", "f32 alone", "numba alone"))
        assert r["numba_bytes"] < res["f32_bytes"] / 3


@pytest.mark.gpu
def test_bench_gpu_small(gpu):
    res = bench.bench_gpu(("Q4_0", "Q6K"), n=256, k=256, batches=(1, 4), repeats=1, quiet=True)
    for fmt in ("Q4_0", "Q6K"):
        for b in (1, 4):
            assert set(res[fmt][b]) == {"gpu f32", "gpu qmatmul"} and all(t > 0 for t in res[fmt][b].values())
