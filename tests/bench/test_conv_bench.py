"""``tallow bench conv`` compares like with like: for every shape of its grid,
tallow's and PyTorch's forward outputs and gradients agree."""

import numpy as np
import pytest
import torch

from tallow.bench import conv


@pytest.mark.parametrize("shape", conv.SHAPES, ids=[s[0] for s in conv.SHAPES])
def test_bench_conv_shapes_compute_what_torch_computes(shape):
    ours = conv.tallow_fns(shape, np.random.default_rng(3))
    theirs = conv.torch_fns(torch, shape, np.random.default_rng(3))
    np.testing.assert_allclose(ours[0]().numpy(), theirs[0]().numpy(), rtol=1e-3, atol=1e-3)
    for a, b in zip(ours[1](), theirs[1]()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-2)


def test_quick_subset_is_part_of_the_grid():
    assert set(conv.QUICK) <= set(range(len(conv.SHAPES)))
