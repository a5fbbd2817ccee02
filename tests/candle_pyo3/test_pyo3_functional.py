"""Port of candle-pyo3/tests/native/test_functional.py, plus the functions that
candle-pyo3's ``candle.functional`` and ``candle.nn`` stubs declare."""

import tallow as candle
from tallow import Tensor
from tallow import functional as F


def test_arange():
    tensor = F.arange(0, 10)
    assert tensor.shape == (10,)
    assert str(tensor.dtype) == str(candle.f32)
    assert tensor.values() == list(range(10))


def test_rsqrt():
    tensor = F.rsqrt(Tensor([4.0, 16.0]))
    assert tensor.shape == (2,)
    assert str(tensor.dtype) == str(candle.f32)
    assert tensor.values() == [0.5, 0.25]


# Not in candle's test file: the other functions its functional / nn stubs declare,
# checked against the Tensor methods they stand for.
def test_functional_and_nn_functions_exist_and_agree():
    x = candle.randn((1, 2, 4, 4))
    for name in ("gelu", "relu", "silu", "tanh"):
        assert getattr(F, name)(x).values() == getattr(x, name)().values(), name
    assert F.softmax(x, 1).values() == candle.nn.softmax(x, 1).values()
    assert candle.nn.silu(x).values() == x.silu().values()
    # candle-pyo3's pools default to stride 1; tallow's follow PyTorch and default it to
    # the kernel size, as the Tensor methods do (docs/differences.md). stride=1 is explicit.
    assert F.max_pool2d(x, 2).shape == (1, 2, 2, 2) and F.avg_pool2d(x, 2, 1).shape == (1, 2, 3, 3)
    assert F.max_pool2d(x, 2, 1).values() == x.max_pool2d(2, 1).values()
    assert F.max_pool2d(x, 2).values() == x.max_pool2d(2).values()
    assert F.matmul(x, x).values() == x.matmul(x).values()
