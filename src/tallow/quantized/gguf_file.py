"""GGUF files at the Tensor level: ``load_gguf`` / ``save_gguf`` (candle-pyo3's ``utils``).

``load_gguf(path, device=None) -> (tensors, metadata)``: every tensor as a
:class:`QTensor` (its blocks a view of the file's memory map on the CPU:
nothing is read until used; copied to the device otherwise) and the metadata
as plain Python values (ints, floats, bools, strings, nested lists).

``save_gguf(path, tensors, metadata)``: ``tensors`` maps names to QTensors
(written in their GGML type) or Tensors (f32 -> F32, f16 -> F16, bf16 -> BF16);
``metadata`` values are typed as GGUF tools type them (see :mod:`gguf_io`).
A file written here reads back with the same names, shapes, types, bytes and
metadata.  Reading checks the whole header against the file's size first:
a truncated or corrupt file raises :class:`GgufError` (a ``FileFormatError``)
naming the file and the byte offset.
"""

from __future__ import annotations

import os

import numpy as np

from ..device import Device
from ..errors import UnsupportedDTypeError
from ..tensor_class import Tensor
from ..ggml.gguf_io import GgufFile, GgufTensor, read_gguf, write_gguf
from .qtensor import QTensor
from ..ggml.types import ggml_type

_FLOAT_TYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def qtensor_of(t: GgufTensor, device=None) -> QTensor:
    """A GGUF file's tensor as a QTensor (a view of the file's map on the CPU)."""
    return QTensor(t.data, t.shape, t.ggml_type, device)


def load_gguf(path, device=None) -> tuple[dict, dict]:
    """``(tensors, metadata)`` of a GGUF file: name -> QTensor, key -> plain Python value."""
    f = read_gguf(path)
    device = None if device is None else Device.parse(device)
    tensors = {name: qtensor_of(t, device) for name, t in f.tensors.items()}
    metadata = {key: v.to_python() for key, v in f.metadata.items()}
    return tensors, metadata


def read(path) -> GgufFile:
    """The parsed file (typed metadata, memory-mapped tensors): see :func:`gguf_io.read_gguf`."""
    return read_gguf(path)


def _entry(name: str, value):
    if isinstance(value, QTensor):
        return GgufTensor(name, value.shape, value.ggml_type, value.numpy_bytes())
    if isinstance(value, Tensor):
        kind = _FLOAT_TYPES.get(str(value.dtype))
        if kind is None:
            raise UnsupportedDTypeError(
                f"save_gguf: tensor {name!r} is {value.dtype}; GGUF stores f32, f16 or bf16 tensors "
                "(or quantize it first)")
        arr = np.ascontiguousarray(value.contiguous().numpy())
        return GgufTensor(name, value.shape, ggml_type(kind), arr.reshape(-1).view(np.uint8))
    raise TypeError(f"save_gguf: tensor {name!r} is a {type(value).__name__}, expected a QTensor or a Tensor")


def save_gguf(path, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``tensors`` (name -> QTensor or float Tensor) and ``metadata`` as a GGUF v3 file."""
    if not hasattr(tensors, "items"):
        raise TypeError(f"save_gguf: tensors must be a dict of name -> QTensor/Tensor, got {type(tensors).__name__}")
    entries = [_entry(str(name), value) for name, value in tensors.items()]
    write_gguf(os.fspath(path), entries, dict(metadata or {}))


__all__ = ["load_gguf", "save_gguf", "read", "qtensor_of"]
