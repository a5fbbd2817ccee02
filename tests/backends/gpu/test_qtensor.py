"""QTensor on a GPU: the blocks live there; dequantize and products use the GPU kernels
(tallow.backends.gpu.quantized) for the types they support, else the f32 fallback.

Every test needs a WebGPU adapter (the ``gpu`` fixture); the kernel tests also need
``tallow.backends.gpu.quantized`` and skip without it.  The CPU is the reference.
"""

import numpy as np
import pytest

import tallow as tl
from tallow.quantized import QMatMul, QTensor
from tallow.backends.gpu import quantized as gpu_kernels

pytestmark = pytest.mark.gpu
KERNEL_TYPES = ["Q4_0", "Q8_0", "Q4K", "Q6K"]
F = np.float32


def kernels_or_skip(name=None):
    if name is not None and not gpu_kernels.supported(name):
        pytest.fail(f"the GPU quantized kernels do not support {name}, which it must")
    return gpu_kernels


def weight(name, n=48, k=512, seed=0):
    rng = np.random.default_rng(seed)
    return tl.Tensor((rng.standard_normal((n, k)) * rng.uniform(0.1, 2, (n, 1))).astype(F)).quantize(name)


def test_blocks_move_to_the_gpu_and_back(gpu):
    q = weight("Q4K")
    g = q.to_device(gpu)
    assert g.device == gpu and g.ggml_dtype == "Q4K" and g.shape == q.shape
    assert isinstance(g.raw, tl.Tensor) and g.raw.device == gpu and g.raw.dtype == tl.u8
    assert g.to_bytes() == q.to_bytes()
    assert g.to_device("cpu").to_bytes() == q.to_bytes() and g.to_device(gpu) is g
    assert QTensor.from_bytes(q.to_bytes(), q.shape, "q4k", device=gpu).device == gpu
    on_gpu = tl.randn((4, 64), device=gpu).quantize("q8_0")
    assert on_gpu.device == gpu and on_gpu.to_bytes() == on_gpu.to_device("cpu").to_bytes()


@pytest.mark.parametrize("name", ["Q5_1", "Q3K"])
def test_fallback_for_types_without_kernels(gpu, name, monkeypatch):
    # as if the GPU kernels lacked this type: the device names no kernels for it
    monkeypatch.setattr(type(gpu._state), "qmatmul_path", lambda state, ggml_type: None)
    q = weight(name)
    g = q.to_device(gpu)
    d = g.dequantize()
    assert d.device == gpu and d.dtype == tl.f32
    np.testing.assert_array_equal(d.numpy(), q.dequantize().numpy())
    qm = QMatMul(g)
    assert qm.path == "gpu-dequantized"
    x = np.random.default_rng(1).standard_normal((3, 512)).astype(F)
    y = qm.forward(tl.Tensor(x, device=gpu))
    assert y.device == gpu and y.shape == (3, 48)
    np.testing.assert_allclose(y.numpy(), x @ q.dequantize().numpy().T, rtol=1e-4, atol=1e-4)
    with pytest.raises(tl.DeviceMismatchError):
        qm.forward(tl.Tensor(x))


@pytest.mark.parametrize("name", KERNEL_TYPES)
def test_gpu_dequantize_matches_cpu(gpu, name):
    kernels_or_skip(name)
    q = weight(name, seed=2)
    d = q.to_device(gpu).dequantize()
    assert d.device == gpu and d.shape == q.shape
    np.testing.assert_allclose(d.numpy(), q.dequantize().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", KERNEL_TYPES)
@pytest.mark.parametrize("batch", [(1,), (5,), (2, 3)])
def test_gpu_qmatmul_matches_cpu(gpu, name, batch):
    kernels_or_skip(name)
    q = weight(name, seed=3)
    g = q.to_device(gpu)
    qm = QMatMul(g)
    assert qm.path == "gpu"
    x = np.random.default_rng(4).standard_normal(batch + (512,)).astype(F)
    y = qm.forward(tl.Tensor(x, device=gpu))
    assert y.device == gpu and y.shape == batch + (48,)
    cpu_q = q.matmul_t(tl.Tensor(x)).numpy()  # ggml's product (8-bit activations)
    cpu_f = x @ q.dequantize().numpy().T  # the f32 product with the same weights
    scale = np.abs(x) @ np.abs(q.dequantize().numpy()).T
    # A kernel may quantize the activations (as ggml's CPU code) or not (as its Metal
    # matrix-vector kernels): either way it sits within the activation rounding of both.
    assert (np.abs(y.numpy() - cpu_q) <= 1e-2 * scale).all()
    assert (np.abs(y.numpy() - cpu_f) <= 1e-2 * scale).all()
    # strided input
    xt = tl.Tensor(np.ascontiguousarray(x.reshape(-1, 512).T), device=gpu).t()
    np.testing.assert_allclose(qm.forward(xt).numpy(), y.numpy().reshape(-1, 48), rtol=1e-5, atol=1e-5)


def test_quantized_linear_on_the_gpu(gpu):
    kernels_or_skip("Q4_0")
    lin = tl.nn.Linear(256, 32)
    lin.weight = lin.weight.quantize("q4_0")
    x = tl.randn((4, 256))
    want = lin(x).numpy()
    lin.gpu()
    assert lin.weight.device == gpu
    got = lin(x.to_device(gpu)).numpy()
    scale = np.abs(x.numpy()) @ np.abs(lin.weight.dequantize().numpy()).T
    assert (np.abs(got - want) <= 1e-2 * scale + 1e-5).all()
