"""One compiled kernel module of ``native/`` (``_conv``, ``_winograd``), loaded at first
use: the native package imports parts of tallow that import the modules asking."""

from __future__ import annotations

import importlib


class NativeModule:
    """``module()`` is the compiled module when it is built and the compiled kernels are
    not switched off (``TALLOW_NO_NATIVE``, read at each call), else None; it switches
    the module to ``TALLOW_NATIVE_ISA``'s instruction set once, and makes the compiled
    pool follow ``set_num_threads`` at each call."""

    __slots__ = ("_name", "_checked", "_module", "_native")

    def __init__(self, name: str):
        self._name = name
        self._checked = False
        self._module = None
        self._native = None

    def __call__(self):
        if not self._checked:
            # (the module set before the flag: another thread may ask at the same time)
            from . import native

            try:
                mod = importlib.import_module(f"{native.__name__}.{self._name}")
                native.apply_isa(mod)  # narrower builds, as on an older CPU
            except ImportError:  # not built: the NumPy / BLAS paths serve
                mod = None
            self._module, self._native = mod, native
            self._checked = True
        mod = self._module
        if mod is None or self._native.disabled():
            return None
        self._native.sync_threads()
        return mod
