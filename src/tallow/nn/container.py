"""Containers: Sequential, ModuleList and ModuleDict (candle-pyo3 has all three)."""

from __future__ import annotations

from collections import OrderedDict

from .module import Module


class Sequential(Module):
    """Modules applied one after the other; built from modules or an OrderedDict."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def append(self, module) -> "Sequential":
        self.add_module(str(len(self._modules)), module)
        return self

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            # The slice keeps the names ("1", "2"...), as torch's does: its state_dict
            # keys are the ones of the full model.
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[idx]


class ModuleList(Module):
    """A list of submodules, registered as ``"0"``, ``"1"``, ..."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def append(self, module) -> "ModuleList":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module) -> None:
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[idx]

    def __setitem__(self, idx, module):
        key = list(self._modules)[idx]
        self.add_module(key, module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        del mods[idx]
        # Renumber, so the names stay "0".."n-1" (and state_dict keys match a new list).
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def pop(self, idx=-1):
        m = self[idx]
        del self[idx]
        return m

    def __iadd__(self, modules) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other) -> "ModuleList":
        return ModuleList(list(self) + list(other))

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward: iterate over it")


class ModuleDict(Module):
    """Submodules by name, in insertion order; a dict's methods over ``_modules``."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key):
        return self._modules.pop(key)

    def update(self, modules) -> None:
        """From a mapping or an iterable of ``(name, module)`` pairs; existing names are replaced."""
        pairs = modules.items() if hasattr(modules, "items") else modules
        for pair in pairs:
            name, module = pair  # a ValueError / TypeError here names a malformed pair
            self[name] = module

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward: index it")
