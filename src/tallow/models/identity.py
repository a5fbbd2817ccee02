"""A model directory's identity: its name and a hash of its content.

An embedding index records which model made its vectors, so that queries are
embedded by the same one. A path would break as soon as the index or the model is
copied elsewhere; the name says what to look for and the hash whether a directory
found is the same model (weights, config, tokenizer and pooling files alike).
"""

from __future__ import annotations

import hashlib
import os


def _model_files(model_dir: str) -> list:
    """Every regular file under ``model_dir`` (relative, sorted), hidden ones and
    Python caches left out."""
    out = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for f in files:
            if not f.startswith("."):
                out.append(os.path.relpath(os.path.join(root, f), model_dir))
    return sorted(out)


def model_name(model_dir) -> str:
    """The directory's name (a model shipped inside a package as ``.../pkg/model``: the
    package's)."""
    path = os.path.normpath(os.path.abspath(os.fspath(model_dir)))
    name = os.path.basename(path)
    return os.path.basename(os.path.dirname(path)) if name == "model" else name


def content_hash(model_dir) -> str:
    """SHA-256 over the names and bytes of the directory's files."""
    model_dir = os.fspath(model_dir)
    h = hashlib.sha256()
    for rel in _model_files(model_dir):
        h.update(rel.replace(os.sep, "/").encode() + b"\0")
        with open(os.path.join(model_dir, rel), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def identity(model_dir) -> dict:
    """``{"name": ..., "sha256": ...}`` of a model directory."""
    return {"name": model_name(model_dir), "sha256": content_hash(model_dir)}
