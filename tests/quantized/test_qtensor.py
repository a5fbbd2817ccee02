"""QTensor and QMatMul at the Tensor level: candle-pyo3's API, the gguf package's bytes, ggml's products."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gq

import tallow as tl
from support.quantized_reference import reference_matmul
from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast
from tallow.quantized import QMatMul, QTensor, ggml_type, matmul_t_dequantized

F = np.float32
FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2k", "q3k", "q4k", "q5k", "q6k", "q8k",
           "f16", "f32", "bf16"]
GGUF_QUANTIZE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32"]
GGUF_DEQUANTIZE = GGUF_QUANTIZE + ["Q2K", "Q3K", "Q4K", "Q5K", "Q6K"]
PATHS = (["native"] if native.available() else []) + (["numba", "numpy"] if fast.available() else ["numpy"])


def gguf_type(name):
    return GGMLQuantizationType[ggml_type(name).ggml_name.upper()]


def test_tensor_can_be_quantized():
    # candle-pyo3's test_tensor_can_be_quantized, with the formats it leaves out too
    t = tl.randn((16, 256))
    for fmt in FORMATS:
        for spelled in (fmt.upper(), fmt.lower()):
            q = t.quantize(spelled)
            assert isinstance(q, tl.QTensor) and isinstance(q, tl.quantized.QTensor)
            assert q.ggml_dtype.lower() == fmt.lower() and q.ggml_dtype == q.ggml_dtype.upper()
            assert q.shape == t.shape and q.rank == 2 and q.device == "cpu"
    assert t.quantize("q4_K").ggml_dtype == "Q4K"
    assert repr(t.quantize("q8_0")) == "QTensor(shape=[16, 256], ggml_dtype=Q8_0, device=cpu, 4352 bytes)"


@pytest.mark.parametrize("name", GGUF_QUANTIZE)
def test_bytes_are_the_gguf_packages(name):
    x = (np.random.default_rng(1).standard_normal((4, 3, 256)) * 3).astype(F)
    q = tl.Tensor(x).quantize(name)
    expected = gq.quantize(x, gguf_type(name)).view(np.uint8).reshape(-1)
    assert q.to_bytes() == expected.tobytes() and q.nbytes == expected.size
    assert q.shape == (4, 3, 256)


@pytest.mark.parametrize("name", GGUF_DEQUANTIZE)
def test_dequantize_is_the_gguf_packages(name):
    x = np.random.default_rng(2).standard_normal((8, 512)).astype(F)
    q = tl.Tensor(x).quantize(name)
    d = q.dequantize()
    assert d.dtype == tl.f32 and d.shape == (8, 512) and d.device == "cpu"
    ref = gq.dequantize(np.frombuffer(q.to_bytes(), np.uint8).reshape(8, -1), gguf_type(name))
    np.testing.assert_array_equal(d.numpy(), ref)


def test_quantize_other_dtypes_devices_and_errors():
    x = tl.randn((2, 64))
    np.testing.assert_array_equal(x.to_dtype("f16").quantize("q8_0").to_bytes(),
                                  x.to_dtype("f16").to_dtype("f32").quantize("q8_0").to_bytes())
    assert x.t().contiguous().t().quantize("q8_0").to_bytes() == x.quantize("q8_0").to_bytes()
    with pytest.raises(tl.ShapeMismatchError, match="block size 256"):
        x.quantize("q4k")
    with pytest.raises(tl.UnsupportedDTypeError, match="unknown GGML type"):
        x.quantize("q4_9")
    with pytest.raises(tl.UnsupportedDTypeError, match="float"):
        tl.arange(0, 64).reshape((1, 64)).quantize("q8_0")
    with pytest.raises(tl.ShapeMismatchError, match="scalar"):
        tl.Tensor(1.0).quantize("f32")


def test_from_bytes_round_trip_and_checks():
    x = tl.randn((3, 64))
    q = x.quantize("q4_1")
    r = QTensor.from_bytes(q.to_bytes(), (3, 64), "Q4_1")
    assert r.ggml_dtype == "Q4_1" and r.to_bytes() == q.to_bytes()
    np.testing.assert_array_equal(r.dequantize().numpy(), q.dequantize().numpy())
    assert QTensor.from_bytes(bytearray(q.to_bytes()), [3, 64], 3).ggml_dtype == "Q4_1"  # GGML id
    with pytest.raises(tl.ShapeMismatchError, match="takes 120 bytes, got 119"):
        QTensor.from_bytes(q.to_bytes()[:-1], (3, 64), "q4_1")
    with pytest.raises(tl.ShapeMismatchError, match="not a multiple"):
        QTensor.from_bytes(b"", (3, 0, 48), "q4_1")
    assert QTensor.from_bytes(b"", (0, 32), "q4_0").dequantize().shape == (0, 32)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0", "Q2K", "Q4K", "Q6K"])
def test_qmatmul_computes_ggml_products(override_settings, path, name):
    if path == "numpy":
        override_settings(no_numba=True)
    if path != "native":
        override_settings(no_native=True)
    elif name not in native.SUPPORTED:
        path = PATHS[1]  # the compiled C kernels leave this format to numba
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 512)).astype(F)
    x = rng.standard_normal((2, 3, 512)).astype(F)
    q = tl.Tensor(w).quantize(name)
    qm = QMatMul.from_qtensor(q)
    assert qm.path == path
    y = qm.forward(tl.Tensor(x))
    assert y.shape == (2, 3, 6) and y.dtype == tl.f32
    raw = np.frombuffer(q.to_bytes(), np.uint8)
    ref = reference_matmul(name, x.reshape(6, 512), raw).reshape(2, 3, 6)
    scale = np.abs(x.reshape(6, 512)) @ np.abs(q.dequantize().numpy()).T
    assert (np.abs(y.numpy() - ref) <= 1e-6 * scale.reshape(2, 3, 6)).all()
    # QTensor.matmul_t is the same product, and prepares the weight once
    np.testing.assert_array_equal(q.matmul_t(tl.Tensor(x)).numpy(), y.numpy())
    assert q._qmatmul() is q._qmatmul() and qm.prepared() is q._qmatmul().prepared()


def test_dequantize_all_multiplies_by_the_f32_weight(monkeypatch):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((5, 256)).astype(F)
    x = tl.Tensor(rng.standard_normal((4, 256)).astype(F))
    q = tl.Tensor(w).quantize("q4k")
    plain = matmul_t_dequantized(x.numpy(), np.frombuffer(q.to_bytes(), np.uint8), "Q4K", 5, 256)
    explicit = QMatMul(q, dequantize=True)
    assert explicit.path == "dequantized"
    np.testing.assert_allclose(explicit.forward(x).numpy(), plain, rtol=1e-6, atol=1e-5)
    quantized = QMatMul(q).forward(x).numpy()
    assert np.abs(quantized - plain).max() > 1e-4  # the activation rounding shows
    monkeypatch.setenv("TALLOW_DEQUANTIZE_ALL", "1")
    assert QMatMul(q).path == "dequantized" and QMatMul(q, dequantize=False).path != "dequantized"
    np.testing.assert_allclose(q.matmul_t(x).numpy(), plain, rtol=1e-6, atol=1e-5)
    monkeypatch.setenv("TALLOW_DEQUANTIZE_ALL", "0")
    np.testing.assert_array_equal(q.matmul_t(x).numpy(), quantized)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
def test_float_weights_are_plain_products(name):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 48)).astype(F)
    x = rng.standard_normal((3, 48)).astype(F)
    q = tl.Tensor(w).quantize(name)
    qm = QMatMul(q)
    assert qm.path == "dequantized"
    np.testing.assert_allclose(qm.forward(tl.Tensor(x)).numpy(), x @ q.dequantize().numpy().T, rtol=1e-5, atol=1e-5)


def test_qmatmul_input_checks_and_dtypes():
    q = tl.randn((4, 64)).quantize("q8_0")
    qm = QMatMul(q)
    x = tl.randn((2, 64))
    y16 = qm.forward(x.to_dtype("f16"))
    assert y16.dtype == tl.f16
    np.testing.assert_array_equal(y16.to_dtype("f32").numpy(),
                                  qm.forward(x.to_dtype("f16").to_dtype("f32")).to_dtype("f16").to_dtype("f32").numpy())
    assert qm(tl.randn((64,))).shape == (4,)
    with pytest.raises(tl.ShapeMismatchError, match=r"does not end in 64"):
        qm.forward(tl.randn((2, 32)))
    with pytest.raises(tl.UnsupportedDTypeError):
        qm.forward(tl.ones((2, 64), dtype="u32"))
    with pytest.raises(tl.ShapeMismatchError, match="must be"):
        QMatMul(tl.randn((2, 4, 64)).quantize("q8_0"))
    with pytest.raises(TypeError):
        QMatMul(tl.randn((4, 64)))
    assert "Q8_0" in repr(qm) and qm.nbytes > 0


def test_qtensor_devices():
    q = tl.randn((4, 64)).quantize("q4_0")
    assert q.to_device("cpu") is q and q.cpu() is q
    assert q.to_bytes() == QTensor(tl.Tensor(np.frombuffer(q.to_bytes(), np.uint8)), (4, 64), "q4_0").to_bytes()
    with pytest.raises(tl.UnsupportedDTypeError, match="1-D u8"):
        QTensor(tl.zeros((4, 36), dtype="u8"), (4, 64), "q4_0")


def test_without_numba_installed_the_numpy_path_serves():
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numba'] = None\n"  # makes `import numba` fail
        "import numpy as np, tallow as tl\n"
        "from tallow.quantized import QMatMul\nfrom tallow.backends.cpu.quantized import fast\n"
        "q = tl.Tensor(np.linspace(-1, 1, 4 * 256, dtype=np.float32).reshape(4, 256)).quantize('q4k')\n"
        "qm = QMatMul(q)\n"
        "y = qm.forward(tl.ones((2, 256)))\n"
        "print(qm.path, fast.available(), 'numba' in (fast.status()['error'] or ''), y.shape)\n"
    )
    env = dict(os.environ, TALLOW_NO_NATIVE="1")  # Q4K has C kernels too: take them out
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split() == ["numpy", "False", "True", "(2,", "4)"], out.stderr
