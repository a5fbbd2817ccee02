"""``tallow bench queue``: the seed's command-queue experiment (candle's
metal_queue) on the GPU that is present.

For each ops-per-submit setting (unset -> 50, "1", "0", "10", "1000", "abc"),
``x = x + y`` is encoded ``steps`` times and timed in three parts: the encoding
loop itself, ``synchronize()`` and the readback (``to_vec1``), for 500 adds of
1M-element f32 tensors (once reading back directly, once synchronizing first)
and for 5000 adds of 1024-element ones. Settings take turns over the rounds
(medians are reported), after an untimed warm-up chain compiles the kernels.

The settings go through the same parser as ``TALLOW_GPU_OPS_PER_SUBMIT`` (so
"abc" warns and falls back to 50, and 0 means every op), applied to the running
device rather than in a new process per setting, which would pay the first-use
compiles again each time.
"""

from __future__ import annotations

import statistics
import time
import warnings


import tallow as tl

from .common import table, save_figure, write_json

SETTINGS = (None, "1", "0", "10", "1000", "abc")


def _label(setting):
    return "unset" if setting is None else repr(setting)


def chain(dev, n, steps, sync_first):
    """(encode s, synchronize s, readback s, x[0]) for ``steps`` chained adds."""
    x = tl.zeros((n,), device=dev)
    y = tl.ones((n,), device=dev)
    dev.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        x = x.add(y)
    t1 = time.perf_counter()
    if sync_first:
        dev.synchronize()
    t2 = time.perf_counter()
    v = x.to_vec1()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, v[0]


def sweep(dev, cases, settings=SETTINGS, rounds=2):
    """{(setting, case): [encode, sync, read, total] medians} over ``rounds``."""
    cmd = dev._state.commands
    old = cmd.per_submit
    raw = {}
    try:
        for r in range(rounds):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for setting in order:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cmd.set_ops_per_submit(setting)
                for case in cases:
                    n, steps, sync_first = case
                    enc, syn, read, x0 = chain(dev, n, steps, sync_first)
                    if x0 != float(steps):
                        raise AssertionError(f"queue bench: x[0] = {x0}, expected {steps}")
                    raw.setdefault((setting, case), []).append((enc, syn, read, enc + syn + read))
    finally:
        cmd.set_ops_per_submit(old)
    return {k: [statistics.median(col) for col in zip(*v)] for k, v in raw.items()}


def plot_queue(ax, res, settings, cases):
    xs = list(range(len(settings)))
    for case in cases:
        n, steps, sync_first = case
        ys = [res[(s, case)][3] * 1e3 for s in settings]
        ax.plot(xs, ys, marker="o", label=f"{steps} adds of {n} f32" + (" (sync first)" if sync_first else ""))
    ax.set_xticks(xs, [_label(s) for s in settings])
    ax.set_xlabel("TALLOW_GPU_OPS_PER_SUBMIT")
    ax.set_ylabel("total ms (encode + synchronize + readback)")
    ax.set_yscale("log")
    ax.set_title("queue: total time vs ops per submit")
    ax.legend(fontsize=7)


def run(args) -> int:
    if not tl.utils.gpu_is_available():
        print("no WebGPU adapter: nothing to measure")
        return 0
    quick = getattr(args, "quick", False)
    rounds = args.repeats or (1 if quick else 2)
    dev = tl.Device.gpu(0)
    info = dev.info()
    print(f"adapter: {info['adapter']} ({info['adapter_type']})")
    big = 1 << 20
    cases = [(big, 100 if quick else 500, False), (big, 100 if quick else 500, True),
             (1024, 1000 if quick else 5000, False)]
    chain(dev, 1024, 20, True)  # compile the fill / add / readback kernels first
    res = sweep(dev, cases, SETTINGS, rounds)
    rows = []
    for setting in SETTINGS:
        for case in cases:
            n, steps, sync_first = case
            enc, syn, read, tot = res[(setting, case)]
            rows.append([_label(setting), n, steps, "yes" if sync_first else "no", enc * 1e3,
                         syn * 1e3, read * 1e3, tot * 1e3, enc / steps * 1e6])
    print(table(f"queue: x = x + y, median of {rounds} alternating round(s) (ms; encode µs per op)",
                ["ops per submit", "len", "steps", "sync first", "encode", "synchronize",
                 "to_vec1", "total", "encode µs/op"], rows))
    small = {s: res[(s, cases[2])][3] for s in SETTINGS}
    if small[None]:
        print(f"5000 small adds, every op submitted ('1') vs default: "
              f"{small['1'] / small[None]:.1f}x the total time")
    if getattr(args, "plot", None):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        plot_queue(ax, res, SETTINGS, cases)
        fig.tight_layout()
        save_figure(fig, args.plot)
        print(f"plot written to {args.plot}")
    write_json(getattr(args, "json", None), {
        "adapter": info["adapter"],
        "rows": [dict(zip(["ops_per_submit", "len", "steps", "sync_first", "encode_ms", "sync_ms",
                           "read_ms", "total_ms", "encode_us_per_op"], r)) for r in rows]})
    return 0
