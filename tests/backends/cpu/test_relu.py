"""ReLU of CPU storage: every size path (a cached zero array of the input's shape,
rows against a zero row, a strided input against the scalar) gives NumPy's
``maximum(x, 0)`` bit for bit, NaN payloads and signed zeros included, and PyTorch's
values."""

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.backends.cpu import elementwise

SIZES = [7, elementwise.ZEROS_MAX, elementwise.ZEROS_MAX + 1, 3 * elementwise.ZERO_ROW + 5,
         200_003]


def _input(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    if x.dtype.kind == "f":
        x[::97] = np.nan
        x[1::89] = -0.0
        x[2::101] = -np.inf
    return x


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_relu_is_numpy_maximum_bit_for_bit(n, dtype):
    x = _input(n, dtype)
    want = np.maximum(x, x.dtype.type(0))
    for got in (elementwise._relu(x), elementwise._relu(x, out=np.empty_like(x))):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    inplace = x.copy()
    elementwise._relu(inplace, out=inplace)
    np.testing.assert_array_equal(inplace.view(np.uint8), want.view(np.uint8))
    strided = np.repeat(x, 2)[::2]  # not contiguous: the scalar path
    np.testing.assert_array_equal(elementwise._relu(strided).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("shape", [(32, 8, 26, 26), (3, 70001)])
def test_tensor_relu_matches_torch(shape):
    x = _input(int(np.prod(shape)), np.float32, seed=1).reshape(shape)
    got = tl.Tensor(x).relu().numpy()
    np.testing.assert_array_equal(got, torch.relu(torch.from_numpy(x)).numpy())
