"""Timing helpers: medians of alternating repeats, and plain-text tables.

Machines are noisy and first runs pay warm-up (allocator, thread pools, caches),
so the candidates take turns, and the median of each one's repeats is reported.
Each turn starts with untimed calls for at least ``WARM_S`` (one call at least):
what the previous candidate left behind is paid there, not by whichever candidate
happens to follow it: freed memory handed back to the system, cold caches, idle
cores that take a while to come back up (on a virtual machine the first steps
after a 15 ms idle ran 1.2-1.8x slower), and other threads still spinning
(PyTorch's OpenMP workers spin for about 10 ms after each of its calls, holding a
core the next candidate's threads need).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import subprocess
import sys
import time


# Each turn starts from the machine state its candidate leaves behind: PyTorch's (libgomp's)
# idle workers spin about 10 ms after a call, and while they do, tallow's worker pool sees
# the CPU taken (it samples the runnable tasks every 10 ms, docs/design.md "Thread policy")
# and keeps its products on one thread until a few samples find it free again.
FULL_WARM_S = 0.06
# --quick runs (a smoke test of every table, under 30 s): a shorter warm-up, too short for
# the 2-thread rows to show tallow's split after a PyTorch turn.
QUICK_WARM_S = 0.003
WARM_S = FULL_WARM_S


def set_quick(quick: bool) -> None:
    """The warm-up of each turn for a full (``WARM_S`` = 60 ms) or a quick run (3 ms)."""
    global WARM_S
    WARM_S = QUICK_WARM_S if quick else FULL_WARM_S


def warm(fn) -> None:
    """Call ``fn`` untimed until ``WARM_S`` has passed (once at least)."""
    t0 = time.perf_counter()
    fn()
    while time.perf_counter() - t0 < WARM_S:
        fn()


def alternate(candidates: dict, repeats: int = 5, number: int = 1) -> dict:
    """{name: median seconds per call} for callables timed in turns."""
    times = {name: [] for name in candidates}
    names = list(candidates)
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn = candidates[name]
            warm(fn)
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t0) / number)
    return {name: statistics.median(ts) for name, ts in times.items()}


# The tables printed since the last ``write_json``: each suite's JSON carries the tables
# it printed, so that docs/benchmarks.md can be generated from the JSON alone.
_printed_tables: list = []


def table(title: str, header: list, rows: list) -> str:
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in row] for row in rows]
    _printed_tables.append({"title": title, "header": cells[0], "rows": cells[1:]})
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths)), line]
    for r in cells[1:]:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def _fmt(v):
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        if abs(v) >= 0.01:
            return f"{v:.3f}"
        return f"{v:.2e}"
    return "-" if v is None else str(v)


def ms(seconds):
    return None if seconds is None else seconds * 1e3


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def _finite(v):
    """NaN and infinities as None: json.dump writes them as NaN/Infinity, which is not
    JSON (jq, browsers and strict parsers reject the whole file)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def machine() -> dict:
    """What the figures were measured on: the processor, its instruction sets, the
    threads tallow may use, and the date."""
    from ..backends.cpu.device import CPU_STATE

    cpu = CPU_STATE.info()
    simd = set(cpu.get("simd") or ())
    widest = next((isa for isa in ("AVX512F", "AVX2", "ASIMD") if isa in simd), None)
    return {"processor": cpu["name"], "arch": cpu["machine"], "simd": widest,
            "threads": cpu["threads"], "date": time.strftime("%Y-%m-%d", time.gmtime())}


def write_json(path, results: dict) -> None:
    """The results as strict JSON, written atomically (nothing is written for no path),
    with the machine and the tables printed since the last call (``tables``)."""
    from ..atomic import atomic_write

    tables = _printed_tables[:]
    _printed_tables.clear()
    if path:
        results = dict(results)
        if tables:
            results.setdefault("tables", tables)
        results.setdefault("machine", machine())
        text = json.dumps(_finite(results), indent=2, default=str, allow_nan=False)
        with atomic_write(path, "w") as f:
            f.write(text)


