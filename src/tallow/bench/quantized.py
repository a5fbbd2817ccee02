"""``tallow bench quantized``: QMatMul against f32 matmul, per GGML format, in the same run.

``x @ W.T`` for a 4096 x 4096 weight, batch 1 (a matrix-vector product, the
decoding step of a language model) and batch 32, milliseconds per call:

* ``f32``: NumPy (its BLAS) on the f32 weight: the reference of every ratio;
* ``numba``: ``QMatMul`` on the CPU with the compiled kernel (ggml's semantics:
  activations quantized to the dot type, exact integer block sums);
* ``numpy``: the same product by the NumPy fallback (``TALLOW_NO_NUMBA=1``);
* ``dequantized``: ``QMatMul(qt, dequantize=True)`` (``TALLOW_DEQUANTIZE_ALL=1``):
  the dequantized f32 weight, multiplied by BLAS;
* ``deq/call`` (full run only): dequantize the blocks at every call, then multiply;
* ``hot``: ``f32`` and ``numba`` again, each alone and back to back; numba after
  a few seconds without BLAS calls: OpenBLAS's worker threads keep the second
  core busy for a second or two after a threaded product, and a threaded
  kernel run meanwhile (the alternating ``numba`` column) gets little from its
  second thread.

A decoding-like run (full run only) multiplies by 16 different weights in
turn (1 GiB as f32, more than the caches), as a language model's decoding step
reads each weight once.  The candidates take turns (medians of alternating repeats, see
``bench.common``), so all see the same machine state; ratios are against
``f32`` at the same batch.  OpenBLAS's worker threads spin for a while after a
threaded product, so the turn order puts numba after the NumPy path, whose
BLAS calls are single-threaded (see the comment in ``bench_qmatmul``).  Memory is what each path holds per weight: the GGML
blocks, the numba tiles, the NumPy path's integer planes, the f32 matrix.  The
numba kernel's first-use cost (cold compile, and loading numba's on-disk
cache) is measured in fresh processes.  With a GPU and its quantized kernels
(``backends/gpu/quantized``) the GPU ``QMatMul`` is timed as well.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import alternate, ms, ratio, table, write_json

FORMATS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2K", "Q3K", "Q4K", "Q5K", "Q6K")
QUICK_FORMATS = ("Q4_0", "Q8_0", "Q4K", "Q6K")
SIZE = 4096  # the weight is SIZE x SIZE
BLAS_IDLE_S = 3.0  # wait for OpenBLAS's spinning workers before timing numba alone
MIB = 1 << 20


def _with_env(key, value, fn):
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def bench_qmatmul(formats=QUICK_FORMATS, n=4096, k=4096, batches=(1, 32), repeats=5,
                  deq_per_call=False, quiet=False, seed=0, blas_idle=None) -> dict:
    """{format: {"memory": {...}, "batch": {b: {candidate: seconds}}}}."""
    import tallow as tl
    from tallow.backends.cpu.quantized import fast
    from tallow.quantized import QMatMul, ggml_type

    blas_idle = BLAS_IDLE_S if blas_idle is None else blas_idle
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    xs = {b: rng.standard_normal((b, k)).astype(np.float32) for b in batches}
    results = {}
    for fmt in formats:
        t = ggml_type(fmt)
        q = tl.Tensor(w).quantize(fmt)
        raw = q.numpy_bytes()
        paths = {}
        if QMatMul(q, dequantize=False).path == "native":
            paths["native"] = QMatMul(q, dequantize=False)
        if fast.available():
            paths["numba"] = _with_env("TALLOW_NO_NATIVE", "1", lambda: QMatMul(q, dequantize=False))
        paths["numpy"] = _with_env("TALLOW_NO_NATIVE", "1", lambda: _with_env(
            "TALLOW_NO_NUMBA", "1", lambda: QMatMul(q, dequantize=False)))
        paths["dequantized"] = QMatMul(q, dequantize=True)
        memory = {"blocks": q.nbytes}
        for name, qm in paths.items():
            qm.forward(tl.Tensor(xs[batches[0]]))  # prepares the weight once
            memory[name] = qm.nbytes
        memory["f32"] = w.nbytes
        entry = {"memory": memory, "batch": {}, "shape": (n, k)}
        for b in batches:
            x = xs[b]
            xt = tl.Tensor(x)
            # Cyclic order (alternate() rotates it): the multi-threaded BLAS products
            # (f32, dequantized, deq/call) first, then the NumPy path (BLAS held to one
            # thread), then numba: OpenBLAS's workers keep spinning for a while after a
            # threaded product, and a threaded kernel started right after one would
            # share the second core with them.
            cands = {"f32": lambda x=x: x @ w.T}
            cands["dequantized"] = lambda xt=xt: paths["dequantized"].forward(xt)
            if deq_per_call:
                cands["deq/call"] = lambda x=x: x @ t.dequantize(raw, n * k).reshape(n, k).T
            for name in ("numpy", "numba", "native"):
                if name in paths:
                    cands[name] = lambda qm=paths[name], xt=xt: qm.forward(xt)
            entry["batch"][b] = alternate(cands, repeats=repeats)
            # f32 alone, called back to back (its data stays in the caches).
            entry["batch"][b]["f32 hot"] = alternate({"f32": cands["f32"]}, repeats=repeats)["f32"]
        if "numba" in paths and blas_idle:
            # numba alone, once OpenBLAS's workers have gone idle: after a threaded
            # product they keep the second core busy for a second or two, and a
            # threaded kernel run meanwhile gains nothing from its second thread.
            time.sleep(blas_idle)
            for b in batches:
                xt = tl.Tensor(xs[b])
                entry["batch"][b]["numba hot"] = alternate(
                    {"numba": lambda xt=xt: paths["numba"].forward(xt)}, repeats=repeats)["numba"]
            if not quiet:
                r = entry["batch"][b]
                line = ", ".join(f"{c} {ms(s):.2f} ms" for c, s in r.items())
                print(f"  {fmt} batch {b}: {line}", flush=True)
        results[fmt] = entry
        del q, paths
    return results


def bench_stream(formats=("Q4_0", "Q8_0"), count=16, n=4096, k=4096, repeats=5, quiet=False, seed=1,
                 blas_idle=None) -> dict:
    """Decoding-like: one matrix-vector product with each of ``count`` different weights in turn.

    16 weights of 4096 x 4096 are 1 GiB as f32, more than the caches hold, so every
    product reads its weight from memory, as a language model's decoding step does.
    Milliseconds per product: f32 and numba alternating, then each alone (numba once
    OpenBLAS's workers are idle).
    """
    import tallow as tl
    from tallow.backends.cpu.quantized import fast
    from tallow.quantized import QMatMul

    if not fast.available():
        return {"skipped": "numba is not available"}
    blas_idle = BLAS_IDLE_S if blas_idle is None else blas_idle
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((n, k), dtype=np.float32) for _ in range(count)]
    x = rng.standard_normal((1, k)).astype(np.float32)
    xt = tl.Tensor(x)
    out = {"count": count, "f32_bytes": count * n * k * 4}

    def f32():
        for w in ws:
            x @ w.T

    for fmt in formats:
        qms = [QMatMul(tl.Tensor(w).quantize(fmt), dequantize=False) for w in ws]
        for qm in qms:
            qm.forward(xt)

        def numba(qms=qms):
            for qm in qms:
                qm.forward(xt)

        r = {c: s / count for c, s in alternate({"f32": f32, "numba": numba}, repeats=repeats).items()}
        r["f32 alone"] = alternate({"f32": f32}, repeats=repeats)["f32"] / count
        time.sleep(blas_idle)
        r["numba alone"] = alternate({"numba": numba}, repeats=repeats)["numba"] / count
        r["numba_bytes"] = sum(qm.nbytes for qm in qms)
        out[fmt] = r
        if not quiet:
            print(f"  stream {fmt}: " + ", ".join(f"{c} {ms(v):.2f} ms" for c, v in r.items() if "bytes" not in c),
                  flush=True)
        del qms
    return out


def bench_first_use() -> dict:
    """Seconds to compile the numba kernel cold, and to load it from numba's cache, in fresh processes."""
    code = ("import time; t=time.perf_counter(); from tallow.backends.cpu.quantized import fast; ok=fast.available(); "
            "print(ok, time.perf_counter()-t, fast.status()['compile_seconds'])")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        env.pop("TALLOW_NO_NUMBA", None)
        for label in ("cold", "cached"):
            try:
                p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   timeout=300)
                ok, total, kernel = p.stdout.split()
            except (subprocess.SubprocessError, ValueError):
                return {"error": "could not run the first-use probe"}
            if ok != "True":
                return {"error": "numba is not available"}
            out[label] = {"import_and_kernel": float(total), "kernel": float(kernel)}
    return out


