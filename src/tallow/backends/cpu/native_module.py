"""One compiled kernel module of ``native/`` (``_conv``), loaded at first
use: the native package imports parts of tallow that import the modules asking."""

from __future__ import annotations


class NativeModule:
    """``module()`` is the compiled module when it is built and the compiled kernels are
    not switched off (``TALLOW_NO_NATIVE``, read at each call), else None (see
    :func:`native.loader.load`); it makes the compiled pool follow ``set_num_threads``
    at each call."""

    __slots__ = ("_name", "_native")

    def __init__(self, name: str):
        self._name = name
        self._native = None

    def __call__(self):
        native = self._native
        if native is None:  # (imported at first use: the native package imports modules asking)
            from . import native

            self._native = native
        mod = native.loader.load(self._name)
        if mod is not None:
            native.sync_threads()
        return mod
