"""``tl.compile`` beside eager tallow and PyTorch eager, at 1 and 2 threads
(``tallow bench cpu``'s ``compile`` rows, and ``tallow bench compile`` on its own).

* the per-op chain: 5000 chained adds of two 1024-element f32 tensors;
* the MLP training step of ``bench/train.py`` (3 layers 256, batch 64,
  cross-entropy, forward + backward + SGD).

Each compiled function is recorded (and its kernels built) before timing; the
candidates then take turns and the medians are reported, with compiled time /
PyTorch eager time.
"""

from __future__ import annotations

import tallow as tl

from .common import alternate, have_torch, ratio, run_suite, set_threads, table
from .train import tallow_steps, torch_steps

CHAIN = 5000


def _chain_candidates(torch):
    x, y = tl.rand(1024), tl.rand(1024)

    def chain(a, b):
        z = a
        for _ in range(CHAIN):
            z = z + b
        return z

    compiled = tl.compile(chain)
    cands = {"eager": lambda: chain(x, y), "compiled": lambda: compiled(x, y)}
    if torch is not None:
        tx, ty = torch.from_numpy(x.numpy().copy()), torch.from_numpy(y.numpy().copy())
        cands["torch"] = lambda: chain(tx, ty)
    return cands, compiled


def _mlp_candidates(torch):
    eager = tallow_steps()["mlp"]
    compiled = tl.compile(tallow_steps()["mlp"])
    cands = {"eager": eager, "compiled": compiled}
    if torch is not None:
        cands["torch"] = torch_steps(torch)["mlp"]
    return cands, compiled


def bench_compile(repeats, threads=(1, 2), number=5):
    torch = have_torch()
    rows, results = [], []
    # Each workload is built and recorded once (a recording does not depend on the
    # thread count), then timed at each thread count.
    for label, make, per in (
        (f"{CHAIN} chained adds of 1024 f32 (µs per op)", _chain_candidates, CHAIN),
        ("MLP 3x256, batch 64, train step (ms)", _mlp_candidates, None),
    ):
        cands, compiled = make(torch)
        cands["compiled"]()  # records, builds the fused kernels
        for n in threads:
            set_threads(n)
            t = alternate(cands, repeats, number=1 if per else number)
            scale = (1e6 / per) if per else 1e3
            vals = {k: v * scale for k, v in t.items()}
            r = ratio(t["compiled"], t.get("torch"))
            results.append(dict(workload=label, threads=n, eager=vals["eager"],
                                compiled=vals["compiled"], torch=vals.get("torch"),
                                compiled_vs_torch=r, stats=compiled.stats()))
            rows.append([label, n, vals["eager"], vals["compiled"], vals.get("torch"),
                         ratio(t["compiled"], t["eager"]), r])
    print(table("tl.compile (time vs torch = compiled / torch eager, below 1 is faster)",
                ["workload", "threads", "eager", "compiled", "torch eager", "compiled / eager",
                 "time vs torch"], rows))
    return results


def run(args) -> int:
    """``tallow bench compile``: the compile rows alone."""
    return run_suite(args, "compile", lambda repeats, quick: bench_compile(repeats, number=3 if quick else 5))
