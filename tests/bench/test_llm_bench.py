"""``tallow bench llm``'s parts that need no model run: the bandwidth floor (bytes a
decode step reads, the streaming read), the per-shape tables and how a 1B run is
recorded and rendered.  The figures themselves come from full runs (docs/bench)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from gguf import GGUFReader

from tallow.bench import common, llm, llm_worker, stream
from tallow.bench.report import record, render
from tallow.ggml.gguf_io import write_gguf
from tallow.quantized import ggml_type

SMALL = dict(vocab=64, hidden=256, layers=1, heads=4, kv_heads=2, ffn=512, ctx=64, rope_theta=10000.0, eps=1e-5)


def _file_bytes(path):
    """The tensors' bytes as the gguf package reads them (an independent parser)."""
    return {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}


def test_a_tied_model_reads_every_tensor_per_token(tmp_path):
    path = str(tmp_path / "tied.gguf")
    llm.make_random_llama(path, SMALL)
    assert stream.weight_bytes_per_token(path) == sum(_file_bytes(path).values())


def test_an_untied_model_reads_one_embedding_row_per_token(tmp_path):
    rng = np.random.default_rng(0)
    embd = rng.standard_normal((64, 256)).astype(np.float32)
    out = rng.standard_normal((64, 256)).astype(np.float32)
    q8 = ggml_type("Q8_0")
    path = str(tmp_path / "untied.gguf")
    write_gguf(path, {"token_embd.weight": (q8.quantize(embd).reshape(-1), (64, 256), q8),
                      "output.weight": out, "output_norm.weight": np.ones(256, np.float32)},
               {"general.architecture": "llama"})
    sizes = _file_bytes(path)
    row = sizes["token_embd.weight"] // 64  # 8 blocks of 34 bytes
    assert row == 8 * 34
    assert stream.weight_bytes_per_token(path) == sizes["output.weight"] + sizes["output_norm.weight"] + row


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_streaming_read_covers_its_buffer(threads, monkeypatch):
    seen = []
    reduce = np.add.reduce
    monkeypatch.setattr(stream.np.add, "reduce", lambda a: seen.append(a.size) or reduce(a), raising=False)
    res = stream.read_bandwidth(1 << 20, threads, passes=2)
    assert res["read_gbps"] > 0 and res["read_cpu_s"] > 0
    assert sum(seen) == 3 * (1 << 17) and len(seen) == 3 * threads  # the untimed pass and two timed ones


