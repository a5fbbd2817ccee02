"""IQ4_NL and IQ4_XS: blocks written by ggml, quantized and dequantized as the gguf package does, and
multiplied as ggml's CPU backend does (activations to Q8_0 / Q8K, then
``ggml_vec_dot_iq4_nl_q8_0`` / ``ggml_vec_dot_iq4_xs_q8_K``, ported here in float32
scalars from the block bytes)."""

import struct

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gq

from support import ggml_ref
import tallow as tl
from support.ggml_golden import golden
from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast
from tallow.quantized import QMatMul, QTensor, ggml_type, load_gguf, read_gguf, write_gguf

F = np.float32
KVALUES = gq.IQ4_NL.kvalues
NAMES = {"IQ4_NL": GGMLQuantizationType.IQ4_NL, "IQ4_XS": GGMLQuantizationType.IQ4_XS}


def random_blocks(name, n, seed):
    t = ggml_type(name)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n, t.type_size), dtype=np.uint8)
    d = rng.uniform(-0.05, 0.05, n).astype(np.float16)
    raw[:, 0:2] = d.view(np.uint8).reshape(n, 2)
    return raw


@pytest.mark.parametrize("name", list(NAMES))
def test_registry(name):
    t = ggml_type(name)
    assert t.type_id == int(NAMES[name]) and ggml_type(t.type_id) is t
    assert (t.block_size, t.type_size) == GGML_QUANT_SIZES[NAMES[name]]
    assert ggml_type(name.lower()) is t and ggml_type(name.replace("_", "")) is t
    assert t.dot_type.name == {"IQ4_NL": "Q8_0", "IQ4_XS": "Q8K"}[name]


@pytest.mark.parametrize("name", list(NAMES))
def test_dequantize_bit_identical_to_gguf(name):
    t = ggml_type(name)
    for raw in (golden()[name], random_blocks(name, 64, 1)):
        ours = t.dequantize(raw)
        theirs = gq.dequantize(raw.reshape(raw.shape[0], -1), NAMES[name]).reshape(-1)
        np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    # ggml's blocks of the golden rows come back close to the rows
    x = golden()["x"]
    err = np.abs(t.dequantize(golden()[name]).reshape(x.shape) - x).max(axis=1)
    assert (err <= 0.25 * np.abs(x).max(axis=1) + 1e-30).all()


