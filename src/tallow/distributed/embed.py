"""``embed_dataset``: sentence embeddings as one stage of a Ray Data pipeline.

Each worker is a Ray actor that loads its model once and then embeds every block
it is given. Inside a block, ``SentenceEmbedder.encode`` tokenizes all texts,
sorts them by length and pads each batch only to its longest member, then puts
the vectors back in the block's order: rows keep their ids and their order.

Ray restarts an actor whose process dies and retries the block it was working
on, so a lost worker costs time, not rows. A row that kills every worker it meets
is found and left out or reported (``poison``), not retried forever.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import DistributedError
from .poison import MAX_DEATHS, block_key, new_ledger, register_worker
from .runtime import cluster_cpus_gpus, import_ray

DEFAULT_BLOCK_ROWS = 1024
EMBEDDING_COLUMN = "embedding"
SOURCE_COLUMN = "_source"  # where a row came from (read_inputs adds it), for reports only


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

    def __init__(self, model, device, text_column, keep_text, batch_size, normalize, threads,
                 ledger=None, on_poison="raise"):
        from ..models.sentence import SentenceEmbedder
        from ..utils import set_num_threads

        self.ledger, self.on_poison = ledger, on_poison
        if ledger is not None:
            import ray

            register_worker(ray, ledger)
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

    def _encode(self, texts):
        vecs = self.embedder.encode(texts, batch_size=self.batch_size, normalize=self.normalize,
                                    **self.extra)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(texts):
            raise ValueError(f"embed_dataset: the model returned an array of shape {vecs.shape} "
                             f"for {len(texts)} texts")
        return vecs

    def __call__(self, block):
        import pyarrow as pa

        texts = block.column(self.text_column)
        if texts.null_count:
            raise ValueError(f"embed_dataset: column {self.text_column!r} has {texts.null_count} "
                             "missing (null) texts")
        texts = texts.to_pylist()
        if self.ledger is None:
            vecs = self._encode(texts)
        else:
            block, vecs = self._guarded(block, texts)
        flat = pa.array(vecs.reshape(-1), type=pa.float32())
        column = pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1])
        drop = [c for c in (SOURCE_COLUMN,) if c in block.column_names]
        if not self.keep_text:
            drop.append(self.text_column)
        out = block.drop_columns(drop) if drop else block
        return out.append_column(EMBEDDING_COLUMN, column)

    def _guarded(self, block, texts):
        """Embed ``block`` under the ledger: whole, or row by row once it has killed
        ``MAX_DEATHS`` workers, leaving out (or raising on) a row that keeps killing."""
        import ray

        ledger = self.ledger
        key = block_key(texts)
        if ray.get(ledger.begin.remote(key)) < MAX_DEATHS:
            vecs = self._encode(texts)
            ray.get(ledger.end.remote(key))
            return block, vecs
        keep, parts = [], []
        for i, text in enumerate(texts):
            row_key = f"{key}/{i}"
            if ray.get(ledger.begin.remote(row_key)) >= MAX_DEATHS:
                row = self._describe(block, i, text)
                ray.get(ledger.end.remote(row_key))
                if self.on_poison == "raise":
                    raise DistributedError(poison_message(row))
                ray.get(ledger.left_out.remote(row))
                continue
            parts.append(self._encode([text]))
            keep.append(i)
            ray.get(ledger.end.remote(row_key))
        ray.get(ledger.end.remote(key))
        dim = parts[0].shape[1] if parts else int(getattr(self.embedder, "dim", 1))
        vecs = np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)
        return block.take(keep), vecs

    @staticmethod
    def _describe(block, i, text) -> dict:
        def value(column):
            return block.column(column)[i].as_py() if column in block.column_names else None

        return {"id": value("id"), "source": value(SOURCE_COLUMN), "text": text[:60],
                "deaths": MAX_DEATHS}


def poison_message(row: dict) -> str:
    where = f" ({row['source']})" if row.get("source") and row["source"] != row.get("id") else ""
    name = f"row {row['id']!r}{where}" if row.get("id") is not None else f"the row {row['text']!r}"
    return (f"{name} killed its worker {row['deaths']} times (out of memory, or a crash in the "
            f"model): it was not embedded; shorten or remove it and run again")


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
                  block_rows: int = DEFAULT_BLOCK_ROWS, on_poison: str = "raise", ledger=None):
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

    A row that kills its worker ``poison.MAX_DEATHS`` times (each death a restart
    and a retry of its block) is not tried again: ``on_poison="raise"`` fails the job
    with a ``DistributedError`` naming it; ``"skip"`` leaves it out of the result and
    records it in ``ledger`` (a ``poison.new_ledger`` actor; its ``poisoned()`` lists
    the rows), as ``embed_files`` does.
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
    if on_poison not in ("raise", "skip"):
        raise ValueError(f"embed_dataset: on_poison must be 'raise' or 'skip', got {on_poison!r}")
    ledger = new_ledger(ray) if ledger is None else ledger
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
                                   normalize=normalize, threads=plan["threads"],
                                   ledger=ledger, on_poison=on_poison),
        compute=ray.data.ActorPoolStrategy(size=plan["num_workers"]),
        batch_size=int(block_rows),
        batch_format="pyarrow",
        zero_copy_batch=True,
        num_cpus=plan["num_cpus"],
        num_gpus=plan["num_gpus"],
    )
