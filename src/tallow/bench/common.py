"""Timing helpers: medians of alternating repeats, and plain-text tables.

Machines are noisy and first runs pay warm-up (allocator, thread pools, caches),
so the candidates take turns, and the median of each one's repeats is reported.
Each turn starts with one untimed call: what the previous candidate left behind
(freed memory handed back to the system, cold caches) is paid there, not by
whichever candidate happens to follow it.
"""

from __future__ import annotations

import json
import math
import statistics
import time


def alternate(candidates: dict, repeats: int = 5, number: int = 1) -> dict:
    """{name: median seconds per call} for callables timed in turns."""
    times = {name: [] for name in candidates}
    names = list(candidates)
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn = candidates[name]
            fn()
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times[name].append((time.perf_counter() - t0) / number)
    return {name: statistics.median(ts) for name, ts in times.items()}


def table(title: str, header: list, rows: list) -> str:
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in row] for row in rows]
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


def write_json(path, results: dict) -> None:
    """The results as strict JSON, written atomically (nothing is written for no path)."""
    from ..atomic import atomic_write

    if path:
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
