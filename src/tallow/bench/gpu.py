"""``tallow bench gpu``: GPU throughput beside NumPy and PyTorch in the same run.

1. n x n matmul, n = 256 ... 2048, f32 and f16 on the GPU (each call waits for
   its result with ``synchronize()``), GFLOPS at 2n^3, beside NumPy f32 and
   PyTorch f32 / f16 (on CUDA when PyTorch has it, else on the CPU);
2. element-wise add of 16M f32: effective bandwidth (two reads, one write);
3. per-op encode cost: 5000 chained adds of 1024 f32, with the queue deferred
   (nothing executes while encoding: the CPU cost of an op) and with the default
   submission every 50 ops;
4. quantized matmul ``x @ W^T`` with W 4096 x 4096 (``--quick``: 1024) in Q4_0,
   Q8_0, Q4K and Q6K blocks, m = 1 (matrix-vector: an LLM's decode step) and m = 32,
   beside the f32 GPU matmul of the same size, NumPy's f32 product with the
   dequantized weight and tallow's CPU quantized matmul (``prepare_weight``),
   medians of alternating repeats;
5. ``--plot FILE.png``: GFLOPS vs n, and total time vs ops-per-submit.
"""

from __future__ import annotations

import time

import numpy as np

import tallow as tl

from .common import alternate, have_torch, ratio, table, save_figure, write_json
from .queue import SETTINGS, plot_queue, sweep


def _torch_device(torch):
    if torch is not None and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _sync_torch(torch, where):
    if where == "cuda":
        torch.cuda.synchronize()


def bench_matmul(dev, sizes, repeats, cpu_adapter):
    torch = have_torch()
    where = _torch_device(torch)
    rng = np.random.default_rng(0)
    rows, results = [], []
    for n in sizes:
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        cands = {}
        for name, dtype in (("f32", tl.f32), ("f16", tl.f16)):
            ga = tl.Tensor(a, device=dev).to_dtype(dtype)
            gb = tl.Tensor(b, device=dev).to_dtype(dtype)

            def run(x=ga, y=gb):
                x.matmul(y)
                dev.synchronize()

            cands["gpu " + name] = run
        cands["numpy f32"] = lambda: a @ b
        if torch is not None:
            ta, tb = torch.from_numpy(a).to(where), torch.from_numpy(b).to(where)
            ha, hb = ta.half(), tb.half()

            def tf32():
                ta @ tb
                _sync_torch(torch, where)

            def tf16():
                ha @ hb
                _sync_torch(torch, where)

            cands[f"torch f32 ({where})"] = tf32
            cands[f"torch f16 ({where})"] = tf16
        reps = repeats if (n <= 512 or not cpu_adapter) else 1
        t = alternate(cands, reps)
        gf = {k: 2 * n ** 3 / v / 1e9 for k, v in t.items()}
        tk32, tk16 = f"torch f32 ({where})", f"torch f16 ({where})"
        results.append(dict(n=n, **{f"{k} GFLOPS": v for k, v in gf.items()}))
        rows.append([n, gf["gpu f32"], gf["gpu f16"], gf["numpy f32"], gf.get(tk32), gf.get(tk16),
                     ratio(gf["gpu f32"], gf.get(tk32)), t["gpu f32"] * 1e3])
    print(table("matmul n x n (GFLOPS = 2n^3 / time; vs torch = gpu f32 / torch f32)",
                ["n", "gpu f32", "gpu f16", "numpy f32", f"torch f32 ({where})",
                 f"torch f16 ({where})", "vs torch f32", "gpu f32 ms"], rows))
    return results


def bench_elementwise(dev, n, repeats):
    torch = have_torch()
    where = _torch_device(torch)
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    b = a[::-1].copy()  # every candidate reads two arrays, as the bandwidth counts
    ga, gb = tl.Tensor(a, device=dev), tl.Tensor(b, device=dev)
    chain = 10

    def gpu_add():
        for _ in range(chain):
            ga.add(gb)
        dev.synchronize()

    def np_add():
        for _ in range(chain):
            np.add(a, b)

    cands = {"gpu add": gpu_add, "numpy add": np_add}
    if torch is not None:
        ta, tb = torch.from_numpy(a).to(where), torch.from_numpy(b).to(where)

        def t_add():
            for _ in range(chain):
                ta + tb
            _sync_torch(torch, where)

        cands[f"torch add ({where})"] = t_add
    t = alternate(cands, repeats)
    gbs = {k: 3 * 4 * n * chain / v / 1e9 for k, v in t.items()}
    print(table(f"element-wise add of {n} f32 (GB/s moved: 2 reads + 1 write per element)",
                list(gbs), [[round(v, 2) for v in gbs.values()]]))
    return gbs


def bench_encode(dev, steps=5000):
    cmd = dev._state.commands
    old = cmd.per_submit
    res = {}
    try:
        for label, setting in (("deferred (nothing runs while encoding)", 10 ** 9),
                               ("every 50 ops (default)", 50)):
            cmd.set_ops_per_submit(setting)
            x = tl.zeros((1024,), device=dev)
            y = tl.ones((1024,), device=dev)
            for _ in range(50):
                x = x.add(y)
            dev.synchronize()
            best = None
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(steps):
                    x = x.add(y)
                t1 = time.perf_counter()
                dev.synchronize()
                best = (t1 - t0) if best is None else min(best, t1 - t0)
            res[label] = best / steps * 1e6
    finally:
        cmd.set_ops_per_submit(old)
    print(table(f"per-op encode cost: {steps} chained adds of 1024 f32 (µs per op, CPU side, best of 3)",
                ["queue", "µs/op"], [[k, v] for k, v in res.items()]))
    return res


