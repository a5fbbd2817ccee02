"""``tl.save`` / ``tl.load``, and state dicts from any checkpoint a model ships with.

``tl.save(obj, path)`` writes a safetensors file: the tensors of ``obj`` (a tensor,
or nested dicts, lists and tuples of tensors and plain values) as the file's
tensors, and the structure around them — keys, nesting, numbers, strings — as JSON
in the file's metadata, so ``tl.load`` gives back the same nesting and values. A
flat ``{name: tensor}`` dict keeps its names as the tensors' names, so other
safetensors readers see an ordinary state dict.

``tl.load(path)`` reads what ``tl.save`` wrote, any safetensors file (a flat dict),
and PyTorch checkpoints (``.pt``/``.pth``/``pytorch_model.bin``, zip or legacy
format) through `tallow.torch_checkpoint`'s restricted unpickler, which never runs
code from the file. `load_state_dict` also takes a model folder or a sharded
checkpoint's ``*.index.json``.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np

from .device import Device, cpu
from .errors import FileFormatError, InvalidArgumentError
from .safetensors_io import SafetensorsReader
from .tensor_base import TensorBase
from .tensor_class import Tensor
from .torch_checkpoint import is_torch_checkpoint, load_arrays
from .utils import save_safetensors

STRUCTURE_KEY = "tallow.structure"
# The files a model folder may keep its weights in, in the order they are looked for.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _flatten(obj, tensors: dict, seen: dict, path: str):
    """``obj`` as JSON, each tensor replaced by {"tensor": name} (added to ``tensors``;
    the same tensor object twice is written once)."""
    if isinstance(obj, TensorBase):
        if id(obj) in seen:
            return {"tensor": seen[id(obj)]}
        name = path or "tensor"
        while name in tensors:
            name += "_"
        tensors[name] = obj
        seen[id(obj)] = name
        return {"tensor": name}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise InvalidArgumentError("tl.save: dict keys must be strings (as in a state dict)")
        return {"dict": {k: _flatten(v, tensors, seen, f"{path}.{k}" if path else k) for k, v in obj.items()}}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, tensors, seen, f"{path}.{i}" if path else str(i)) for i, v in enumerate(obj)]
        return {"tuple" if isinstance(obj, tuple) else "list": items}
    if isinstance(obj, np.generic):
        obj = obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise InvalidArgumentError(
        f"tl.save: cannot save a {type(obj).__name__}: give tensors, dicts, lists, tuples, "
        "numbers, strings or None")


def _unflatten(node, tensors: dict):
    (kind, value), = node.items()
    if kind == "tensor":
        return tensors[value]
    if kind == "dict":
        return {k: _unflatten(v, tensors) for k, v in value.items()}
    if kind in ("list", "tuple"):
        items = [_unflatten(v, tensors) for v in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return value
    raise FileFormatError(f"unknown entry {kind!r} in a saved structure")


def save(obj, path, metadata: dict | None = None) -> None:
    """Save a tensor or a (nested) state dict to ``path`` as safetensors (written
    atomically). ``metadata``: extra string pairs kept in the file's header."""
    tensors: dict = {}
    structure = _flatten(obj, tensors, {}, "")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if STRUCTURE_KEY in meta:
        raise InvalidArgumentError(f"tl.save: the metadata key {STRUCTURE_KEY!r} is tallow's own")
    meta[STRUCTURE_KEY] = json.dumps(structure)
    save_safetensors(os.fspath(path), tensors, meta)


def _device(map_location, device):
    if map_location is not None and device is not None:
        raise InvalidArgumentError("tl.load: give map_location or device, not both")
    where = device if device is not None else map_location
    if where is None:
        return cpu
    return Device.parse(where)


def _tensors_of(obj, device):
    """Every NumPy array inside ``obj`` (from a PyTorch checkpoint) as a Tensor."""
    if isinstance(obj, np.ndarray):
        return Tensor.from_numpy(obj).to_device(device)
    if isinstance(obj, dict):
        out = type(obj)((k, _tensors_of(v, device)) for k, v in obj.items())
        meta = getattr(obj, "__dict__", {}).get("_metadata")
        if meta is not None:
            out._metadata = meta
        return out
    if isinstance(obj, (list, tuple)):
        items = [_tensors_of(v, device) for v in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj


def load(path, map_location=None, *, device=None, weights_only: bool = True, with_metadata: bool = False):
    """Load what `save` wrote, a safetensors file, or a PyTorch checkpoint.

    ``map_location`` / ``device``: where the tensors go (``"cpu"``, ``"gpu"``, a
    Device). ``weights_only`` must stay True: tallow never unpickles code.
    ``with_metadata=True`` returns ``(obj, metadata)``: a safetensors file's string
    pairs (without tallow's own structure entry); ``{}`` for other files."""
    if weights_only is not True:
        raise InvalidArgumentError(
            "tl.load(weights_only=False) is not supported: tallow reads only tensors, containers, "
            "numbers and strings from a checkpoint, never code")
    path = os.fspath(path)
    dev = _device(map_location, device)
    meta = {}
    if os.path.isdir(path) or path.endswith(".index.json"):
        obj = load_state_dict(path, device=dev)
    elif is_torch_checkpoint(path):
        obj = _tensors_of(load_arrays(path), dev)
    else:
        with SafetensorsReader(path) as reader:
            tensors = {name: reader.get(name, device=dev) for name in reader.keys()}
            meta = dict(reader.metadata or {})
        structure = meta.pop(STRUCTURE_KEY, None)
        obj = tensors if structure is None else _unflatten(json.loads(structure), tensors)
    return (obj, meta) if with_metadata else obj


def _weights_in(folder: pathlib.Path) -> pathlib.Path:
    for name in WEIGHT_FILES:
        if (folder / name).exists():
            return folder / name
    found = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin")) + sorted(folder.glob("*.pt"))
    if len(found) == 1:
        return found[0]
    raise FileFormatError(f"{folder}: no model weights found (looked for {', '.join(WEIGHT_FILES)})")


def load_state_dict(path, device=None) -> dict:
    """``{name: Tensor}`` from a safetensors file, a PyTorch checkpoint, a sharded
    checkpoint's ``*.index.json`` (every shard it names) or a model folder."""
    path = pathlib.Path(path)
    dev = device if device is not None else cpu
    if path.is_dir():
        path = _weights_in(path)
    if path.name.endswith(".index.json"):
        try:
            weight_map = json.loads(path.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FileFormatError(f"{path}: not a sharded checkpoint index ({e})") from None
        out = {}
        for shard in sorted(set(weight_map.values())):
            part = load_state_dict(path.parent / shard, dev)
            out.update({k: v for k, v in part.items() if weight_map.get(k) == shard})
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise FileFormatError(f"{path}: tensors named in the index are missing from their shards: "
                                  f"{', '.join(missing[:5])}")
        return out
    obj = load(path, device=dev)
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]  # a training checkpoint's model part
    if not isinstance(obj, dict) or not all(isinstance(v, TensorBase) for v in obj.values()):
        raise FileFormatError(f"{path}: not a state dict (a dict of tensors)")
    return dict(obj)
