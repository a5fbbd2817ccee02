"""GGML block formats on the GPU (backends/gpu/quantized.py): dequantization
bit for bit against the NumPy codecs of tallow.quantized, and x @ W^T against
x @ dequantize(W)^T computed in f64, through both kernels (matrix-vector and
tiled), odd shapes, strided activations and weights split over bindings."""

import numpy as np
import pytest

import tallow as tl
from tallow import dtype as dt
from tallow.backends.gpu import new_device_state, quantized as oq
from tallow.errors import TallowError
from tallow.layout import Layout
from tallow.quantized import ggml_type

pytestmark = pytest.mark.gpu

TYPES = list(oq.SUPPORTED)
REQUIRED = ("F32", "F16", "Q4_0", "Q8_0", "Q4K", "Q6K")
# Byte offsets of the f16 fields (scales, mins, sums) inside a block.
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q8_1": (0, 2), "Q2K": (80, 82), "Q3K": (108,), "Q4K": (0, 2), "Q5K": (0, 2),
              "Q6K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,)}
# zero, negative zero, subnormals of both signs, the smallest normal, the largest
# finite of both signs, +-1, and a negative ordinary value
EDGE_F16 = (0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00,
            0xBC00, 0xC500)


def u8(gpu, arr):
    return gpu._state.from_numpy(np.ascontiguousarray(arr).reshape(-1), dt.u8)


def read(storage, n):
    return storage.to_numpy(Layout.contiguous_of((n,)))


def edge_blocks(t, rng):
    """Blocks of ``t`` with every edge scale value, the quant bytes all 0x00, all
    0xff, alternating or random."""
    fills = [np.zeros(t.type_size, np.uint8), np.full(t.type_size, 0xFF, np.uint8),
             np.tile(np.array([0x0F, 0xF0], np.uint8), t.type_size)[:t.type_size],
             rng.integers(0, 256, t.type_size, dtype=np.uint8)]
    out = []
    if t.name in ("F16", "BF16"):
        vals = np.array(EDGE_F16, np.uint16)
        if t.name == "BF16":  # bf16 zeros, subnormals, extremes
            vals = np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80], np.uint16)
        return vals.view(np.uint8)
    if t.name == "F32":
        return np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, 1.0],
                        np.float32).view(np.uint8)
    for fill in fills:
        for v in EDGE_F16:
            b = fill.copy()
            if t.name == "Q8K":
                b[:4] = np.frombuffer(np.float32(np.uint16(v).view(np.float16)).tobytes(), np.uint8)
            else:
                for off in F16_FIELDS[t.name]:
                    b[off:off + 2] = np.frombuffer(np.uint16(v).tobytes(), np.uint8)
            out.append(b)
    return np.concatenate(out)


def assert_bits_equal(got, ref):
    assert got.shape == ref.shape and got.dtype == np.float32
    nan_g, nan_r = np.isnan(got), np.isnan(ref)
    np.testing.assert_array_equal(nan_g, nan_r)
    gb, rb = got.view(np.uint32), ref.view(np.uint32)
    bad = (gb != rb) & ~nan_r
    if bad.any():
        i = np.nonzero(bad)[0][:8]
        raise AssertionError(f"{bad.sum()} values differ, e.g. at {i}: gpu {got[i]} numpy {ref[i]}")


# -- supported ---------------------------------------------------------------------------------

def test_supported_types():
    for name in REQUIRED:
        assert oq.supported(name)
    for name in TYPES:
        t = ggml_type(name)
        assert oq.supported(t.name) and oq.supported(t.ggml_name)
    for name in ("IQ2_XXS", "Q1_0", "", "f64", "nonsense"):
        assert not oq.supported(name)


def test_unsupported_and_bad_arguments_raise(gpu):
    raw = u8(gpu, np.zeros(18 * 4, np.uint8))
    with pytest.raises(TallowError, match="unknown GGML type"):
        oq.dequantize(raw, "IQ2_XXS", 128)
    with pytest.raises(TallowError, match="whole number"):
        oq.dequantize(raw, "Q4_0", 100)
    with pytest.raises(TallowError, match="needs 90 bytes"):
        oq.dequantize(raw, "Q4_0", 160)
    x = tl.Tensor(np.ones((2, 64), np.float32), device=gpu)
    with pytest.raises(TallowError, match="needs 144 bytes"):
        oq.qmatmul_t(x._storage, x.layout, raw, "Q4_0", 4, 64)
    with pytest.raises(TallowError, match="does not end in k"):
        oq.qmatmul_t(x._storage, x.layout, raw, "Q4_0", 2, 32)
    with pytest.raises(TallowError, match="u8 storage"):
        oq.qmatmul_t(x._storage, x.layout, x._storage, "Q4_0", 2, 64)
    xh = x.to_dtype(tl.f16)
    with pytest.raises(TallowError, match="must be f32"):
        oq.qmatmul_t(xh._storage, xh.layout, raw, "Q4_0", 2, 64)


