"""mkdocs hook: the Tensor reference page's alphabetical member index, made from the
class itself at build time so that it lists every public method and property there is.

The page marks the place with ``<!-- tensor-member-index -->``. The index is put in
once the page is rendered: a name links to its entry on the page (mkdocstrings' anchor
``tallow.Tensor.<name>``) where the reference has one; members that the static
reader cannot see (attached to the class at import time) are listed unlinked."""

from __future__ import annotations

import html
import inspect
import re

MARKER = "<!-- tensor-member-index -->"


def _members() -> list[str]:
    import tallow

    return sorted((n for n, _ in inspect.getmembers(tallow.Tensor) if not n.startswith("_")),
                  key=str.lower)


def _index(anchors: set) -> str:
    by_letter: dict[str, list[str]] = {}
    for name in _members():
        code = f"<code>{html.escape(name)}</code>"
        if f"tallow.Tensor.{name}" in anchors:
            code = f'<a href="#tallow.Tensor.{name}">{code}</a>'
        by_letter.setdefault(name[0].upper(), []).append(code)
    rows = "".join(f"<p><strong>{letter}</strong> {' · '.join(names)}</p>\n"
                   for letter, names in by_letter.items())
    return f'<div class="tensor-member-index">\n{rows}</div>'


def on_page_content(content, page, config, files):
    if MARKER not in content:
        return content
    anchors = set(re.findall(r'id="(tallow\.Tensor\.[A-Za-z0-9_]+)"', content))
    return content.replace(MARKER, _index(anchors))