def test_the_stream_worker_reports_bytes_and_speed(tmp_path, capsys):
    path = str(tmp_path / "m.gguf")
    llm.make_random_llama(path, SMALL)
    assert llm_worker.main(["stream", path, "1", "0", "0"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["weight_bytes"] == sum(_file_bytes(path).values()) and res["read_gbps"] > 0


def _entry(decode, prompt, rss):
    return {"decode_tps": decode, "prompt_tps": prompt, "peak_rss_mib": rss}


def test_tables_give_each_thread_count_its_own_table_and_the_bandwidth_share():
    common._printed_tables.clear()
    res = {"Q4_0": {1: {"tallow": dict(_entry(20.0, 50.0, 700.0), decode_cpu_ms=40.0),
                        "llama.cpp": dict(_entry(16.0, 40.0, 650.0), decode_cpu_ms=50.0),
                        "stream": {"read_gbps": 30.0, "weight_bytes": 600_000_000, "read_cpu_s": 0.02}},
                    2: {"tallow": _entry(30.0, 90.0, 710.0), "llama.cpp": _entry(40.0, 80.0, 660.0),
                        "stream": {"read_gbps": 45.0, "weight_bytes": 600_000_000}}}}
    text = llm.tables(res, (1, 2), ("tallow", "llama.cpp"), "1b")
    printed = common._printed_tables[:]
    common._printed_tables.clear()
    assert [t["title"].split(":")[0] for t in printed] == ["1b shape, 1 thread", "1b shape, 2 threads"]
    assert printed[0]["header"][:5] == ["file", "decode tallow / llama.cpp", "x", "prompt tallow / llama.cpp", "x"]
    one, two = (dict(zip(t["header"], t["rows"][0])) for t in printed)  # (the last "x": peak memory's)
    # floor: 30e9 B/s over 600e6 B = 50 tok/s; 20 and 16 tok/s are 0.40 and 0.32 of it
    assert one["floor tok/s"] == "50.0" and one["decode / floor tallow / llama.cpp"] == "0.40 / 0.32"
    assert one["decode tallow / llama.cpp"] == "20.0 / 16.0" and printed[0]["rows"][0][2] == "1.250"
    assert printed[0]["rows"][0][4] == "1.250" and one["x"] == "1.077"  # prompt 50 / 40, memory 700 / 650
    assert one["in CPU time tallow / llama.cpp"] == "0.50 / 0.40"  # a 20 ms read over 40 and 50 ms steps
    assert two["floor tok/s"] == "75.0" and two["decode / floor tallow / llama.cpp"] == "0.40 / 0.53"
    assert two["in CPU time tallow / llama.cpp"] == "- / -"  # (no CPU times given)
    assert "1b shape, 2 threads" in text


def test_a_1b_run_is_recorded_beside_the_135m_one_and_rendered_as_its_command(tmp_path, monkeypatch):
    machine = {"processor": "Some CPU", "arch": "x86_64", "simd": "AVX2", "threads": 2, "date": "2026-01-02"}
    monkeypatch.setattr(llm, "bench_llm", lambda files, threads, impls, *a, **k: {
        "Q4_0": {t: {i: (_entry(10.0, 20.0, 5.0) if i != "stream" else {"read_gbps": 1.0, "weight_bytes": 10 ** 8})
                     for i in impls} for t in threads}})
    monkeypatch.setattr(common, "machine", lambda: machine)
    models = tmp_path / "m"
    models.mkdir()
    (models / "model-Q4_0.gguf").write_bytes(b"")
    out = tmp_path / "r.json"
    args = argparse.Namespace(shape="1b", models=str(models), formats="Q4_0,Q6_K", make_models=False,
                              llama_python=None, threads=(1,), repeats=None, quick=False, busy=False, json=str(out))
    assert llm.run(args) == 0
    res = json.loads(out.read_text())
    assert res["conditions"]["shape"] == "1b" and res["conditions"]["repeats"] == 2
    assert res["suite"] == "llm-1b" and list(res["results"]) == ["Q4_0"]
    record(tmp_path / "bench", res["suite"], res)
    plain = {k: v for k, v in res.items() if k not in ("suite", "command")}
    record(tmp_path / "bench", "llm", plain)
    page = render(tmp_path / "bench")
    assert "### `tallow bench llm --shape 1b` (2026-01-02)" in page
    assert "**1b shape, 1 thread: tokens/s" in page
    assert page.index("### `tallow bench llm`") < page.index("### `tallow bench llm --shape 1b`")


def test_the_1b_shape_makes_nothing_without_llama_cpp(tmp_path):
    """Its formats come from llama.cpp's quantizer: without --llama-python no file (not even
    the 4 GB F32 one) is written."""
    found = llm.ensure_models(str(tmp_path), ("Q4_K_M", "Q8_0"), make=True, quiet=True, shape="1b")
    assert found == {} and list(tmp_path.iterdir()) == []


def test_the_worker_times_the_long_prompt_and_the_decode_steps(monkeypatch, capsys):
    """A fake model whose every fed token costs 1 ms of CPU and wall time: the prompt's CPU
    time per token is the long prompt's (the 32-token prompt before decoding once
    overwrote it), the decode's is one step's."""
    clock = [0.0]

    def runner(path, threads):
        def feed(ids):
            clock[0] += 1e-3 * len(ids)
            return None

        return 1000, lambda: None, feed, lambda logits: 7

    monkeypatch.setattr(llm_worker, "tallow_runner", runner)
    monkeypatch.setattr(llm_worker.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(llm_worker.time, "process_time", lambda: clock[0])
    assert llm_worker.main(["tallow", "m.gguf", "1", "512", "16"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["prompt_cpu_ms"] == pytest.approx(1.0) and res["prompt_tps"] == pytest.approx(1000.0)
    assert res["decode_cpu_ms"] == pytest.approx(1.0) and res["decode_tps"] == pytest.approx(1000.0)
    assert res["first_tokens"] == [7] * 8
