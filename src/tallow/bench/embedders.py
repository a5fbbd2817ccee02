"""``tallow bench models``' embedder rows beyond MiniLM: all-mpnet-base-v2 (from its
packages, see ``tallow models fetch``) and a random XLM-RoBERTa (``families.py``) at
1 and 2 threads, tallow's ``SentenceEmbedder`` beside sentence-transformers
(PyTorch) at the same thread count.

The two take turns within each round (the order alternating), and each figure is the
median of the rounds, so a load that comes and goes on a shared machine falls on both.
"""

from __future__ import annotations

import os
import statistics
import time


def bench_embed_mpnet(texts, batch_size=32, rounds=3, thread_counts=(1, 2), quiet=False):
    """{threads: {'tallow': sent/s, 'sentence_transformers': sent/s or None, 'ratio'}} on
    ``texts``; None when all-mpnet-base-v2 is not installed."""
    from ..models.packaged import mpnet_model_dir

    path = mpnet_model_dir()
    if path is None:
        if not quiet:
            print("  embed all-mpnet-base-v2: skipped (tallow models fetch all-mpnet-base-v2)")
        return None
    return bench_embedder(path, "all-mpnet-base-v2", texts, batch_size, rounds, thread_counts, quiet)


def bench_embedder(path, label, texts, batch_size=32, rounds=3, thread_counts=(1, 2), quiet=False):
    """The sentence-transformers folder ``path`` (called ``label`` in the output) on
    ``texts``, tallow beside sentence-transformers: as :func:`bench_embed_mpnet`."""
    import numpy as np

    import tallow as tl

    from ..utils import get_num_threads, set_num_threads
    from .common import table

    texts = list(texts)
    n = len(texts)
    ours = tl.models.SentenceEmbedder.from_pretrained(path)
    theirs = torch = None
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        theirs = SentenceTransformer(path, device="cpu")
    except ImportError as e:
        if not quiet:
            print(f"  embed {label}: sentence-transformers not installed ({e}); tallow only")

    def run_ours():
        return ours.encode(texts, batch_size=batch_size, show_progress_bar=False)

    def run_theirs():
        return theirs.encode(texts, batch_size=batch_size, show_progress_bar=False)

    runs = [("tallow", run_ours)] + ([("sentence_transformers", run_theirs)] if theirs else [])
    before, before_torch = get_num_threads(), torch.get_num_threads() if torch else None
    res, rows = {}, []
    try:
        for t in thread_counts:
            set_num_threads(t)
            if torch is not None:
                torch.set_num_threads(t)
            out = {name: f() for name, f in runs}  # warm-up, and the outputs compared
            times = {name: [] for name, _ in runs}
            for r in range(rounds):
                for name, f in (runs if r % 2 == 0 else runs[::-1]):
                    t0 = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - t0)
            row = {name: n / statistics.median(ts) for name, ts in times.items()}
            if theirs is not None:
                a, b = out["tallow"], out["sentence_transformers"]
                cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
                row["ratio"] = row["tallow"] / row["sentence_transformers"]
                row["min_cosine"] = float(cos.min())
            res[str(t)] = row
            rows.append([t, row["tallow"], row.get("sentence_transformers", float("nan")),
                         row.get("ratio", float("nan")), row.get("min_cosine", float("nan"))])
    finally:
        set_num_threads(before)
        if torch is not None:
            torch.set_num_threads(before_torch)
    if not quiet:
        print(table(f"embed {label}, {n} sentences, batch {batch_size}: sent/s, "
                    f"medians of {rounds} alternating rounds",
                    ["threads", "tallow", "sentence-transformers", "ratio", "min cosine"], rows))
    return {"sentences": n, "batch_size": batch_size, "rounds": rounds, "by_threads": res}
