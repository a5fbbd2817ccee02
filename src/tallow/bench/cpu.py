"""``tallow bench cpu``: the CPU lesson's experiments (candle's l03_bench), beside
NumPy and PyTorch measured in the same run.

1. n x n matmul, n = 256/512/1024, f32/f64/f16, default threads and 1 thread,
   GFLOPS at 2n^3, and an i-k-j loop without a blocked GEMM for reference;
2. 2048x2048 f32 element-wise ops (contiguous, strided, broadcast, copy, exp,
   relu, a view), default threads and 1 thread;
3. a 3-layer 256->256 ReLU network, batch 64, 200 forward passes, plain tensors
   and Var weights, two alternating rounds;
4. per-op overhead: 5000 chained adds of 1024-element f32 tensors, at 1 and 2 threads;
5. training steps (MLP and conv net) beside PyTorch at 1 and 2 threads
   (:mod:`tallow.bench.train`);
6. sentence embeddings (all-MiniLM-L6-v2) beside sentence-transformers and ONNX
   Runtime at 1 and 2 threads (:mod:`tallow.bench.embed`).
7. with ``--busy``, the thread policy's rows: the network (3) and the n = 1024
   f32 matmul at 1 and 2 threads, on the quiet machine and beside one competing
   CPU-bound process, with the 2-thread / 1-thread time ratio.

NumPy reference rows run with NumPy's BLAS on the row's thread count for the
call (tallow itself keeps BLAS on one thread and splits large products).

``--quick`` keeps every table and row kind but measures smaller sizes (matmul
n = 128, 256; 512x512 element-wise; 1000 chained adds; one round of 5 forward passes; one
training step per timing) with 3 repeats: a smoke run that finishes in seconds; its
embed rows encode 32 sentences without ONNX Runtime (``tallow bench embed`` runs
those rows in full).
"""

from __future__ import annotations

import numpy as np

import tallow as tl

from .common import (alternate, by_threads, competing, have_torch, load_average, ms, ratio, set_quick,
                     set_threads, steal_reported, table, with_blas_threads, write_json)
from .compile import bench_compile
from .embed import bench_embed
from .train import bench_train



def ikj_loop(a, b):
    """The textbook i-k-j loop (rows updated by axpy), no blocking, no BLAS."""
    n = a.shape[0]
    c = np.zeros((n, b.shape[1]), a.dtype)
    for i in range(n):
        ci = c[i]
        ai = a[i]
        for k in range(n):
            ci += ai[k] * b[k]
    return c


def bench_matmul(sizes, repeats, default_threads, quick):
    torch = have_torch()
    rows, results = [], []
    rng = np.random.default_rng(0)
    for n in sizes:
        for threads in (default_threads, 1):
            set_threads(threads)
            a32 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            b32 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
            cands = {}
            for name, dtype in (("f32", tl.f32), ("f64", tl.f64), ("f16", tl.f16)):
                ta = tl.Tensor(a32).to_dtype(dtype)
                tb = tl.Tensor(b32).to_dtype(dtype)
                cands["tallow " + name] = (lambda x, y: lambda: x.matmul(y))(ta, tb)
            cands["numpy f32"] = with_blas_threads(lambda: a32 @ b32, threads)
            if torch is not None:
                xa, xb = torch.from_numpy(a32), torch.from_numpy(b32)
                cands["torch f32"] = lambda: xa @ xb
                ha, hb = xa.half(), xb.half()
                cands["torch f16"] = lambda: ha @ hb
            t = alternate(cands, repeats)
            loop = None
            if threads == 1 and n <= (128 if quick else 512):
                loop = alternate({"loop": lambda: ikj_loop(a32, b32)}, 1)["loop"]
            gflops = 2 * n**3 / t["tallow f32"] / 1e9
            row = dict(n=n, threads=threads, **{k: ms(v) for k, v in t.items()},
                       gflops_f32=gflops, vs_numpy=ratio(t["numpy f32"], t["tallow f32"]),
                       loop_f32=ms(loop))
            results.append(row)
            rows.append([n, threads, ms(t["tallow f32"]), ms(t["tallow f64"]), ms(t["tallow f16"]),
                         gflops, ms(t["numpy f32"]), ms(t.get("torch f32")), ms(t.get("torch f16")),
                         ratio(t["numpy f32"], t["tallow f32"]), ms(loop)])
    print(table("matmul n x n (ms; speed vs numpy = numpy time / tallow time, f32)",
                ["n", "threads", "f32", "f64", "f16", "GFLOPS f32", "numpy f32", "torch f32",
                 "torch f16", "speed vs numpy", "i-k-j loop f32"], rows))
    return results


