"""The ``tallow`` command line: one module per sub-command (info, bench, embed,
generate), assembled by :func:`main`."""

from .main import main

__all__ = ["main"]
