"""candle's scatter names with more ids along the dim than one GPU shader loop may
walk (lavapipe stops a loop after about 65,535 turns without a word): every id
still writes or adds, in order, as PyTorch's scatter / scatter_add / index_add."""

import numpy as np
import pytest
import torch

import tallow as tl


@pytest.mark.parametrize("n", [65535, 70000, 140001])
def test_scatter_add_and_index_add_over_long_walks(device, n):
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 5, size=(n, 2))
    ones = np.ones((n, 2), np.float32)
    want = torch.zeros(5, 2).scatter_add(0, torch.from_numpy(ids), torch.from_numpy(ones))
    got = tl.zeros((5, 2), device=device).scatter_add(
        tl.tensor(ids, device=device), tl.tensor(ones, device=device), 0)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    rows = rng.integers(0, 3, size=n)
    src = np.ones((4, n), np.float32)
    want = torch.zeros(4, 3).index_add(1, torch.from_numpy(rows), torch.from_numpy(src))
    got = tl.zeros((4, 3), device=device).index_add(
        tl.tensor(rows, device=device), tl.tensor(src, device=device), 1)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_scatter_keeps_the_last_write_past_the_loop_limit(device):
    n = 70000
    ids = np.zeros((n, 1), np.int64)
    ids[-1] = 1
    src = np.arange(n, dtype=np.float32).reshape(n, 1)
    got = tl.zeros((2, 1), device=device).scatter(
        tl.tensor(ids, device=device), tl.tensor(src, device=device), 0)
    # The ids are walked in order, so the repeated id 0 keeps its last value, n - 2.
    assert got.numpy().ravel().tolist() == [n - 2, n - 1]
