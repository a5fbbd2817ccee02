"""The ``tallow bench`` sub-command: one module per suite, each with ``run(args)``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile

from ..cliargs import output_file, plot_file, positive_int
from .common import write_json

# suite name -> module (relative to tallow.bench) providing run(args) -> int
SUITES = {
    "cpu": "cpu",
    "gpu": "gpu",
    "queue": "queue",
    "first-use": "first_use",
    "quantized": "quantized",
    "models": "models",
    # Not part of "all": it starts a Ray runtime (needs tallow[distributed]).
    "distributed": "distributed",
}
ALL_ORDER = ("cpu", "gpu", "queue", "first-use", "quantized", "models")


def _plot_name(path, suite):
    """fig.png -> fig-gpu.png: under ``all`` each drawing suite gets its own file."""
    root, ext = os.path.splitext(path)
    return f"{root}-{suite}{ext or '.png'}"


def _run(args) -> int:
    names = ALL_ORDER if args.suite == "all" else (args.suite,)
    status = 0
    results = {}
    # Each suite writes its own JSON; they get a scratch file each, so that under
    # ``all`` one does not overwrite the other, and a suite that measured nothing
    # (no adapter, not installed) still leaves a valid file saying so.
    with tempfile.TemporaryDirectory(prefix="tallow-bench-") as scratch:
        for name in names:
            try:
                module = importlib.import_module(f"tallow.bench.{SUITES[name]}")
            except ImportError as e:
                print(f"== bench {name}: not available ({e})")
                results[name] = {"skipped": f"not available ({e})"}
                continue
            print(f"== bench {name}")
            suite_args = argparse.Namespace(**vars(args))
            suite_args.json = os.path.join(scratch, f"{name}.json") if args.json else None
            if args.plot and len(names) > 1:
                suite_args.plot = _plot_name(args.plot, name)
            status |= module.run(suite_args) or 0
            if suite_args.json and os.path.exists(suite_args.json):
                with open(suite_args.json) as f:
                    results[name] = json.load(f)
            else:
                results[name] = {"skipped": "nothing measured (see the output above)"}
    if args.json:
        write_json(args.json, results if len(names) > 1 else results[names[0]])
    return status


def add_bench_parser(sub):
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(ALL_ORDER) + ", all")
    p.add_argument("suite", nargs="?", default="cpu", choices=tuple(SUITES) + ("all",))
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed repeats per measurement")
    p.add_argument("--plot", metavar="FILE.png", type=plot_file, default=None,
                   help="draw the results (matplotlib; gpu and queue draw; under 'all', "
                        "FILE-<suite>.png each)")
    p.add_argument("--json", metavar="FILE.json", type=output_file, default=None,
                   help="write the results as JSON (under 'all': one object per suite)")
    p.set_defaults(run=_run)
