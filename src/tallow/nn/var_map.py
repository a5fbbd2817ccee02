"""VarMap: the trainable variables of a model, by name (candle-nn's VarMap)."""

from __future__ import annotations

from collections import OrderedDict

from .. import dtype as dt
from ..errors import ShapeMismatchError
from ..var import Var
from . import init as _init


class VarMap:
    """Variables created on demand through ``VarBuilder.from_varmap``; saved and loaded
    as safetensors."""

    def __init__(self):
        self._vars = OrderedDict()

    def __contains__(self, name):
        return name in self._vars

    def __len__(self):
        return len(self._vars)

    def get(self, shape, name, init=None, dtype=dt.f32, device=None) -> Var:
        """The variable ``name``, created with ``init`` (default Kaiming normal) if new."""
        v = self._vars.get(name)
        if v is not None:
            if shape is not None and v.shape != tuple(shape):
                raise ShapeMismatchError(
                    f"shape mismatch for variable {name!r}: expected {tuple(shape)}, found {v.shape}")
            return v
        if shape is None:
            raise ShapeMismatchError(f"VarMap: a shape is needed to create variable {name!r}")
        init = init or _init.DEFAULT_KAIMING_NORMAL
        v = Var(init.tensor(tuple(shape), dtype=dtype, device=device))
        self._vars[name] = v
        return v

    def all_vars(self) -> list:
        return list(self._vars.values())

    def data(self) -> "OrderedDict[str, Var]":
        return self._vars

    def insert(self, name, var: Var) -> None:
        self._vars[name] = var if isinstance(var, Var) else Var(var)

    def set_one(self, name, value) -> None:
        if name not in self._vars:
            raise KeyError(f"VarMap: no variable named {name!r}")
        self._vars[name].set(value)

    def save(self, path) -> None:
        from ..utils import save_safetensors

        save_safetensors(path, {k: v.detach() for k, v in self._vars.items()})

    def load(self, path) -> None:
        """Set every variable from the file (every name must be there, shapes equal)."""
        from .var_builder import MissingTensorError, MmapSafetensors

        f = MmapSafetensors(path)
        for name, v in self._vars.items():
            if name not in f:
                raise MissingTensorError(f"cannot find tensor {name!r} in {path}")
            t = f.get(name, v.dtype, v.device)
            if t.shape != v.shape:
                raise ShapeMismatchError(
                    f"shape mismatch for tensor {name!r} in {path}: expected {v.shape}, found {t.shape}")
            v.set(t)