QUANT_TYPES = ("Q4_0", "Q8_0", "Q4K", "Q6K")


def bench_quantized(dev, size, repeats, cpu_adapter):
    """x (m, size) @ W(size, size)^T for W in GGML blocks on the GPU, m = 1 and 32."""
    from tallow import dtype as dt
    from tallow.backends.gpu import quantized as oq
    from tallow.quantized import ggml_type, prepare_weight

    state = dev._state
    rng = np.random.default_rng(2)
    w = rng.standard_normal((size, size)).astype(np.float32)
    gw_t = tl.Tensor(w, device=dev).t()
    weights = {}
    for name in QUANT_TYPES:
        t = ggml_type(name)
        raw = t.quantize(w).reshape(-1)
        weights[name] = (state.from_numpy(raw, dt.u8), t.dequantize(raw, size * size).reshape(size, size),
                         prepare_weight(raw, t, size, size))
    results = []
    for m in (1, 32):
        x = rng.standard_normal((m, size)).astype(np.float32)
        gx = tl.Tensor(x, device=dev)
        gpu, cpu = {}, {}
        for name, (raw_s, wd, prep) in weights.items():
            def gq(raw_s=raw_s, name=name):
                oq.qmatmul_t(gx._storage, gx.layout, raw_s, name, size, size)
                dev.synchronize()

            gpu[f"gpu {name}"] = gq
            cpu[f"numpy f32 ({name} dequantized)"] = lambda wd=wd: x @ wd.T
            cpu[f"cpu {name} matmul_t"] = lambda prep=prep: prep.matmul_t(x)

        def gf32():
            gx.matmul(gw_t)
            dev.synchronize()

        gpu["gpu f32"] = gf32
        # GPU and CPU candidates alternate in separate groups: on a CPU adapter
        # both run on the same cores, and BLAS threads spinning after a NumPy call
        # would slow the GPU candidate that follows.
        t = alternate(gpu, repeats)
        t.update(alternate(cpu, repeats))
        for name in QUANT_TYPES:
            results.append(dict(type=name, m=m, gpu_ms=t[f"gpu {name}"] * 1e3, gpu_f32_ms=t["gpu f32"] * 1e3,
                                numpy_f32_ms=t[f"numpy f32 ({name} dequantized)"] * 1e3,
                                cpu_quantized_ms=t[f"cpu {name} matmul_t"] * 1e3))
    rows = [[r["type"], r["m"], r["gpu_ms"], r["gpu_f32_ms"], ratio(r["gpu_f32_ms"], r["gpu_ms"]),
             r["numpy_f32_ms"], r["cpu_quantized_ms"]] for r in results]
    where = " (lavapipe: the 'GPU' is this machine's CPU)" if cpu_adapter else ""
    print(table(f"quantized matmul x (m, {size}) @ W({size}, {size})^T, ms{where}; "
                "speedup = gpu f32 / gpu quantized",
                ["W", "m", "gpu quantized", "gpu f32", "speedup", "numpy f32", "cpu quantized"], rows))
    return results


def run(args) -> int:
    if not tl.utils.gpu_is_available():
        print("no WebGPU adapter: nothing to measure")
        return 0
    quick = getattr(args, "quick", False)
    repeats = args.repeats or 3
    dev = tl.Device.gpu(0)
    info = dev.info()
    cpu_adapter = info.get("adapter_type") == "CPU"
    print(f"adapter: {info['adapter']} ({info['adapter_type']}, {info['driver']})")
    if cpu_adapter:
        print("note: a CPU adapter (lavapipe) runs the 'GPU' on this machine's CPU cores, and "
              "its queue runs one submission at a time (a submit returns when the previous "
              "one has finished)")
    results = {"adapter": info["adapter"]}
    results["encode_us_per_op"] = bench_encode(dev, 2000 if quick else 5000)
    sizes = (256, 512) if quick else (256, 512, 1024, 2048)
    results["matmul"] = bench_matmul(dev, sizes, repeats, cpu_adapter)
    results["elementwise_gbs"] = bench_elementwise(dev, (1 << 22) if quick else (1 << 24), repeats)
    results["quantized"] = bench_quantized(dev, 1024 if quick else 4096, repeats, cpu_adapter)
    if getattr(args, "plot", None):
        cases = [(1024, 1000 if quick else 5000, False), (1 << 20, 50 if quick else 200, True)]
        qres = sweep(dev, cases, SETTINGS, 1)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        ns = [r["n"] for r in results["matmul"]]
        for key in [k for k in results["matmul"][0] if k.endswith("GFLOPS")]:
            ax1.plot(ns, [r.get(key) for r in results["matmul"]], marker="o", label=key[:-7])
        ax1.set_xscale("log", base=2)
        ax1.set_yscale("log")
        ax1.set_xlabel("n")
        ax1.set_ylabel("GFLOPS")
        ax1.set_title(f"matmul n x n on {info['adapter_name']}")
        ax1.legend(fontsize=7)
        plot_queue(ax2, qres, SETTINGS, cases)
        fig.tight_layout()
        save_figure(fig, args.plot)
        print(f"plot written to {args.plot}")
    write_json(getattr(args, "json", None), results)
    return 0
