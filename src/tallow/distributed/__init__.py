"""Embedding a corpus on a Ray cluster (``pip install 'tallow[distributed]'``).

``embed_dataset`` adds an embedding column to a ``ray.data.Dataset`` (one model
per worker actor, loaded once); ``embed_files`` runs the whole job from text,
JSONL or Parquet files to an index directory that ``tallow.search.Index``
searches. ``connect`` joins a cluster or starts a private local runtime.
``import tallow`` never imports this package, nor Ray.
"""

from .embed import EMBEDDING_COLUMN, embed_dataset, plan_workers
from .io import MANIFEST, read_inputs, read_manifest, write_index
from .job import embed_files
from .runtime import connect, local_init_kwargs, usable_cpus

__all__ = ["EMBEDDING_COLUMN", "MANIFEST", "connect", "embed_dataset", "embed_files",
           "local_init_kwargs", "plan_workers", "read_inputs", "read_manifest", "usable_cpus",
           "write_index"]