def bench_elementwise(repeats, default_threads, n=2048, number=3):
    torch = have_torch()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    ta, tb, tbias = tl.Tensor(a), tl.Tensor(b), tl.Tensor(bias)
    if torch is not None:
        xa, xb, xbias = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(bias)
    ops = [
        ("a + b, contiguous", lambda: ta + tb, lambda: a + b, lambda: xa + xb),
        ("a.t() + b.t(), strided", lambda: ta.t() + tb.t(), lambda: a.T + b.T, lambda: xa.t() + xb.t()),
        ("a.broadcast_add(bias)", lambda: ta.broadcast_add(tbias), lambda: a + bias, lambda: xa + xbias),
        ("a.t().contiguous(), a copy", lambda: ta.t().contiguous(), lambda: np.ascontiguousarray(a.T),
         lambda: xa.t().contiguous()),
        ("a.exp()", lambda: ta.exp(), lambda: np.exp(a), lambda: xa.exp()),
        ("a.relu()", lambda: ta.relu(), lambda: np.maximum(a, 0), lambda: xa.relu()),
        ("a.t(), a view", lambda: ta.t(), lambda: a.T, lambda: xa.t()),
    ]
    rows, results = [], []
    for threads in (default_threads, 1):
        set_threads(threads)
        for name, f_tl, f_np, f_torch in ops:
            cands = {"tallow": f_tl, "numpy": f_np}
            if torch is not None:
                cands["torch"] = f_torch
            t = alternate(cands, repeats, number=number)
            results.append(dict(op=name, threads=threads, **{k: ms(v) for k, v in t.items()}))
            rows.append([name, threads, ms(t["tallow"]), ms(t["numpy"]), ms(t.get("torch")),
                         ratio(t["numpy"], t["tallow"])])
    print(table(f"element-wise, {n}x{n} f32 (ms; speed vs numpy = numpy time / tallow time)",
                ["op", "threads", "tallow", "numpy", "torch", "speed vs numpy"], rows))
    return results


def _network(torch, repeats, rounds=2, passes=200):
    rng = np.random.default_rng(2)
    ws = [rng.uniform(-0.06, 0.06, (256, 256)).astype(np.float32) for _ in range(3)]
    bs = [rng.uniform(-0.06, 0.06, 256).astype(np.float32) for _ in range(3)]
    x = rng.standard_normal((64, 256)).astype(np.float32)
    plain = [(tl.Tensor(w), tl.Tensor(b)) for w, b in zip(ws, bs)]
    tracked = [(tl.Var(w), tl.Var(b)) for w, b in zip(ws, bs)]
    tx = tl.Tensor(x)

    def run_tallow(layers):
        def go():
            for _ in range(passes):
                h = tx
                for w, b in layers:
                    h = h.matmul(w.t()).broadcast_add(b).relu()
            return h
        return go

    cands = {"tallow plain": run_tallow(plain), "tallow Var": run_tallow(tracked)}
    if torch is not None:
        tp = [(torch.from_numpy(w), torch.from_numpy(b)) for w, b in zip(ws, bs)]
        tv = [(torch.from_numpy(w).clone().requires_grad_(), torch.from_numpy(b).clone().requires_grad_())
              for w, b in zip(ws, bs)]
        xt = torch.from_numpy(x)

        def run_torch(layers):
            def go():
                for _ in range(passes):
                    h = xt
                    for w, b in layers:
                        h = (h @ w.t() + b).relu()
                return h
            return go

        cands["torch plain"] = run_torch(tp)
        cands["torch requires_grad"] = run_torch(tv)
    out = []
    for r in range(rounds):
        out.append(alternate(cands, repeats))
    return out


def bench_network(repeats, default_threads, passes=200, rounds=2):
    torch = have_torch()
    rows, results = [], []
    for threads in (default_threads, 1):
        set_threads(threads)
        for r, t in enumerate(_network(torch, repeats, rounds=rounds, passes=passes), 1):
            results.append(dict(threads=threads, round=r, **{k: ms(v) for k, v in t.items()}))
            rows.append([threads, r, ms(t["tallow plain"]), ms(t["tallow Var"]),
                         ms(t.get("torch plain")), ms(t.get("torch requires_grad")),
                         ratio(t["tallow plain"], t.get("torch plain"))])
    print(table(f"3-layer 256->256 ReLU network, batch 64, {passes} forward passes (ms; time vs torch = tallow / torch)",
                ["threads", "round", "tallow plain", "tallow Var", "torch plain", "torch grad",
                 "time vs torch"], rows))
    return results


