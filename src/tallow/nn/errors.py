"""Errors of tallow.nn: an option tallow does not implement, an optimiser that lost its
variables."""

from __future__ import annotations

from ..errors import TallowError


class UnsupportedOptionError(TallowError, ValueError):
    """A layer, loss or optimiser was given a PyTorch option tallow does not implement."""


class OptimizerVariablesError(TallowError, RuntimeError):
    """None of an optimiser's variables received a gradient: they were replaced in the
    model (e.g. by ``requires_grad_(True)`` on a frozen model), so the optimiser would
    silently stop training it."""
