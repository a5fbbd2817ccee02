"""The texts of an input file: one a line, or one JSON value a line (JSONL).

A line ends at ``\\n`` (or ``\\r\\n``) and nowhere else. ``str.splitlines`` and
Python's universal newlines also break at ``\\r``, form feeds (which ``pdftotext``
writes between pages), U+2028 and other separators; JSON allows U+2028 unescaped
inside strings, and an id ``<path>:<n>`` counts lines, so every later id would shift.
``tallow embed`` with and without ``--ray`` read files through here, so both give a
line the same number.
"""

from __future__ import annotations

import json

from .errors import FileFormatError

JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read_utf8(path, data: bytes | None = None) -> str:
    """The text of ``path`` (or of ``data``, bytes read from it), a UTF-8 byte order
    mark dropped; a ``FileFormatError`` naming the file and the first bad byte if it
    is not UTF-8."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileFormatError(
            f"{path} is not UTF-8 text (byte {e.start} is {data[e.start]:#04x}); give one text "
            "per line or JSONL, encoded as UTF-8") from None


def numbered_lines(text: str):
    """``(n, line)`` for each line of ``text`` (n from 1), split at ``\\n`` only, a
    trailing ``\\r`` dropped; a final newline does not start another line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        yield n, line[:-1] if line.endswith("\r") else line


def text_items(path, text: str):
    """``(n, given id or None, text)`` of each non-blank line of a text file's content."""
    for n, line in numbered_lines(text):
        if line.strip():
            yield n, None, line


def jsonl_items(path, text: str):
    """``(n, given id or None, text)`` of each non-blank line of a JSONL file's content:
    ``{"text": ..., "id": ...}`` objects (id optional) or plain strings."""
    for n, line in numbered_lines(text):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise FileFormatError(f"{path}:{n}: not valid JSON ({e})") from None
        given = None
        if isinstance(item, dict):
            if "text" not in item:
                raise FileFormatError(f"{path}:{n}: a JSON object needs a \"text\" field")
            given = item.get("id")
            item = item["text"]
        if not isinstance(item, str):
            raise FileFormatError(f"{path}:{n}: expected a string or {{\"text\": ...}}")
        yield n, None if given is None else str(given), item


def file_items(path, text: str):
    """The items of ``text``, read from ``path``: JSONL for ``.jsonl``/``.ndjson``
    names, one text a line otherwise."""
    reader = jsonl_items if str(path).endswith(JSONL_SUFFIXES) else text_items
    return reader(path, text)
