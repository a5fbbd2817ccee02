"""``tallow bench gemm`` compares like with like: for every shape, tallow's product, its
BLAS path, NumPy's and PyTorch's agree (within f32 rounding)."""

import numpy as np
import pytest
import torch

from tallow.bench import gemm as bench

SHAPES = bench._shapes(np.random.default_rng(0))
# The 1024^3 product takes the same code path as 512^3 and only costs time here.
CHECKED = [s for s in SHAPES if s[1].shape[-2] * s[1].shape[-1] * s[2].shape[-1] <= 300_000_000]


@pytest.mark.parametrize("name,a,b", CHECKED, ids=[s[0] for s in CHECKED])
def test_every_candidate_computes_the_same_product(name, a, b):
    results = {k: np.asarray(f()) for k, f in bench.candidates(a, b, torch).items()}
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    for k, got in results.items():
        assert got.shape == expected.shape, k
        assert np.all(np.abs(got - expected) <= 4 * a.shape[-1] * np.finfo(np.float32).eps * scale + 1e-30), k


def test_quick_subset_is_part_of_the_list():
    assert set(bench.QUICK) <= set(range(len(SHAPES)))