def vec_dot_iq4_nl(w_row, xq_row):
    """ggml_vec_dot_iq4_nl_q8_0_generic over one row (f32 scalars)."""
    sumf = F(0)
    for b in range(len(w_row) // 18):
        wb, yb = w_row[18 * b: 18 * b + 18], xq_row[34 * b: 34 * b + 34]
        d = F(F(np.frombuffer(yb[:2], np.float16)[0]) * F(np.frombuffer(wb[:2], np.float16)[0]))
        q8 = struct.unpack("<32b", yb[2:])
        s1 = sum(q8[j] * KVALUES[wb[2 + j] & 15] for j in range(16))
        s2 = sum(q8[j + 16] * KVALUES[wb[2 + j] >> 4] for j in range(16))
        sumf = F(sumf + F(d * F(s1 + s2)))
    return sumf


def vec_dot_iq4_xs(w_row, xq_row):
    """ggml_vec_dot_iq4_xs_q8_K_generic over one row (f32 scalars)."""
    sumf = F(0)
    for b in range(len(w_row) // 136):
        wb, yb = w_row[136 * b: 136 * b + 136], xq_row[292 * b: 292 * b + 292]
        d4d8 = F(F(np.frombuffer(wb[:2], np.float16)[0]) * F(struct.unpack("<f", yb[:4])[0]))
        h = struct.unpack("<H", wb[2:4])[0]
        q8 = struct.unpack("<256b", yb[4:260])
        qs = wb[8:]
        for ib in range(8):
            ls = ((wb[4 + ib // 2] >> (4 * (ib % 2))) & 15) | (((h >> (2 * ib)) & 3) << 4)
            dl = F(d4d8 * F(ls - 32))
            q, y = qs[16 * ib: 16 * ib + 16], q8[32 * ib: 32 * ib + 32]
            s = sum(y[j] * KVALUES[q[j] & 15] + y[j + 16] * KVALUES[q[j] >> 4] for j in range(16))
            sumf = F(sumf + F(dl * F(s)))
    return sumf


def reference(name, x, raw):
    if name == "IQ4_NL":
        xq = gq.quantize(x, GGMLQuantizationType.Q8_0).view(np.uint8).reshape(x.shape[0], -1)
        dot = vec_dot_iq4_nl
    else:
        xq = np.frombuffer(ggml_ref.quantize_row("Q8K", x.reshape(-1)), np.uint8).reshape(x.shape[0], -1)
        dot = vec_dot_iq4_xs
    return np.array([[dot(bytes(w), bytes(r)) for w in raw] for r in xq], F)


@pytest.fixture(scope="module")
def activations():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 512)).astype(F)
    x[1] *= 30
    x[2, :256] *= 1e-3
    return x


@pytest.mark.parametrize("name", list(NAMES))
@pytest.mark.parametrize("path", ["native", "numba", "numpy"])
def test_qmatmul_computes_ggmls_product(name, path, activations, override_settings):
    if path == "native" and not native.supports(name):
        pytest.skip(f"no compiled C kernel for {name} here: {native.status()}")
    if path == "numba" and not fast.available():
        pytest.skip(f"numba path unavailable: {fast.status()}")
    if path != "native":
        override_settings(no_native=True)
    if path == "numpy":
        override_settings(no_numba=True)
    raw = golden()[name][:12]
    x = activations
    ref = reference(name, x, raw)
    qm = QMatMul(QTensor.from_bytes(raw.reshape(-1), (12, 512), name))
    assert qm.path == path
    got = qm.forward(tl.Tensor(x)).numpy()
    w = ggml_type(name).dequantize(raw).reshape(12, 512)
    scale = np.abs(x) @ np.abs(w).T
    # Not the float product of the dequantized weight: the activation rounding is in the result.
    assert (np.abs(x @ w.T - ref) > 1e-5 * scale).any()
    if path != "numpy" and name == "IQ4_NL":  # ggml's operations in ggml's order
        np.testing.assert_array_equal(got, ref)
    else:  # scaled per super-block or per group instead of per sub-block: float rounding only
        assert (np.abs(got - ref) <= 1e-6 * scale).all(), np.max(np.abs(got - ref) / scale)


@pytest.mark.parametrize("name", list(NAMES))
def test_quantize_round_trip_through_a_tensor(name):
    # ggml's bytes are checked in test_ggml_golden; here the Tensor-level path.
    x = tl.Tensor(golden()["x"][:4])
    q = x.quantize(name)
    assert q.ggml_dtype == name and q.to_bytes() == golden()[name][:4].tobytes()


@pytest.mark.parametrize("name", list(NAMES))
def test_gguf_files_written_by_the_gguf_package(name, tmp_path):
    import gguf

    raw = golden()[name][:6]
    path = tmp_path / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("w", raw, raw_dtype=NAMES[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = read_gguf(path)
    assert f.tensors["w"].ggml_type.name == name and f.tensors["w"].shape == (6, 512)
    tensors, _ = load_gguf(path)
    np.testing.assert_array_equal(tensors["w"].dequantize().numpy().reshape(-1),
                                  gq.dequantize(raw, NAMES[name]).reshape(-1))
    # and tallow's writer gives the gguf package's bytes back
    write_gguf(tmp_path / "again.gguf", {"w": (raw.reshape(-1), (6, 512), name)})
    again = read_gguf(tmp_path / "again.gguf").tensors["w"]
    np.testing.assert_array_equal(np.asarray(again.data), raw.reshape(-1))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(NAMES))
def test_on_the_gpu(name, gpu, activations):
    raw = golden()[name][:8]
    q = QTensor.from_bytes(raw.reshape(-1), (8, 512), name).to_device(gpu)
    np.testing.assert_array_equal(q.dequantize().numpy().reshape(-1), gq.dequantize(raw, NAMES[name]).reshape(-1))
    qm = QMatMul(q)
    assert qm.path == "gpu"  # the WGSL kernels decode the blocks
    got = qm.forward(tl.Tensor(activations, device=gpu)).numpy()
    w = ggml_type(name).dequantize(raw).reshape(8, 512).astype(np.float64)
    # The GPU multiplies f32 activations by the dequantized weights (no activation rounding).
    exact = activations.astype(np.float64) @ w.T
    assert (np.abs(got - exact) <= 1e-5 * (np.abs(activations) @ np.abs(w).T)).all()
