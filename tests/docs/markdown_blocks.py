"""Fenced code blocks of the project's Markdown files, for the doc-snippet test.

A ```python block may opt out of running only with the marker comment
``# doc-test: skip (reason)`` on its first line, for code that cannot run here
(a cluster address, a file the reader must supply); the test counts opt-outs.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_MARKER = "# doc-test: skip"
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int          # 1-based line of the first code line
    language: str
    code: str

    @property
    def opted_out(self) -> bool:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.startswith(SKIP_MARKER)

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    """README.md and every docs/*.md page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one file, in order."""
    found, language, start, lines = [], None, 0, []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        fence = _FENCE.match(text.strip()) if text.lstrip().startswith("```") else None
        if language is None and fence:
            language, start, lines = fence.group(1).lower(), number + 1, []
        elif language is not None and text.strip() == "```":
            found.append(Block(path, start, language, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(text)
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.language in ("python", "py")]


def tallow_commands(path: Path) -> list[tuple[Block, list[str]]]:
    """The command lines of ```sh/```bash blocks that start with ``tallow ``, as argv lists.

    Backslash continuations are joined and ``#`` comments dropped.
    """
    commands = []
    for block in blocks(path):
        if block.language not in ("sh", "bash", "shell", "console"):
            continue
        for line in block.code.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("tallow "):
                commands.append((block, shlex.split(line, comments=True)))
    return commands
