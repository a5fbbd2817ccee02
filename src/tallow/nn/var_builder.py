"""VarBuilder: named weights for building modules, from safetensors files or a VarMap.

``VarBuilder.from_safetensors(paths, dtype, device)`` memory-maps the files and
reads nothing but their headers up front: each ``get(shape, name)`` builds its
tensor from the mapped bytes (no copy on the CPU when the file's dtype is the
requested one), so a model only reads the tensors it asks for. ``pp(prefix)``
returns a builder whose names are relative to ``prefix``. A missing name or a
shape that differs from the one asked for raises an error naming the tensor,
the expected and found shapes and the file.
"""

from __future__ import annotations

import os

from .. import dtype as dt
from ..device import Device, cpu
from ..errors import ShapeMismatchError, TallowError
from ..safetensors_io import SafetensorsReader
from ..serialization import load_state_dict
from ..tensor_class import Tensor


class MissingTensorError(TallowError, KeyError):
    """The weights have no tensor of that name."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class MmapSafetensors(SafetensorsReader):
    """One safetensors file, memory-mapped; the header validated, the data read on demand."""


def _name(prefix, name):
    return f"{prefix}.{name}" if prefix else name


class _FileBackend:
    def __init__(self, paths):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.files = [MmapSafetensors(p) for p in paths]
        self.where = {}
        for f in self.files:
            for k in f.keys():
                self.where.setdefault(k, f)

    def describe(self):
        return ", ".join(f.path for f in self.files)

    def contains(self, name):
        return name in self.where

    def get(self, shape, name, init, dtype, device):
        f = self.where.get(name)
        if f is None:
            raise MissingTensorError(
                f"cannot find tensor {name!r} (expected shape {tuple(shape) if shape is not None else '?'}) "
                f"in {self.describe()}")
        found = f.shape(name)
        if shape is not None and found != tuple(shape):
            raise ShapeMismatchError(
                f"shape mismatch for tensor {name!r} in {f.path}: expected {tuple(shape)}, "
                f"found {found}")
        return f.get(name, dtype, device)

    def keys(self):
        return list(self.where)


class _DictBackend:
    def __init__(self, tensors):
        self.tensors = tensors

    def describe(self):
        return "the given tensors"

    def contains(self, name):
        return name in self.tensors

    def get(self, shape, name, init, dtype, device):
        t = self.tensors.get(name)
        if t is None:
            raise MissingTensorError(
                f"cannot find tensor {name!r} (expected shape {tuple(shape) if shape is not None else '?'}) "
                "in the given tensors")
        if shape is not None and t.shape != tuple(shape):
            raise ShapeMismatchError(
                f"shape mismatch for tensor {name!r}: expected {tuple(shape)}, found {t.shape}")
        if dtype is not None and t.dtype is not dtype:
            t = t.to_dtype(dtype)
        if device is not None:
            t = t.to_device(device)
        return t

    def keys(self):
        return list(self.tensors)


class _VarMapBackend:
    def __init__(self, varmap):
        self.varmap = varmap

    def describe(self):
        return "the VarMap"

    def contains(self, name):
        return name in self.varmap

    def get(self, shape, name, init, dtype, device):
        return self.varmap.get(shape, name, init, dtype, device)

    def keys(self):
        return list(self.varmap.data())


class _ZerosBackend:
    def describe(self):
        return "zeros"

    def contains(self, name):
        return True

    def get(self, shape, name, init, dtype, device):
        from ..creation import zeros

        if shape is None:
            raise ShapeMismatchError(f"VarBuilder.zeros: a shape is needed for {name!r}")
        return zeros(tuple(shape), dtype=dtype, device=device)

    def keys(self):
        return []


class VarBuilder:
    """Named tensors under a prefix, all of one dtype and device."""

    def __init__(self, backend, dtype=dt.f32, device=None, prefix: str = ""):
        self._backend = backend
        self.dtype = dt.DType.parse(dtype) if dtype is not None else dt.f32
        self.device = Device.parse(device) if device is not None else Device.cpu()
        self.prefix = prefix

    # -- constructors ------------------------------------------------------------------
    @staticmethod
    def from_safetensors(paths, dtype=dt.f32, device=cpu) -> "VarBuilder":
        """Memory-map one file or a list of (sharded) files."""
        return VarBuilder(_FileBackend(paths), dtype, device)

    from_mmaped_safetensors = from_safetensors

    @staticmethod
    def from_pth(path, dtype=dt.f32, device=cpu) -> "VarBuilder":
        """Tensors from a PyTorch checkpoint (``.pt``/``.pth``/``pytorch_model.bin``, read
        without running code from it), a sharded checkpoint's ``*.index.json``, or a model
        folder holding either or safetensors (candle's ``VarBuilder::from_pth``)."""
        return VarBuilder(_DictBackend(load_state_dict(path, device=device)), dtype, device)

    @staticmethod
    def from_tensors(tensors: dict, dtype=dt.f32, device=None) -> "VarBuilder":
        return VarBuilder(_DictBackend(dict(tensors)), dtype, device)

    @staticmethod
    def from_varmap(varmap, dtype=dt.f32, device=None) -> "VarBuilder":
        """Variables created on first ``get`` (with the init hint), shared afterwards."""
        return VarBuilder(_VarMapBackend(varmap), dtype, device)

    @staticmethod
    def zeros(dtype=dt.f32, device=None) -> "VarBuilder":
        return VarBuilder(_ZerosBackend(), dtype, device)

    # -- prefixes -------------------------------------------------------------------------
    def pp(self, prefix) -> "VarBuilder":
        """A builder for the names under ``prefix`` (joined with a dot)."""
        return VarBuilder(self._backend, self.dtype, self.device, _name(self.prefix, str(prefix)))

    push_prefix = pp

    def root(self) -> "VarBuilder":
        return VarBuilder(self._backend, self.dtype, self.device, "")

    def set_dtype(self, dtype) -> "VarBuilder":
        return VarBuilder(self._backend, dtype, self.device, self.prefix)

    def path(self, name: str) -> str:
        return _name(self.prefix, name)

    # -- tensors ------------------------------------------------------------------------------
    def contains_tensor(self, name: str) -> bool:
        return self._backend.contains(self.path(name))

    __contains__ = contains_tensor

    def get(self, shape, name: str, init=None, dtype=None) -> Tensor:
        """The tensor ``name`` (relative to the prefix); its shape must be ``shape``.

        ``shape`` None accepts any shape. ``init`` is the hint a VarMap uses to
        create a new variable.
        """
        if isinstance(shape, int):
            shape = (shape,)
        d = self.dtype if dtype is None else dt.DType.parse(dtype)
        return self._backend.get(None if shape is None else tuple(shape), self.path(name), init,
                                 d, self.device)

    def get_with_hints(self, shape, name: str, init) -> Tensor:
        return self.get(shape, name, init)

    def get_unchecked(self, name: str, dtype=None) -> Tensor:
        return self.get(None, name, dtype=dtype)

    def keys(self):
        """Names under this builder's prefix (relative to it)."""
        p = self.prefix + "." if self.prefix else ""
        return [k[len(p):] for k in self._backend.keys() if k.startswith(p)]

    def describe(self) -> str:
        return self._backend.describe()

    def __repr__(self):
        return f"VarBuilder(prefix={self.prefix!r}, dtype={self.dtype}, device={self.device}, from {self.describe()})"
