"""The multi-node path: a two-node Ray cluster on one machine (ray.cluster_utils)."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

from support.ray_corpus import read_index  # noqa: E402

from tallow.distributed import embed_files  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()
    os.environ.pop("RAY_ADDRESS", None)  # the Cluster sets it; the cluster is gone


def test_two_nodes_embed_every_row_once(cluster, corpus_files, model_dir, tmp_path):
    from tallow.models.sentence import SentenceEmbedder

    paths, expected = corpus_files
    out = str(tmp_path / "index")
    manifest = embed_files(paths, out, model_dir, address=cluster.address, num_workers=2,
                           keep_text=False, block_rows=5, progress=False)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    assert manifest["rows"] == len(expected) and manifest["has_text"] is False
    index = read_index(out)
    assert sorted(index) == sorted(expected)
    assert all(text is None for text, _ in index.values())
    ids = sorted(expected)
    ref = SentenceEmbedder.from_pretrained(model_dir).encode([expected[i] for i in ids],
                                                             normalize=None)
    got = np.stack([index[i][1] for i in ids])
    cos = np.sum(got * ref, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() >= 0.999999
