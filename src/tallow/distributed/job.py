"""``embed_files``: files in, an embedding index out, on a Ray cluster."""

from __future__ import annotations

import os

from ..errors import DistributedError, TallowError
from .embed import embed_dataset, poison_message
from .io import check_output_dir, expand_inputs, read_inputs, write_index
from .poison import new_ledger
from .runtime import DEFAULT_CONNECT_TIMEOUT, connect


def embed_files(inputs, output, model, *, address: str | None = None, num_workers=None,
                batch_size: int = 32, device: str = "cpu", keep_text: bool = True,
                text_column: str = "text", id_column: str = "id", normalize=None,
                progress: bool | None = None, num_cpus: int | None = None,
                block_rows: int | None = None,
                connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> dict:
    """Embed the texts of ``inputs`` (text, JSONL and Parquet files) with ``model``
    and write the index directory ``output``; returns its manifest.

    ``address``: a Ray cluster to join (``"auto"``, ``"host:port"``,
    ``"ray://host:port"``; given up after ``connect_timeout`` seconds); None starts a
    local runtime (``num_cpus``: its CPUs, default all usable ones). Everything that
    can be checked locally (inputs, output, model directory) is checked before Ray
    starts. An error in a worker (a file that is not UTF-8, a bad JSONL line) is
    raised here as itself, without Ray's traceback around it.

    A row that kills its worker every time it is tried is left out after
    ``poison.MAX_DEATHS`` deaths: the index is still written with every other row
    (the manifest lists the row under ``"left_out"``), then a ``DistributedError``
    names it."""
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
    ray = connect(address, num_cpus=num_cpus, num_gpus=num_gpus, timeout=connect_timeout)
    if progress is not None:
        ray.data.DataContext.get_current().enable_progress_bars = bool(progress)
    ledger = new_ledger(ray)
    ds = read_inputs(inputs, text_column=text_column, id_column=id_column)
    extra = {} if block_rows is None else {"block_rows": block_rows}
    ds = embed_dataset(ds, model, keep_text=keep_text, batch_size=batch_size,
                       num_workers=num_workers, device=device, normalize=normalize,
                       on_poison="skip", ledger=ledger, **extra)
    info = {"model": model_record(model), "normalize": normalize}
    left_out = []

    def after_run():
        left_out.extend(ray.get(ledger.poisoned.remote()))
        return {"left_out": left_out} if left_out else {}

    try:
        with _quiet_cpu_warning():
            manifest = write_index(ds, output, info=info, on_written=after_run)
    except Exception as e:
        raise worker_error(e) from None
    finally:
        ray.kill(ledger)
    if left_out:
        raise DistributedError(
            "; ".join(poison_message(r) for r in left_out) +
            f". The index {output} was written with the other {manifest['rows']} rows "
            "(its manifest lists the rows left out)")
    return manifest


class _DropCpuWarning:
    """A logging filter: Ray Data's "no available CPUs ... Dataset job will hang" warning
    comes whenever a job starts while the actors of an earlier stage still hold their
    CPUs, and a tallow job always leaves one CPU to its read and write tasks
    (``plan_workers``): for it the warning is wrong."""

    def filter(self, record) -> bool:
        return "will hang" not in record.getMessage()


class _quiet_cpu_warning:
    def __enter__(self):
        import logging

        self.logger = logging.getLogger("ray.data.dataset")
        self.filter = _DropCpuWarning()
        self.logger.addFilter(self.filter)

    def __exit__(self, *exc):
        self.logger.removeFilter(self.filter)


def model_record(model):
    """What the manifest says of the model: its name and content hash (a copied index
    or model still matches), or None for a model given as a factory."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    from ..models.identity import identity

    return identity(model)


def worker_error(e: BaseException) -> BaseException:
    """The error a worker raised, out of Ray's wrapping (RayTaskError, UserCodeException,
    with the remote traceback in their text): a tallow error, or a ValueError,
    OSError or UnicodeError of the user's input, as a new exception of its class with
    its own message. Anything else is returned as it is."""
    seen, stack = set(), [e]
    while stack:
        err = stack.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if err is not e and isinstance(err, (TallowError, ValueError, OSError)) and \
                not type(err).__module__.startswith("ray"):
            try:
                return type(err)(*err.args)
            except Exception:
                return DistributedError(str(err))
        stack += [getattr(err, "cause", None), err.__cause__, err.__context__]
    if isinstance(e, TallowError) or not type(e).__module__.startswith("ray"):
        return e
    # Ray keeps a worker's exception only as text (its traceback): find the first
    # exception line that is not Ray's own, "Name: message", and raise that again.
    import builtins
    import re

    from .. import errors

    for line in str(e).splitlines():
        found = re.match(r"\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", line)
        if not found or found.group(1).startswith("ray."):
            continue
        name = found.group(1).rsplit(".", 1)[-1]
        cls = getattr(errors, name, None) if found.group(1).startswith("tallow.") else \
            getattr(builtins, found.group(1), None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(found.group(2))
            except Exception:
                pass
        return DistributedError(f"{found.group(1)}: {found.group(2)}")
    lines = str(e).strip().splitlines()
    return DistributedError(f"the Ray job failed: {lines[-1] if lines else type(e).__name__}")
