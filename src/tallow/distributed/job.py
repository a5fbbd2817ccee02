"""``embed_files``: files in, an embedding index out, on a Ray cluster."""

from __future__ import annotations

import os

from .embed import embed_dataset
from .io import check_output_dir, expand_inputs, read_inputs, write_index
from .runtime import connect


def embed_files(inputs, output, model, *, address: str | None = None, num_workers=None,
                batch_size: int = 32, device: str = "cpu", keep_text: bool = True,
                text_column: str = "text", id_column: str = "id", normalize=None,
                progress: bool | None = None, num_cpus: int | None = None,
                block_rows: int | None = None) -> dict:
    """Embed the texts of ``inputs`` (text, JSONL and Parquet files) with ``model``
    and write the index directory ``output``; returns its manifest.

    ``address``: a Ray cluster to join (``"auto"``, ``"ray://host:port"``); None
    starts a local runtime (``num_cpus``: its CPUs, default all usable ones).
    Everything that can be checked locally (inputs, output, model directory) is
    checked before Ray starts."""
    expand_inputs(inputs, text_column)
    check_output_dir(output)
    if isinstance(model, (str, os.PathLike)):
        from ..models.sentence import check_model_dir

        check_model_dir(model, "--model")
    num_gpus = None
    if address is None and str(device).startswith("gpu"):
        # Ray counts only the GPUs it knows (NVIDIA and a few others); tallow's GPU is
        # a WebGPU adapter, and a local runtime gets one GPU slot for it.
        from ..utils import gpu_is_available

        num_gpus = 1 if gpu_is_available() else None
    ray = connect(address, num_cpus=num_cpus, num_gpus=num_gpus)
    if progress is not None:
        ray.data.DataContext.get_current().enable_progress_bars = bool(progress)
    ds = read_inputs(inputs, text_column=text_column, id_column=id_column)
    extra = {} if block_rows is None else {"block_rows": block_rows}
    ds = embed_dataset(ds, model, keep_text=keep_text, batch_size=batch_size,
                       num_workers=num_workers, device=device, normalize=normalize, **extra)
    info = {"model": os.path.abspath(os.fspath(model)) if isinstance(model, (str, os.PathLike))
            else None, "normalize": normalize}
    return write_index(ds, output, info=info)
