"""Argument types for the ``tallow`` command, checked before any work starts.

A benchmark runs for minutes before it writes ``--json`` or ``--plot``: a path that
cannot be written, or a missing matplotlib, must fail at once with a usage message,
not as a traceback at the end. Counts are checked here too, so ``--repeats 0`` is
an error rather than a silent "use the default".
"""

from __future__ import annotations

import argparse
import os


def _number(name: str, parse, accepts, expected: str, doc: str):
    """An argparse type called ``name``: ``parse(text)`` where ``accepts`` it, else a
    usage error saying what was ``expected`` (text that does not parse is refused the
    same way)."""

    def read(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    read.__name__ = read.__qualname__ = name
    read.__doc__ = doc
    return read


INF = float("inf")
positive_int = _number("positive_int", int, lambda n: n >= 1, "a positive integer", "An integer >= 1.")
non_negative_int = _number("non_negative_int", int, lambda n: n >= 0, "an integer >= 0", "An integer >= 0.")
positive_float = _number("positive_float", float, lambda x: 0.0 < x < INF, "a finite number > 0",
                         "A finite number > 0 (``--repeat-penalty``).")
non_negative_float = _number("non_negative_float", float, lambda x: 0.0 <= x < INF, "a finite number >= 0",
                             "A finite number >= 0 (``--temperature``: 0 is greedy decoding).")
probability = _number("probability", float, lambda x: 0.0 < x <= 1.0, "a number in (0, 1]",
                      "A number in (0, 1] (``--top-p``).")


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