def bench_gpu(formats=QUICK_FORMATS, n=4096, k=4096, batches=(1, 32), repeats=5, quiet=False, seed=0):
    """GPU QMatMul (the GPU quantized kernels) and the GPU f32 matmul, or a skip without an adapter."""
    import tallow as tl
    from tallow.quantized import QMatMul, ggml_type

    if not tl.utils.gpu_is_available():
        return {"skipped": "no WebGPU adapter"}
    dev = tl.Device.gpu(0)
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    wg = tl.Tensor(w, device=dev)
    out = {}
    for fmt in formats:
        if dev._state.qmatmul_path(ggml_type(fmt)) is None:
            continue
        qm = QMatMul(tl.Tensor(w).quantize(fmt).to_device(dev), dequantize=False)
        out[fmt] = {}
        for b in batches:
            xg = tl.Tensor(rng.standard_normal((b, k)).astype(np.float32), device=dev)

            def run_q(qm=qm, xg=xg):
                qm.forward(xg)
                dev.synchronize()

            def run_f(xg=xg):
                xg.matmul(wg.t())
                dev.synchronize()

            out[fmt][b] = alternate({"gpu f32": run_f, "gpu qmatmul": run_q}, repeats=repeats)
            if not quiet:
                r = out[fmt][b]
                print(f"  gpu {fmt} batch {b}: " + ", ".join(f"{c} {ms(s):.2f} ms" for c, s in r.items()),
                      flush=True)
    return out


