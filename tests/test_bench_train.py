"""The training-step benchmark measures the same computation on both sides: tallow's
and PyTorch's steps start from the same weights and data and must give the same
losses, step after step (so a ratio in ``tallow bench train`` compares like with like)."""

import numpy as np
import pytest
import torch

from tallow.bench import train


@pytest.mark.parametrize("name", ["mlp", "mlp_idiom", "conv", "resnet_block"])
def test_bench_steps_match_torch_over_three_steps(name):
    ours, theirs = train.tallow_steps()[name], train.torch_steps(torch)[name]
    for _ in range(3):  # the SGD updates must agree too, or later losses drift apart
        a = float(ours().numpy())
        b = float(theirs().detach().numpy())
        np.testing.assert_allclose(a, b, rtol=1e-4)
