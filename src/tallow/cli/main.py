"""The ``tallow`` command: info, bench, embed, generate, search, serve.

Each sub-command lives in its own module of this package and adds its parser here.
The models (and their tokenizers) load only when their command runs, so that
``tallow --help``, ``tallow info`` and usage errors answer at once.
"""

from __future__ import annotations

import argparse
import sys

from .bench import add_bench_parser
from .distributed import add_search_parser
from .info import add_info_parser
from .model_store import add_model_store_parser
from .models import add_model_parsers
from .serve import add_serve_parser


def build_parser() -> argparse.ArgumentParser:
    """The ``tallow`` argument parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="tallow", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_info_parser(sub)
    add_bench_parser(sub)
    add_model_parsers(sub)
    add_model_store_parser(sub)
    add_search_parser(sub)
    add_serve_parser(sub)
    parser.set_defaults(subparsers=sub)
    return parser


def main(argv=None) -> int:
    """Run the ``tallow`` command with ``argv`` (default: the process arguments)."""
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        # argparse would answer with the top-level usage, which does not list the
        # sub-command's flags: show the sub-command's own.
        args.subparsers.choices[args.command].error(
            f"unrecognized arguments: {' '.join(unknown)}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
