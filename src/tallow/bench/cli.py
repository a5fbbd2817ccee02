"""The ``tallow bench`` sub-command: one module per suite, each with ``run(args)``."""

from __future__ import annotations

import importlib

# suite name -> module (relative to tallow.bench) providing run(args) -> int
SUITES = {
    "cpu": "cpu",
    "gpu": "gpu",
    "queue": "queue",
    "first-use": "first_use",
    "quantized": "quantized",
    "models": "models",
}
ALL_ORDER = ("cpu", "gpu", "queue", "first-use", "quantized", "models")


def _run(args) -> int:
    names = ALL_ORDER if args.suite == "all" else (args.suite,)
    status = 0
    for name in names:
        try:
            module = importlib.import_module(f"tallow.bench.{SUITES[name]}")
        except ImportError as e:
            print(f"== bench {name}: not available ({e})")
            continue
        print(f"== bench {name}")
        status |= module.run(args) or 0
    return status


def add_bench_parser(sub):
    p = sub.add_parser("bench", help="benchmarks: " + ", ".join(ALL_ORDER) + ", all")
    p.add_argument("suite", nargs="?", default="cpu", choices=tuple(SUITES) + ("all",))
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="draw the results (matplotlib)")
    p.add_argument("--json", metavar="FILE.json", default=None, help="write the results as JSON")
    p.set_defaults(run=_run)
