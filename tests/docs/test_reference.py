"""The API reference: every public name has a docstring, and the site builds strictly."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import tallow as tl

from .markdown_blocks import ROOT

MODULES = ["tallow", "tallow.nn", "tallow.nn.loss", "tallow.nn.lr_scheduler", "tallow.functional",
           "tallow.models", "tallow.quantized", "tallow.utils"]


def _public(module):
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in names:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            yield name, value


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_docstrings(name):
    import importlib

    module = importlib.import_module(name)
    missing = [n for n, v in _public(module) if not (v.__doc__ or "").strip()]
    assert not missing, f"{name}: no docstring on {missing}"


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import mkdocs, mkdocstrings"],
                                   capture_output=True).returncode != 0,
                    reason="the docs extra (mkdocs, mkdocstrings) is not installed")
def test_site_builds_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    tensor_page = (tmp_path / "reference" / "tensor" / "index.html").read_text()
    assert "tallow.Tensor.matmul" in tensor_page          # the reference was generated
