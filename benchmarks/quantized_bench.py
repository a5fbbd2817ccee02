"""Quantized matmul timings: x @ W.T for a 4096 x 4096 weight, batch 1 and 32.

Compares, per GGML type:

* ``f32``      plain NumPy ``x @ W.T`` on the float32 weight (the baseline),
               ``f32/1t`` the same with BLAS held to one thread;
* ``int``      ``PreparedWeight(layout="int")``: exact integer block sums,
               int8/int16 weight planes cast to float32 a few groups at a time;
* ``f32pl``    ``layout="f32"``: the same with float32 integer planes;
* ``deq``      ``layout="dequantized"``: activations quantized, one float32 GEMM
               on the cached dequantized weight;
* ``deq/call`` ``matmul_t_dequantized``: dequantize the weight on every call.

Each repeat visits the variants round-robin, so that load from other
processes affects all alike.  A visit waits ``--pause`` seconds (after a
multi-threaded BLAS call OpenBLAS's idle workers spin for about 0.1 s and
would slow whatever runs next on the same cores), then makes three calls:
the first is reported as "idle" (data and cores gone cold, as for one layer
of a large model), the median of the other two as "hot" (the same weight
again at once).  The table gives medians over repeats of both.
Run:  PYTHONPATH=src python benchmarks/quantized_bench.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import ThreadpoolController

from tallow.quantized import ggml_type
from tallow.backends.cpu.quantized.vec_dot import matmul_t_dequantized, prepare_weight
from tallow.utils import get_num_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--types", default="Q4_0,Q8_0,Q4K,Q6K")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=get_num_threads())
    ap.add_argument("--pause", type=float, default=0.2, help="seconds of idle before each timed call")
    args = ap.parse_args()

    n = k = args.size
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k), dtype=np.float32)
    blas = ThreadpoolController()
    print(f"weight {n}x{k}, {args.threads} threads, median of {args.repeats} round-robin repeats (ms), "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'type':6} {'batch':>5} {'f32':>8} {'f32/1t':>8} {'int':>8} {'f32pl':>8} {'deq':>8} {'deq/call':>9}"
          f"   stat    memory MiB: raw / int / f32pl / deq")
    for name in args.types.split(","):
        t = ggml_type(name)
        t0 = time.perf_counter()
        raw = t.quantize(w)
        qtime = time.perf_counter() - t0
        prepared = {lay: prepare_weight(raw, name, n, k, layout=lay) for lay in ("int", "f32", "dequantized")}
        mem = " / ".join(f"{v:.1f}" for v in [raw.nbytes / 2**20] + [p.nbytes / 2**20 for p in prepared.values()])
        for m in (int(b) for b in args.batches.split(",")):
            x = rng.standard_normal((m, k), dtype=np.float32)
            def f32_one_thread():
                with blas.limit(limits=1, user_api="blas"):
                    return x @ w.T

            variants = {
                "f32": lambda: x @ w.T,
                "f32/1t": f32_one_thread,
                "int": lambda: prepared["int"].matmul_t(x, num_threads=args.threads),
                "f32pl": lambda: prepared["f32"].matmul_t(x, num_threads=args.threads),
                "deq": lambda: prepared["dequantized"].matmul_t(x),
                "deq/call": lambda: matmul_t_dequantized(x, raw, name, n, k),
            }
            idle = {key: [] for key in variants}
            hot = {key: [] for key in variants}
            for f in variants.values():
                f()  # warm up: page in, allocate the pools
            for _ in range(args.repeats):
                for key, f in variants.items():
                    time.sleep(args.pause)
                    calls = []
                    for _ in range(3):
                        s = time.perf_counter()
                        f()
                        calls.append(time.perf_counter() - s)
                    idle[key].append(calls[0])
                    hot[key].append(np.median(calls[1:]))
            for label, times in (("hot", hot), ("idle", idle)):
                v = {key: 1e3 * float(np.median(t)) for key, t in times.items()}
                print(f"{name:6} {m:5d} {v['f32']:8.2f} {v['f32/1t']:8.2f} {v['int']:8.2f} {v['f32pl']:8.2f} "
                      f"{v['deq']:8.2f} {v['deq/call']:9.2f}   {label:6}  {mem}")
        print(f"{name}: quantizing the {n}x{k} weight took {qtime:.1f} s")


if __name__ == "__main__":
    main()
