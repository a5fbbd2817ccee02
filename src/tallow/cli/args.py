"""Argument types for the ``tallow`` command, checked before any work starts.

A benchmark runs for minutes before it writes ``--json`` or ``--plot``: a path that
cannot be written, or a missing matplotlib, must fail at once with a usage message,
not as a traceback at the end. Counts are checked here too, so ``--repeats 0`` is
an error rather than a silent "use the default".
"""

from __future__ import annotations

import argparse
import os


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def non_negative_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return n


def positive_float(text: str) -> float:
    """A finite number > 0 (``--repeat-penalty``)."""
    try:
        x = float(text)
    except ValueError:
        x = 0.0
    if not (0.0 < x < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return x


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (``--temperature``: 0 is greedy decoding)."""
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not (0.0 <= x < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return x


def probability(text: str) -> float:
    """A number in (0, 1] (``--top-p``)."""
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not (0.0 < x <= 1.0):
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return x


def output_file(text: str) -> str:
    """A file path whose folder exists and is writable (the file itself may not exist)."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file name")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"no such directory: {folder}")
    if not os.access(folder, os.W_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text}")
    return text


def output_path(text: str) -> str:
    """A file or directory to write: its folder exists and is writable (``tallow embed
    --output`` is a file, or with ``--ray`` a directory)."""
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"no such directory: {folder}")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {folder}")
    return text


def plot_file(text: str) -> str:
    path = output_file(text)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError(
            "drawing needs matplotlib (pip install 'tallow[bench]')") from None
    return path