def _tables(res, batches) -> str:
    cand = ["native", "numba", "numpy", "dequantized", "deq/call"]
    rows = []
    for fmt, e in res.items():
        for b in batches:
            r = e["batch"][b]
            row = [fmt, b, ms(r["f32"])]
            for c in cand:
                row += [ms(r.get(c)), ratio(r.get(c), r["f32"])]
            row += [ms(r.get("f32 hot")), ms(r.get("numba hot")), ratio(r.get("numba hot"), r.get("f32 hot"))]
            rows.append(row)
    head = ["format", "batch", "f32 ms"]
    for c in cand:
        head += [f"{c} ms", "x f32"]
    head += ["hot: f32", "numba", "x f32"]
    keep = [i for i in range(len(head)) if any(row[i] is not None for row in rows)]
    n, k = next(iter(res.values()))["shape"] if res else (SIZE, SIZE)
    t1 = table(f"x @ W.T, W {n} x {k} (median ms; 'x f32' = time / f32 time, same run)",
               [head[i] for i in keep], [[row[i] for i in keep] for row in rows])
    mem_rows = []
    for fmt, e in res.items():
        m = e["memory"]
        mem_rows.append([fmt] + [None if m.get(c) is None else m[c] / MIB
                                 for c in ("blocks", "native", "numba", "numpy", "dequantized", "f32")])
    t2 = table("memory held (MiB)", ["format", "blocks", "native", "numba", "numpy", "dequantized", "f32"], mem_rows)
    return t1 + "\n\n" + t2


def run(args) -> int:
    import tallow as tl
    from tallow.backends.cpu.quantized import fast

    quick = bool(getattr(args, "quick", False))
    repeats = getattr(args, "repeats", None) or (3 if quick else 7)
    formats = QUICK_FORMATS if quick else FORMATS
    batches = (1, 32)
    st = fast.status()
    print(f"threads: {tl.utils.get_num_threads()} ({tl.utils.num_threads_rule()}); numba kernel: "
          f"{'yes' if st['numba'] else 'no (' + str(st['error'] or 'TALLOW_NO_NUMBA') + ')'}; "
          f"medians of {repeats} alternating repeats")
    first = bench_first_use() if st["numba"] else {"error": "numba is not available"}
    if "error" in first:
        print(f"numba first use: {first['error']}")
    else:
        print(f"numba first use: cold compile {first['cold']['kernel']:.2f} s, from its disk cache "
              f"{first['cached']['kernel']:.2f} s (plus {first['cached']['import_and_kernel'] - first['cached']['kernel']:.2f} s "
              "to import tallow.quantized and numba)")
    res = bench_qmatmul(formats, n=SIZE, k=SIZE, repeats=repeats, batches=batches, deq_per_call=not quick)
    print(_tables(res, batches))
    stream = None
    if not quick:
        stream = bench_stream(n=SIZE, k=SIZE, repeats=min(repeats, 5))
        if "skipped" not in stream:
            rows = [[fmt, ms(r["f32"]), ms(r["numba"]), ratio(r["numba"], r["f32"]), ms(r["f32 alone"]),
                     ms(r["numba alone"]), ratio(r["numba alone"], r["f32 alone"])]
                    for fmt, r in stream.items() if isinstance(r, dict)]
            print(table(f"decoding-like: batch 1 over {stream['count']} different {SIZE} x {SIZE} weights in turn "
                        f"({stream['f32_bytes'] / (1 << 30):.1f} GiB as f32), ms per product",
                        ["format", "f32", "numba", "x f32", "alone: f32", "numba", "x f32"], rows))
    gpu = bench_gpu(formats, n=SIZE, k=SIZE, repeats=repeats, batches=batches)
    if "skipped" in gpu:
        print(f"gpu: skipped ({gpu['skipped']})")
    else:
        rows = [[fmt, b, ms(r["gpu f32"]), ms(r["gpu qmatmul"]), ratio(r["gpu qmatmul"], r["gpu f32"])]
                for fmt, per in gpu.items() for b, r in per.items()]
        cpu_adapter = tl.Device.gpu(0).info().get("adapter_type") == "CPU"
        where = " (lavapipe: the 'GPU' is this machine's CPU)" if cpu_adapter else ""
        print(table(f"GPU x @ W.T (median ms, synchronized){where}", ["format", "batch", "f32 ms", "qmatmul ms", "x f32"],
                    rows))
    write_json(getattr(args, "json", None), {"quantized": {
        "threads": tl.utils.get_num_threads(), "repeats": repeats, "first_use": first,
        "cpu": {fmt: {"memory_bytes": e["memory"],
                      "seconds": {str(b): r for b, r in e["batch"].items()}} for fmt, e in res.items()},
        "stream": stream, "gpu": gpu}})
    return 0
