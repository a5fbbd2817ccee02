"""Modules with real QTensors: candle-pyo3's test_module / test_linear quantized cases, and more."""

import numpy as np
import pytest

import tallow as tl
from tallow.nn import Linear, Module
from tallow.quantized import QMatMul, QTensor


def test_module_can_load_quantized_tensors():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.randn((16, 256))
            self._quantizable_buffers.add("t")

    a = A()
    a.load_state_dict({"t": tl.ones((16, 256)).quantize("q4_0")})
    assert isinstance(a.t, QTensor) and isinstance(a.t, tl.QTensor)
    assert a.t.ggml_dtype == "Q4_0"
    assert isinstance(a.state_dict()["t"], QTensor)


def test_module_dequantizes_tensors_automatically():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.randn((16, 256))

    a = A()
    q = (tl.ones((16, 256)) * 0.5).quantize("q4_0")
    a.load_state_dict({"t": q})
    assert isinstance(a.t, tl.Tensor)
    np.testing.assert_array_equal(a.t.numpy(), q.dequantize().numpy())


def test_quantizable_float_blocks_become_tensors():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.randn((4, 32))
            self._quantizable_buffers.add("t")

    a = A()
    for kind in ("f32", "f16", "bf16"):
        q = tl.randn((4, 32)).quantize(kind)
        a.t = q
        assert isinstance(a.t, tl.Tensor) and a.t.dtype == tl.f32
        np.testing.assert_array_equal(a.t.numpy(), q.dequantize().numpy())
    with pytest.raises(RuntimeError, match="size mismatch"):
        a.load_state_dict({"t": tl.randn((4, 64)).quantize("q8_0")})


@pytest.mark.parametrize("shape", [(8, 384), (16, 8, 384)])
def test_quantized_linear_layer_can_forward(shape):
    # candle-pyo3's test_quantized_linear_layer_can_forward_a_{singular,batched}_input, with values
    linear = Linear(384, 1536)
    dense = linear.weight
    linear.weight = linear.weight.quantize("q4_0")
    assert isinstance(linear.weight, QTensor)
    x = tl.randn(shape)
    out = linear.forward(x)
    assert out.shape == shape[:-1] + (1536,)
    expected = QMatMul(linear.weight).forward(x).broadcast_add(linear.bias)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    # and it is close to the dense layer (4-bit weights, 8-bit activations)
    ref = x.numpy() @ dense.numpy().T + linear.bias.numpy()
    err = np.abs(out.numpy() - ref).max() / np.abs(ref).max()
    assert 1e-4 < err < 0.1


@pytest.mark.parametrize("kind", ["f16", "bf16", "f32"])
def test_linear_with_float_blocks_takes_f32_input(kind):
    # candle's QMatMul runs F16/BF16 weights as dequantized f32 products: an f32
    # input works, through load_state_dict as through from_weights.
    import torch

    w = tl.randn((8, 64)).quantize(kind)
    b = tl.randn((8,))
    x = tl.randn((3, 64))
    ref = torch.nn.functional.linear(torch.from_numpy(x.numpy()),
                                     torch.from_numpy(w.dequantize().numpy()),
                                     torch.from_numpy(b.numpy())).numpy()
    lin = Linear(64, 8)
    lin.load_state_dict({"weight": w, "bias": b})
    np.testing.assert_allclose(lin(x).numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(Linear.from_weights(w, b)(x).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_linear_over_a_qmatmul_and_from_weights():
    w = tl.randn((32, 256)).quantize("q6k")
    b = tl.randn((32,))
    x = tl.randn((3, 256))
    a = Linear.from_weights(w, b)(x)
    c = Linear.from_weights(QMatMul(w), b)(x)
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    np.testing.assert_array_equal(a.numpy(), (w.matmul_t(x) + b).numpy())


def test_quantized_state_dict_round_trips_through_gguf(tmp_path):
    class Net(Module):
        def __init__(self):
            super().__init__()
            self.fc1 = Linear(256, 64)
            self.fc2 = Linear(64, 8)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())

    net = Net()
    net.fc1.weight = net.fc1.weight.quantize("q4k")
    x = tl.randn((5, 256))
    before = net(x).numpy()
    path = tmp_path / "net.gguf"
    tl.utils.save_gguf(path, dict(net.state_dict()), {"general.architecture": "net"})
    tensors, meta = tl.utils.load_gguf(path)
    assert meta == {"general.architecture": "net"}
    assert tensors["fc1.weight"].ggml_dtype == "Q4K" and tensors["fc2.weight"].ggml_dtype == "F32"
    other = Net()
    other.load_state_dict(tensors)
    assert isinstance(other.fc1.weight, QTensor) and isinstance(other.fc1.bias, tl.Tensor)
    assert isinstance(other.fc2.weight, tl.Tensor)  # F32 blocks: a plain tensor
    np.testing.assert_array_equal(other(x).numpy(), before)
    other.cpu()
    assert other.fc1.weight.device == "cpu"