def save_figure(fig, path) -> None:
    """A matplotlib figure to ``path`` (format from the extension), written atomically."""
    import os

    from ..atomic import atomic_write

    fmt = os.path.splitext(str(path))[1].lstrip(".").lower() or "png"
    with atomic_write(path) as f:
        fig.savefig(f, dpi=120, format=fmt)


def have_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return torch


def set_threads(n: int) -> None:
    """Set tallow's thread count and PyTorch's (when installed) together."""
    from ..utils import set_num_threads

    set_num_threads(n)
    torch = have_torch()
    if torch is not None:
        torch.set_num_threads(n)


def cpu_ticks():
    """(stolen, total) clock ticks of this machine's CPUs so far, from Linux's
    ``/proc/stat`` (stolen: time a virtual machine's host ran something else while
    this machine had work), or None where it is not there."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(v) for v in fields[1:9]]
    except (OSError, ValueError):
        return None
    if not fields or fields[0] != "cpu" or len(ticks) < 8:
        return None
    return ticks[7], sum(ticks)  # user nice system idle iowait irq softirq steal


def stolen_percent(before, after):
    """The share of CPU time stolen between two ``cpu_ticks()`` (percent), or None."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


@contextlib.contextmanager
def steal_reported(results: dict):
    """``with steal_reported(results):`` a suite; after it, the share of CPU time a
    virtual machine's host stole meanwhile is printed and stored in ``results``
    (``host_steal_percent``) where the system counts it: figures from a run with
    much of it swing with the host's other work, not the code's."""
    before = cpu_ticks()
    yield
    stolen = stolen_percent(before, cpu_ticks())
    if stolen is not None:
        print(f"CPU time stolen by the host during the suite: {stolen:.1f}%")
        results["host_steal_percent"] = round(stolen, 2)


def run_suite(args, key: str, measure) -> int:
    """The ``run`` of a suite measured by one function: ``measure(repeats, quick)``
    gives the results stored under ``key``; the thread count is restored after."""
    from ..utils import get_num_threads

    quick = getattr(args, "quick", False)
    repeats = args.repeats or (3 if quick else 7)
    set_quick(quick)
    default = get_num_threads()
    results = {"quick": True} if quick else {}
    try:
        with steal_reported(results):
            results[key] = measure(repeats, quick)
    finally:
        set_threads(default)
    write_json(getattr(args, "json", None), results)
    return 0


def busy_process() -> subprocess.Popen:
    """One CPU-bound process (a Python busy loop): the host then has one more runnable
    thread than it would have; stop it with ``kill()`` and ``wait()``."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@contextlib.contextmanager
def competing(busy: bool = True):
    """``with competing(busy):`` runs its body beside one :func:`busy_process` (nothing
    when ``busy`` is false)."""
    hog = busy_process() if busy else None
    try:
        if hog is not None:
            time.sleep(0.2)  # let it start and take its core
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def by_threads(fn, thread_counts, repeats: int = 5, number: int = 1) -> dict:
    """{threads: median seconds per call of ``fn``}, tallow's thread count taking turns.

    Each turn sets the count (``tl.utils.set_num_threads``) and makes one untimed
    call before the timed ones; the count in force before is restored.
    """
    from ..utils import get_num_threads, set_num_threads

    before = get_num_threads()
    times = {t: [] for t in thread_counts}
    counts = list(thread_counts)
    try:
        for r in range(repeats):
            for t in counts[r % len(counts):] + counts[:r % len(counts)]:
                set_num_threads(t)
                warm(fn)
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                times[t].append((time.perf_counter() - t0) / number)
    finally:
        set_num_threads(before)
    return {t: statistics.median(ts) for t, ts in times.items()}


def load_average() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them ("n/a" where unknown)."""
    try:
        import os

        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def with_blas_threads(fn, n: int):
    """``fn`` made to run with NumPy's BLAS on ``n`` threads during the call (tallow keeps
    it on one): NumPy as measured by a user who sets no limit, for reference rows."""
    from threadpoolctl import ThreadpoolController

    libs = ThreadpoolController().select(user_api="blas").lib_controllers

    def go():
        before = [lib.get_num_threads() for lib in libs]
        for lib in libs:
            lib.set_num_threads(n)
        try:
            return fn()
        finally:
            for lib, b in zip(libs, before):
                lib.set_num_threads(b)
    return go