# -- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_dequantize_bit_exact(gpu, name):
    t = ggml_type(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    n = 1000 if t.block_size == 1 else t.block_size * max(3, 4096 // t.block_size + 3)
    # real blocks from data of several magnitudes (and a run of zeros)
    x = (rng.standard_normal(n) * np.repeat(np.float32([1e-6, 1.0, 300.0, 0.0]), n // 4 + 1)[:n]).astype(np.float32)
    cases = {"quantized": t.quantize(x).reshape(-1),
             "random bytes": rng.integers(0, 256, t.nbytes(n), dtype=np.uint8),
             "edge blocks": edge_blocks(t, rng)}
    for label, raw in cases.items():
        count = raw.size // t.type_size * t.block_size
        ref = t.dequantize(raw, count)
        got = read(oq.dequantize(u8(gpu, raw), name, count), count)
        try:
            assert_bits_equal(got, ref)
        except AssertionError as e:
            raise AssertionError(f"{name} {label}: {e}") from None


def test_dequantize_reads_a_prefix_and_empty(gpu):
    t = ggml_type("Q6K")
    raw = t.quantize(np.random.default_rng(0).standard_normal(256 * 5).astype(np.float32)).reshape(-1)
    got = read(oq.dequantize(u8(gpu, raw), "Q6K", 256 * 3), 256 * 3)
    assert_bits_equal(got, t.dequantize(raw[:3 * 210], 256 * 3))
    assert oq.dequantize(u8(gpu, raw), "Q6K", 0).count == 0


# -- qmatmul_t --------------------------------------------------------------------------------

def _k_for(t):
    return 37 if t.block_size == 1 else (96 if t.block_size == 32 else 512)


def _weight(t, n, k, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    raw = t.quantize(w).reshape(-1)
    return raw, t.dequantize(raw, n * k).reshape(n, k).astype(np.float64)


def check_product(got, x, wd):
    """got vs x @ wd^T in f64: within 1e-4 of the sum of the terms' magnitudes."""
    x = np.asarray(x, np.float64).reshape(-1, wd.shape[1])
    ref = x @ wd.T
    scale = np.abs(x) @ np.abs(wd).T
    got = np.asarray(got, np.float64).reshape(ref.shape)
    err = np.abs(got - ref)
    assert np.all(err <= 1e-4 * scale + 1e-30), f"max error {(err / (scale + 1e-30)).max():.2e} of the magnitudes"


def run(gpu, xt, raw_s, name, n, k):
    m = xt.layout.count // k
    y = oq.qmatmul_t(xt._storage, xt.layout, raw_s, name, n, k)
    assert y.dtype is dt.f32 and y.count == m * n
    return read(y, m * n).reshape(m, n)


@pytest.fixture(params=["auto", "qmv", "qmm"])
def kernel(request, monkeypatch):
    monkeypatch.setattr(oq, "FORCE", None if request.param == "auto" else request.param)
    return request.param


@pytest.mark.parametrize("name", TYPES)
def test_qmatmul_matches_f64_reference(gpu, name, kernel):
    t = ggml_type(name)
    k = _k_for(t)
    n = 37  # neither a multiple of the matrix-vector rows (4) nor of the tile (64)
    raw, wd = _weight(t, n, k, 1)
    raw_s = u8(gpu, raw)
    rng = np.random.default_rng(2)
    # Forced: tiles of 16, 32 and 64 rows (TM = 1, 2, 4), the last one ragged.
    ms = (1, 2, 7, 64) if kernel == "auto" else (3, 21, 70)
    for m in ms:
        x = rng.standard_normal((m, k)).astype(np.float32)
        check_product(run(gpu, tl.Tensor(x, device=gpu), raw_s, name, n, k), x, wd)


def test_pick_kernel():
    assert oq.pick_kernel(1, False) == ("qmv", 1)
    assert oq.pick_kernel(3, False) == ("qmv", 4)
    assert oq.pick_kernel(8, False) == ("qmv", 8)
    assert oq.pick_kernel(9, False)[0] == "qmm"
    assert oq.pick_kernel(64, False) == ("qmm", 4)
    assert oq.pick_kernel(9, True) == ("qmv", 16)
    assert oq.pick_kernel(64, True) == ("qmv", 16)


VIEWS = ["batch dims", "transposed", "narrowed columns", "stepped rows", "broadcast batch",
         "permuted batch", "vector"]


def _view_case(gpu, view, k, rng):
    """(tensor on the GPU, its values as a NumPy array of the same shape)."""
    if view == "batch dims":
        a = rng.standard_normal((2, 3, k)).astype(np.float32)
        return tl.Tensor(a, device=gpu), a
    if view == "transposed":
        a = rng.standard_normal((k, 5)).astype(np.float32)
        tt = tl.Tensor(a, device=gpu).t()
        assert tt.stride == (1, 5)
        return tt, a.T
    if view == "narrowed columns":
        a = rng.standard_normal((6, k + 7)).astype(np.float32)
        return tl.Tensor(a, device=gpu).narrow(1, 3, k), a[:, 3:3 + k]
    if view == "stepped rows":
        a = rng.standard_normal((9, k)).astype(np.float32)
        return tl.Tensor(a, device=gpu)[::2], a[::2]
    if view == "broadcast batch":
        a = rng.standard_normal((1, 3, k)).astype(np.float32)
        tt = tl.Tensor(a, device=gpu).broadcast_as((4, 3, k))
        return tt, np.broadcast_to(a, (4, 3, k))
    if view == "permuted batch":
        a = rng.standard_normal((2, 3, 2, k)).astype(np.float32)
        tt = tl.Tensor(a, device=gpu).permute((1, 0, 2, 3)).narrow(0, 1, 2)
        return tt, a.transpose(1, 0, 2, 3)[1:3]
    a = rng.standard_normal(k).astype(np.float32)
    return tl.Tensor(a, device=gpu), a


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name", ["Q4_0", "Q6K", "F16"])
def test_qmatmul_strided_activations(gpu, name, view, kernel):
    t = ggml_type(name)
    k = 64 if t.block_size == 32 else (256 if t.block_size == 256 else 40)
    n = 70
    raw, wd = _weight(t, n, k, 3)
    xt, xa = _view_case(gpu, view, k, np.random.default_rng(4))
    assert xt.shape == xa.shape
    check_product(run(gpu, xt, u8(gpu, raw), name, n, k), xa, wd)


def test_qmatmul_many_unmergeable_row_dims(gpu):
    # nine row dims that do not merge: compacted first, still right
    t = ggml_type("Q8_0")
    k, n = 32, 5
    raw, wd = _weight(t, n, k, 5)
    a = np.random.default_rng(6).standard_normal((2,) * 9 + (k,)).astype(np.float32)
    perm = tuple(range(8, -1, -1)) + (9,)
    xt = tl.Tensor(a, device=gpu).permute(perm)
    check_product(run(gpu, xt, u8(gpu, raw), "Q8_0", n, k), a.transpose(perm), wd)


def test_qmatmul_empty(gpu):
    raw = u8(gpu, ggml_type("Q4_0").quantize(np.ones((3, 32), np.float32)))
    x = tl.Tensor(np.zeros((0, 32), np.float32), device=gpu)
    assert oq.qmatmul_t(x._storage, x.layout, raw, "Q4_0", 3, 32).count == 0
    assert oq.qmatmul_t(tl.Tensor(np.ones((2, 32), np.float32), device=gpu)._storage,
                        Layout.contiguous_of((2, 32)), raw, "Q4_0", 0, 32).count == 0


def test_qmatmul_edge_blocks(gpu):
    # the matmul decoders agree with dequantize on the edge blocks as well
    for name in ("Q4_0", "Q8_0", "Q4K", "Q6K"):
        t = ggml_type(name)
        raw = edge_blocks(t, np.random.default_rng(7))
        k = t.block_size * 4
        n = raw.size // (k // t.block_size * t.type_size)
        raw = raw[:n * (k // t.block_size) * t.type_size]
        wd = t.dequantize(raw, n * k).reshape(n, k).astype(np.float64)
        x = np.random.default_rng(8).standard_normal((3, k)).astype(np.float32)
        check_product(run(gpu, tl.Tensor(x, device=gpu), u8(gpu, raw), name, n, k), x, wd)


# -- asynchrony, pool and kernel cache ------------------------------------------------------

def test_asynchronous_pooled_and_cached(gpu):
    dev = gpu
    state = dev._state
    t = ggml_type("Q4K")
    n, k = 40, 512
    raw, wd = _weight(t, n, k, 9)
    raw_s = u8(gpu, raw)
    x = np.random.default_rng(10).standard_normal((3, k)).astype(np.float32)
    xt = tl.Tensor(x, device=gpu)
    for _ in range(3):  # compile, fill the pool and the bind-group cache
        y = oq.qmatmul_t(xt._storage, xt.layout, raw_s, "Q4K", n, k)
        w = oq.dequantize(raw_s, "Q4K", n * k)
    dev.synchronize()
    before = state.commands.counters()
    mem = dev.memory_stats()
    stats0 = dev.kernel_stats()
    for _ in range(5):
        y = oq.qmatmul_t(xt._storage, xt.layout, raw_s, "Q4K", n, k)
        w = oq.dequantize(raw_s, "Q4K", n * k)
    after = state.commands.counters()
    assert after["readbacks"] == before["readbacks"]  # nothing waited
    assert after["bytes_read_back"] == before["bytes_read_back"]
    assert after["ops_encoded"] == before["ops_encoded"] + 10
    assert after["bind_groups_created"] == before["bind_groups_created"]
    assert dev.memory_stats()["buffers_allocated"] == mem["buffers_allocated"]
    stats = dev.kernel_stats()
    for key in ("quantized_matmul.wgsl<Q4K,f32>", "quantized_dequantize.wgsl<Q4K,f32>"):
        assert key in stats and stats[key]["pipelines"] >= 1
        assert stats[key]["hits"] >= stats0[key]["hits"] + 5
        assert stats[key]["misses"] == stats0[key]["misses"]
    check_product(read(y, 3 * n), x, wd)
    assert_bits_equal(read(w, n * k), t.dequantize(raw, n * k))


# -- weights and outputs larger than a binding -------------------------------------------------

LIMIT = 64 << 10


@pytest.fixture(scope="module")
def small_binding():
    if not tl.utils.gpu_is_available():
        pytest.skip("no WebGPU adapter")
    state = new_device_state(0, max_binding=LIMIT)
    assert state.max_binding == LIMIT
    return state


@pytest.mark.parametrize("name", ["Q4_0", "Q6K", "F16"])
def test_dequantize_split_over_bindings(small_binding, name):
    t = ggml_type(name)
    n = t.block_size * (100000 // t.block_size)  # output 390 KiB: seven windows
    raw = t.quantize(np.random.default_rng(11).standard_normal(n).astype(np.float32)).reshape(-1)
    before = small_binding.commands.counters()["dispatches"]
    got = read(oq.dequantize(u8(tl.Device.of(small_binding), raw), name, n), n)
    assert small_binding.commands.counters()["dispatches"] - before >= 6
    assert_bits_equal(got, t.dequantize(raw, n))


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4K", "F32"])
def test_qmatmul_split_over_bindings(small_binding, name, kernel):
    # W (up to 280 KiB) and y (m = 40: 80 KiB) both exceed the 64 KiB binding
    t = ggml_type(name)
    n, k = 500, (256 if t.block_size > 1 else 140)
    raw, wd = _weight(t, n, k, 12)
    raw_s = u8(tl.Device.of(small_binding), raw)
    rng = np.random.default_rng(13)
    for m in (1, 40):
        x = rng.standard_normal((m, k)).astype(np.float32)
        before = small_binding.commands.counters()["dispatches"]
        got = run(tl.Device.of(small_binding), tl.Tensor(x, device=tl.Device.of(small_binding)), raw_s, name, n, k)
        assert small_binding.commands.counters()["dispatches"] - before >= 2
        check_product(got, x, wd)


def test_too_large_to_split_raises(small_binding):
    dev = tl.Device.of(small_binding)
    t = ggml_type("Q8_0")
    k = 32 * 2000  # one row of W: 68000 bytes > 64 KiB
    raw = u8(dev, np.zeros(t.nbytes(2 * k), np.uint8))
    x = tl.Tensor(np.zeros((1, k), np.float32), device=dev)
    with pytest.raises(TallowError, match="one weight row"):
        oq.qmatmul_t(x._storage, x.layout, raw, "Q8_0", 2, k)
    # activations spanning more than a binding
    k = 32 * 64
    raw = u8(dev, np.zeros(t.nbytes(2 * k), np.uint8))
    x = tl.Tensor(np.zeros((9, k), np.float32), device=dev)
    with pytest.raises(TallowError, match="activations span"):
        oq.qmatmul_t(x._storage, x.layout, raw, "Q8_0", 2, k)
    # an output row wider than a binding
    n, k = 17000, 32
    raw = u8(dev, np.zeros(t.nbytes(n * k), np.uint8))
    x = tl.Tensor(np.zeros((1, k), np.float32), device=dev)
    with pytest.raises(TallowError, match="one output row"):
        oq.qmatmul_t(x._storage, x.layout, raw, "Q8_0", n, k)