def bench_busy(repeats, passes=200, n=1024, thread_counts=(1, 2)):
    """The network and an n x n f32 matmul at 1 and 2 threads, quiet and beside one
    competing CPU-bound process: {state: {workload: {threads: ms}}}."""
    rng = np.random.default_rng(3)
    ws = [tl.Tensor(rng.uniform(-0.06, 0.06, (256, 256)).astype(np.float32)) for _ in range(3)]
    bs = [tl.Tensor(rng.uniform(-0.06, 0.06, 256).astype(np.float32)) for _ in range(3)]
    tx = tl.Tensor(rng.standard_normal((64, 256)).astype(np.float32))
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    ta, tb = tl.Tensor(a), tl.Tensor(b)

    def network():
        for _ in range(passes):
            h = tx
            for w, bias in zip(ws, bs):
                h = h.matmul(w.t()).broadcast_add(bias).relu()
        return h

    results, rows = {}, []
    for state in ("quiet", "busy"):
        with competing(state == "busy"):
            load = load_average()
            t_net = by_threads(network, thread_counts, repeats)
            t_mm = by_threads(lambda: ta.matmul(tb), thread_counts, repeats)
            t_np = alternate({t: with_blas_threads(lambda: a @ b, t) for t in thread_counts}, repeats)
        results[state] = {"load_average": load}
        for name, t in ((f"network, {passes} passes: tallow", t_net), (f"matmul {n} f32: tallow", t_mm),
                        (f"matmul {n} f32: numpy", t_np)):
            results[state][name] = {str(k): ms(v) for k, v in t.items()}
            rows.append([name, state, *[ms(t[k]) for k in thread_counts],
                         ratio(t[thread_counts[-1]], t[thread_counts[0]]), load])
    print(table("thread policy: quiet and beside one competing CPU-bound process (ms; "
                f"ratio = {thread_counts[-1]} threads / {thread_counts[0]} thread, lower is better)",
                ["workload", "machine", *[f"{k} thread(s)" for k in thread_counts], "ratio",
                 "load average"], rows))
    return results


def bench_overhead(repeats, chain=5000, threads=(1, 2)):
    torch = have_torch()
    x, y = tl.rand(1024), tl.rand(1024)
    nx, ny = x.numpy().copy(), y.numpy().copy()

    def run_tl():
        z = x
        for _ in range(chain):
            z = z + y
        return z

    def run_np():
        z = nx
        for _ in range(chain):
            z = z + ny
        return z

    cands = {"tallow": run_tl, "numpy": run_np}
    if torch is not None:
        tx, ty = torch.from_numpy(nx), torch.from_numpy(ny)

        def run_torch():
            z = tx
            for _ in range(chain):
                z = z + ty
            return z

        cands["torch"] = run_torch
    rows, results = [], []
    for n in threads:
        set_threads(n)
        t = alternate(cands, repeats)
        per = {k: v / chain * 1e6 for k, v in t.items()}
        r = ratio(per["tallow"], per.get("torch"))
        results.append(dict(threads=n, **per, time_vs_torch=r))
        rows.append([n, per["tallow"], per["numpy"], per.get("torch"), r])
    print(table(f"per-op overhead: {chain} chained adds of 1024 f32 (µs per op; time vs torch = tallow / torch)",
                ["threads", "tallow", "numpy", "torch eager", "time vs torch"], rows))
    return results


def run(args) -> int:
    quick = getattr(args, "quick", False)
    repeats = args.repeats or (3 if quick else 7)
    set_quick(quick)
    default_threads = tl.utils.get_num_threads()
    print(f"threads: {default_threads} ({tl.utils.num_threads_rule()}); "
          f"processor: {tl.cpu.info()['name']}")
    results = {"threads": default_threads}
    try:
        with steal_reported(results):
            results["overhead"] = bench_overhead(repeats, chain=1000 if quick else 5000)
            sizes = (128, 256) if quick else (256, 512, 1024)
            results["matmul"] = bench_matmul(sizes, repeats, default_threads, quick)
            results["elementwise"] = bench_elementwise(repeats, default_threads, n=512 if quick else 2048,
                                                       number=1 if quick else 3)
            results["network"] = bench_network(repeats, default_threads, passes=5 if quick else 200,
                                               rounds=1 if quick else 2)
            results["train"] = bench_train(repeats, number=1 if quick else 5)
            results["compile"] = bench_compile(repeats, number=1 if quick else 5)
            if getattr(args, "busy", False):
                results["busy"] = bench_busy(repeats, passes=50 if quick else 200)
            results["embed"] = (bench_embed(n=32, repeats=1, onnx=False) if quick
                                else bench_embed(repeats=min(repeats, 5)))
    finally:
        set_threads(default_threads)
    write_json(getattr(args, "json", None), results)
    return 0
