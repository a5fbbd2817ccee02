"""Parsing the package's source with ``ast`` in the tests that read it.

CPython 3.11 can raise a spurious ``SystemError: AST constructor recursion depth
mismatch`` from ``ast.parse`` (python/cpython#106905: the converter keeps its depth
in interpreter-wide state, which another thread can move while a tree is built;
seen under pytest-xdist with the library's worker threads alive). The parse is
retried then; a real syntax error still raises.
"""

from __future__ import annotations

import ast
import pathlib

ATTEMPTS = 3


def parse_file(path: pathlib.Path) -> ast.Module:
    text = path.read_text(encoding="utf-8")
    for attempt in range(ATTEMPTS):
        try:
            return ast.parse(text)
        except SystemError:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
