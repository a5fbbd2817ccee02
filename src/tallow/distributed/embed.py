"""``embed_dataset``: sentence embeddings as one stage of a Ray Data pipeline.

Each worker is a Ray actor that loads its model once and then embeds every block
it is given. Inside a block, ``SentenceEmbedder.encode`` tokenizes all texts,
sorts them by length and pads each batch only to its longest member, then puts
the vectors back in the block's order: rows keep their ids and their order.

Ray restarts an actor whose process dies and retries the block it was working
on, so a lost worker costs time, not rows.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import DistributedError
from .runtime import cluster_cpus_gpus, import_ray

DEFAULT_BLOCK_ROWS = 1024
EMBEDDING_COLUMN = "embedding"


def load_model(model, device):
    """``model`` is a sentence-transformers directory (read by each worker: the path
    must exist on every node) or a picklable callable returning an object with
    ``encode(texts, batch_size=..., normalize=...) -> (n, dim) float32`` and ``dim``."""
    if isinstance(model, (str, os.PathLike)):
        from ..device import Device
        from ..models.sentence import SentenceEmbedder

        return SentenceEmbedder.from_pretrained(os.fspath(model), device=Device.parse(device))
    return model()


class EmbedWorker:
    """One Ray actor: a model loaded once, then ``__call__`` per block (a pyarrow Table)."""

    def __init__(self, model, device, text_column, keep_text, batch_size, normalize, threads):
        from ..models.sentence import SentenceEmbedder
        from ..utils import set_num_threads

        if threads is not None:
            # The actor's share of the node: tallow's pool and BLAS use no more.
            set_num_threads(threads)
        self.embedder = load_model(model, device)
        self.extra = {"show_progress_bar": False}
        if isinstance(self.embedder, SentenceEmbedder):
            self.extra["workers"] = threads
        self.text_column = text_column
        self.keep_text = keep_text
        self.batch_size = batch_size
        self.normalize = normalize

    def __call__(self, block):
        import pyarrow as pa

        texts = block.column(self.text_column)
        if texts.null_count:
            raise ValueError(f"embed_dataset: column {self.text_column!r} has {texts.null_count} "
                             "missing (null) texts")
        vecs = self.embedder.encode(texts.to_pylist(), batch_size=self.batch_size,
                                    normalize=self.normalize, **self.extra)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != block.num_rows:
            raise ValueError(f"embed_dataset: the model returned an array of shape {vecs.shape} "
                             f"for {block.num_rows} texts")
        flat = pa.array(vecs.reshape(-1), type=pa.float32())
        column = pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1])
        out = block if self.keep_text else block.drop_columns([self.text_column])
        return out.append_column(EMBEDDING_COLUMN, column)


def plan_workers(total_cpus, total_gpus, *, device="cpu", num_workers=None,
                 cpus_per_worker=None) -> dict:
    """How many actors, and what each asks Ray for.

    CPU: by default one single-threaded worker per CPU but one; that CPU is left
    to the tasks that read the input and write the output. More workers than that
    are allowed: their CPU request shrinks so they all fit beside one reader (a
    pool that took every CPU would starve the readers and never start).
    GPU: one worker per GPU by default, each asking for a whole GPU.
    """
    if device == "gpu":
        if total_gpus < 1:
            raise DistributedError("--device gpu: the Ray cluster has no GPUs (Ray counts the "
                                   "GPUs of each node when it starts)")
        n = int(total_gpus) if num_workers is None else int(num_workers)
        if n > total_gpus:
            raise DistributedError(f"{n} GPU workers asked for, the cluster has {total_gpus:g} GPUs")
        return {"num_workers": n, "num_cpus": min(1.0, total_cpus / (n + 1)), "num_gpus": 1,
                "threads": 1}
    if device != "cpu":
        raise ValueError(f"embed_dataset: device must be 'cpu' or 'gpu', got {device!r}")
    per = 1.0 if cpus_per_worker is None else float(cpus_per_worker)
    if per <= 0:
        raise ValueError(f"embed_dataset: cpus_per_worker must be positive, got {per}")
    reserve = 1.0 if total_cpus >= 2 else total_cpus / 2
    room = max(total_cpus - reserve, 0.0)
    n = max(1, int(room // per)) if num_workers is None else int(num_workers)
    if n < 1:
        raise ValueError(f"embed_dataset: num_workers must be at least 1, got {num_workers}")
    ask = per if n * per <= room else room / n
    ask = math.floor(ask * 1000) / 1000  # Ray rounds fractions to 1e-4; stay below the room
    if ask <= 0:
        raise DistributedError(f"the Ray cluster has {total_cpus:g} CPUs: too few for {n} workers")
    return {"num_workers": n, "num_cpus": ask, "num_gpus": 0, "threads": max(1, int(per))}


def embed_dataset(ds, model, *, text_column: str = "text", keep_text: bool = True,
                  batch_size: int = 32, num_workers: int | None = None, device: str = "cpu",
                  normalize=None, cpus_per_worker: float | None = None,
                  block_rows: int = DEFAULT_BLOCK_ROWS):
    """Add an ``embedding`` column (fixed-size list of float32) to ``ds``, a
    ``ray.data.Dataset`` with a string column ``text_column``; returns the new
    (lazy) Dataset, so the step composes with the rest of a Ray pipeline.

    ``model``: a sentence-transformers directory, loaded once per worker by
    ``SentenceEmbedder.from_pretrained`` (every node reads that path), or a
    picklable zero-argument callable returning an object with ``encode`` and ``dim``.
    ``num_workers``: actors (default: one per CPU but one, or one per GPU);
    ``device="gpu"``: each actor asks Ray for one GPU. ``block_rows``: rows handed to
    a worker at once, sorted by length there and run ``batch_size`` at a time.
    ``normalize``: as ``SentenceEmbedder.encode`` (None: the model directory decides).
    ``keep_text=False`` drops the text column from the result.
    """
    ray = import_ray()
    if not ray.is_initialized():
        raise DistributedError("embed_dataset: not connected to Ray (call "
                               "tallow.distributed.connect() or ray.init() first)")
    for name, value in (("batch_size", batch_size), ("block_rows", block_rows)):
        if int(value) < 1:
            raise ValueError(f"embed_dataset: {name} must be at least 1, got {value}")
    columns = ds.columns(fetch_if_missing=False)
    if columns is not None and text_column not in columns:
        raise ValueError(f"embed_dataset: the dataset has no column {text_column!r} "
                         f"(it has {', '.join(columns)})")
    if columns is not None and EMBEDDING_COLUMN in columns:
        raise ValueError(f"embed_dataset: the dataset already has an {EMBEDDING_COLUMN!r} column")
    if isinstance(model, (str, os.PathLike)):
        # Checked here too, so the usual mistake fails before any actor starts.
        from ..models.sentence import check_model_dir

        check_model_dir(model, "embed_dataset")
    cpus, gpus = cluster_cpus_gpus(ray)
    plan = plan_workers(cpus, gpus, device=str(device).split(":")[0], num_workers=num_workers,
                        cpus_per_worker=cpus_per_worker)
    # Blocks of block_rows rows, so that one big input file still feeds every
    # worker (streaming: blocks are split and merged, rows are not shuffled).
    ds = ds.repartition(target_num_rows_per_block=int(block_rows))
    return ds.map_batches(
        EmbedWorker,
        fn_constructor_kwargs=dict(model=model, device=device, text_column=text_column,
                                   keep_text=keep_text, batch_size=int(batch_size),
                                   normalize=normalize, threads=plan["threads"]),
        compute=ray.data.ActorPoolStrategy(size=plan["num_workers"]),
        batch_size=int(block_rows),
        batch_format="pyarrow",
        zero_copy_batch=True,
        num_cpus=plan["num_cpus"],
        num_gpus=plan["num_gpus"],
    )
