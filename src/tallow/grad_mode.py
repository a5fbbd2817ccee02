"""``tl.no_grad()``: a thread's switch that stops ops from recording a graph.

Inside ``with tl.no_grad():`` (or a function decorated with ``@tl.no_grad()``) an op
over a Var records nothing and returns a plain tensor, and in-place writes into a
Var are allowed (an optimiser's ``p -= lr * p.grad``), as in PyTorch. The state is
per thread, so a training thread and an inference thread do not see each other's
switch. ``Op`` reads ``GRAD_MODE.enabled`` when it is built (op.py): one attribute
read, and only on the path of an op whose input is tracked.
"""

from __future__ import annotations

import functools
import threading


class _GradMode(threading.local):
    """``enabled``: whether ops over tracked tensors record (True unless inside no_grad);
    ``fill_grad``: whether ``backward()`` also sums into each Var's ``.grad`` (False while
    a compiled function records: a replay could not update ``.grad``)."""

    enabled = True
    fill_grad = True


GRAD_MODE = _GradMode()


def is_grad_enabled() -> bool:
    """True unless the calling thread is inside ``no_grad()``."""
    return GRAD_MODE.enabled


class _GradSwitch:
    """A context manager and decorator that sets the thread's grad mode to ``_value``
    and restores the previous mode on exit (so they nest)."""

    _value = True

    def __init__(self):
        self._saved = []

    def __enter__(self):
        self._saved.append(GRAD_MODE.enabled)
        GRAD_MODE.enabled = self._value
        return self

    def __exit__(self, *exc):
        GRAD_MODE.enabled = self._saved.pop()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def switched(*args, **kwargs):
            with type(self)():
                return func(*args, **kwargs)

        return switched


class no_grad(_GradSwitch):  # noqa: N801  (PyTorch's name)
    """``with tl.no_grad():`` / ``@tl.no_grad()``: no graph is recorded, and in-place
    writes into Vars are allowed."""

    _value = False


class enable_grad(_GradSwitch):  # noqa: N801  (PyTorch's name)
    """``with tl.enable_grad():`` records again inside a ``no_grad()`` block."""

    _value = True
