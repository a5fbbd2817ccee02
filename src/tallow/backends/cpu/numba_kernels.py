"""The CPU backend's modules of numba kernels, imported on first use.

A module of numba kernels (``conv_kernels``, ``loss_kernels``) is imported when one
of its kernels is first needed, once per process: importing numba and loading its
on-disk cache costs a noticeable part of a second. ``load`` gives None when numba is
missing or broken or ``TALLOW_NO_NUMBA`` is on; the caller then takes its NumPy path.
"""

from __future__ import annotations

import importlib

from ... import config

_MODULES: dict = {}


def load(name: str):
    """The kernel module ``tallow.backends.cpu.<name>``, or None (see above)."""
    if name not in _MODULES:
        module = None
        if not config.settings.no_numba:
            try:
                module = importlib.import_module(f"{__package__}.{name}")
            except Exception:  # numba missing or broken: the NumPy path serves
                module = None
        _MODULES[name] = module
    return _MODULES[name]
