"""Every code block of README.md and docs/*.md runs, and so does every example.

- ```python blocks: those of one file run in order in one namespace, in a scratch
  directory; a block opts out only with ``# doc-test: skip (reason)`` on its first
  line, and the opt-outs are counted against ``OPT_OUTS``.
- ```sh / ```bash lines starting with ``tallow ``: run through the CLI, with
  generation capped at a few tokens. A usage synopsis (``[--quick]``, ``[cpu|gpu]``)
  is not a command, ``tallow bench`` measures for minutes, and the distributed
  commands read a corpus and an index of the reader's: these are reported as skips
  with their reason.
- examples/*.py: run with ``TALLOW_EXAMPLE_STEPS`` set to a few steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .markdown_blocks import ROOT, markdown_files, python_blocks, tallow_commands

# The Python blocks that may not run here, by "file:line" (none today). Adding one is
# a deliberate edit of this table, with the reason in the block's marker comment.
OPT_OUTS: dict[str, str] = {
    "docs/distributed.md:63": "a Ray cluster, s3 buckets and a model folder of the reader's",
    "docs/distributed.md:149": "reads the index the embedding job writes",
    "docs/serve.md:145": "needs the langchain-openai package, not a dependency of tallow",
}

GENERATE_TOKENS = "4"
EXAMPLE_STEPS = "3"
CORPUS = "tallow is a small tensor library\ncandle is a minimalist ML framework\n"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["TALLOW_EXAMPLE_STEPS"] = EXAMPLE_STEPS
    return env


def _files_with_python():
    return [p for p in markdown_files() if python_blocks(p)]


@pytest.mark.parametrize("path", _files_with_python(), ids=lambda p: p.name)
def test_python_blocks_run(path: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)               # blocks may write files (w.gguf, ...)
    namespace: dict = {"__name__": "__doc_snippet__"}
    for block in python_blocks(path):
        if block.opted_out:
            assert block.where() in OPT_OUTS, f"{block.where()} opts out but is not in OPT_OUTS"
            continue
        # padded so that a traceback names the line of the Markdown file
        code = compile("\n" * (block.line - 1) + block.code, str(block.path), "exec")
        try:
            exec(code, namespace)
        except Exception as exc:  # the failing block's place in the docs, then the cause
            raise AssertionError(f"the code block at {block.where()} fails: {exc!r}") from exc


def test_opt_outs_are_counted():
    opted = sorted(b.where() for p in markdown_files() for b in python_blocks(p) if b.opted_out)
    assert opted == sorted(OPT_OUTS), "opt-out markers and OPT_OUTS disagree"
    total = sum(len(python_blocks(p)) for p in markdown_files())
    assert total > 0
    print(f"{total} python blocks, {len(opted)} opted out")


def _commands():
    return [pytest.param(argv, id=f"{block.where()} {' '.join(argv[:3])}")
            for path in markdown_files() for block, argv in tallow_commands(path)]


def _feasible(argv: list[str]) -> list[str]:
    """The command to run (generation capped), or a skip with the reason."""
    if any("[" in a or "|" in a for a in argv):
        pytest.skip("a usage synopsis, not a command")
    if argv[1] == "bench":
        pytest.skip("tallow bench measures for minutes (the bench tests cover its options)")
    if argv[1] == "serve" and "--help" not in argv:
        pytest.skip("tallow serve runs until stopped (tests/serve start it on a free port)")
    if "--ray" in argv or argv[1] == "search":
        pytest.skip("reads the reader's corpus files or the index a Ray embedding job writes")
    if argv[1] == "generate":
        argv = list(argv)
        if "--max-tokens" in argv:
            argv[argv.index("--max-tokens") + 1] = GENERATE_TOKENS
        else:
            argv += ["--max-tokens", GENERATE_TOKENS]
    return argv


@pytest.mark.slow
@pytest.mark.parametrize("argv", _commands())
def test_tallow_command_lines_run(argv, tmp_path):
    argv = _feasible(argv)
    (tmp_path / "corpus.txt").write_text(CORPUS)          # what `--input corpus.txt` reads
    done = subprocess.run([sys.executable, "-m", "tallow", *argv[1:]], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip() or any(tmp_path.iterdir())


EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
EXAMPLE_ARGS = {"generate_smollm2.py": ["--max-tokens", GENERATE_TOKENS]}


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_run(example: Path, tmp_path):
    done = subprocess.run([sys.executable, str(example), *EXAMPLE_ARGS.get(example.name, [])],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{example.name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{example.name} printed nothing"


def test_every_example_is_collected():
    assert {p.name for p in EXAMPLES} >= {
        "train_mlp.py", "train_convnet.py", "finetune_save_reload.py", "embed_search.py",
        "generate_smollm2.py", "gpt_char.py", "lstm_char.py", "mlp_dataloader.py",
        "cnn_classifier.py"}
