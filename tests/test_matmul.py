"""Matrix products for every layout and dtype, against NumPy."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import FLOAT_DTYPES, assert_close, np_values

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def ref(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mnk", [(1, 7, 5), (7, 1, 5), (3, 4, 5), (16, 33, 65), (64, 64, 64)])
def test_matmul_dtypes_and_sizes(dtype, mnk, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    m, n, k = mnk
    a = np_values((2, m, k), dtype, rng, -1, 1)
    b = np_values((2, k, n), dtype, rng, -1, 1)
    out = tl.Tensor(a, device=device).matmul(tl.Tensor(b, device=device))
    assert out.shape == (2, m, n) and out.dtype == dtype
    expected = ref(a, b).astype(dtype.np)
    assert_close(out, expected, dtype, device, loose=True)


def test_matmul_integers(device, rng):
    if not device.supports_dtype(tl.i64):
        pytest.skip("no i64")
    a = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    b = rng.integers(-5, 5, (4, 2)).astype(np.int64)
    out = tl.Tensor(a, device=device).matmul(tl.Tensor(b, device=device))
    np.testing.assert_array_equal(out.numpy(), a @ b)


def test_seed_narrowed_batch_case(device):
    # Batch dims that no single stride can merge: candle's CPU refuses this and its
    # Metal backend returns wrong values.
    x = tl.randn((2, 4, 3, 5), device=device).narrow(1, 0, 2)
    y = tl.randn((2, 2, 5, 6), device=device)
    assert not x.is_contiguous()
    out = x.matmul(y)
    expected = x.contiguous().matmul(y)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(out.numpy(), np.matmul(x.numpy(), y.numpy()), atol=1e-5)


@st.composite
def operand(draw, batch, rows, cols, rng):
    """A (batch..., rows, cols) tensor with a random layout, and its NumPy twin."""
    kind = draw(st.sampled_from(["plain", "transposed", "narrowed", "permuted", "stepped", "broadcast"]))
    if kind == "transposed":
        base = rng.standard_normal(batch + (cols, rows)).astype(np.float32)
        t = tl.Tensor(base).t()
        return t, np.swapaxes(base, -1, -2)
    if kind == "narrowed" and batch:
        base = rng.standard_normal((batch[0] + 2,) + batch[1:] + (rows, cols)).astype(np.float32)
        return tl.Tensor(base).narrow(0, 1, batch[0]), base[1:1 + batch[0]]
    if kind == "permuted" and batch:
        base = rng.standard_normal((rows,) + batch + (cols,)).astype(np.float32)
        perm = tuple(range(1, 1 + len(batch))) + (0, len(batch) + 1)
        return tl.Tensor(base).permute(perm), np.transpose(base, perm)
    if kind == "stepped":
        base = rng.standard_normal(batch + (rows, cols * 2)).astype(np.float32)
        sl = (slice(None),) * (len(batch) + 1) + (slice(None, None, 2),)
        return tl.Tensor(base)[sl], base[sl]
    if kind == "broadcast" and batch:
        base = rng.standard_normal((1,) + batch[1:] + (rows, cols)).astype(np.float32)
        return tl.Tensor(base).broadcast_as(batch + (rows, cols)), np.broadcast_to(base, batch + (rows, cols))
    base = rng.standard_normal(batch + (rows, cols)).astype(np.float32)
    return tl.Tensor(base), base


@given(data=st.data())
@SETTINGS
def test_matmul_every_layout(data, device):
    rng = np.random.default_rng(data.draw(st.integers(0, 10_000)))
    batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    m, k, n = (data.draw(st.integers(1, 9)) for _ in range(3))
    ta, a = data.draw(operand(batch, m, k, rng))
    tb, b = data.draw(operand(batch, k, n, rng))
    out = ta.to_device(device).matmul(tb.to_device(device))
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), rtol=1e-4, atol=1e-5)


def test_broadcast_matmul_and_operator(device, rng):
    a = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4, 6)).astype(np.float32)
    ta, tb = tl.Tensor(a, device=device), tl.Tensor(b, device=device)
    np.testing.assert_allclose(ta.broadcast_matmul(tb).numpy(), np.matmul(a, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    v = rng.standard_normal(4).astype(np.float32)
    m = rng.standard_normal((3, 4)).astype(np.float32)
    tv, tm = tl.Tensor(v, device=device), tl.Tensor(m, device=device)
    np.testing.assert_allclose((tm @ tv).numpy(), m @ v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((tv @ tm.t()).numpy(), v @ m.T, rtol=1e-5, atol=1e-6)
    assert (tv @ tv).shape == ()
    np.testing.assert_allclose(tm.mv(tv).numpy(), m @ v, rtol=1e-5, atol=1e-6)
    assert tv.dot(tv).values() == pytest.approx(float(v @ v), rel=1e-5)


def test_matmul_shape_errors(device):
    a = tl.zeros((2, 3, 4), device=device)
    with pytest.raises(tl.ShapeMismatchError, match="inner"):
        a.matmul(tl.zeros((2, 5, 6), device=device))
    with pytest.raises(tl.ShapeMismatchError, match="batch|broadcast"):
        a.matmul(tl.zeros((3, 4, 6), device=device))
    # Vectors follow torch.matmul (a dot product), as ``@`` does.
    assert tl.ones(4, device=device).matmul(tl.ones(4, device=device)).item() == 4.0
    with pytest.raises(tl.ShapeMismatchError):
        tl.zeros(3, device=device).matmul(tl.zeros(4, device=device))
    with pytest.raises(tl.ShapeMismatchError):
        tl.zeros(3, device=device).dot(tl.zeros(4, device=device))


def test_transposed_operand_cache_follows_writes():
    # A transposed weight is cached as a row-major copy: writes through tallow and
    # buffers shared with outside code must never serve stale values.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w0 = rng.standard_normal((12, 16)).astype(np.float32)
    tx = tl.Tensor(x)
    w = tl.Var(w0)
    np.testing.assert_allclose(tx.matmul(w.t()).numpy(), x @ w0.T, rtol=1e-5, atol=1e-5)
    w1 = rng.standard_normal((12, 16)).astype(np.float32)
    w.set(tl.Tensor(w1))
    np.testing.assert_allclose(tx.matmul(w.t()).numpy(), x @ w1.T, rtol=1e-5, atol=1e-5)
    w.narrow(0, 0, 3).zero_set()
    w1[:3] = 0
    np.testing.assert_allclose(tx.matmul(w.t()).numpy(), x @ w1.T, rtol=1e-5, atol=1e-5)
    w.numpy()[5] = 7.0  # a write from outside, through the writable view
    w1[5] = 7.0
    np.testing.assert_allclose(tx.matmul(w.t()).numpy(), x @ w1.T, rtol=1e-5, atol=1e-5)
    ext = rng.standard_normal((12, 16)).astype(np.float32)
    shared = tl.Tensor.from_vec(ext, (12, 16))
    tx.matmul(shared.t())
    ext[:] = 1.0
    np.testing.assert_allclose(tx.matmul(shared.t()).numpy(), x @ ext.T, rtol=1e-5, atol=1e-5)
    tid = tl.Tensor(np.array([[0] * 16], np.int64))
    w.scatter_set(tid, tl.full((1, 16), 2.0), 0)
    w1[0] = 2.0
    np.testing.assert_allclose(tx.matmul(w.t()).numpy(), x @ w1.T, rtol=1e-5, atol=1e-5)


def test_native_product_reads_a_transposed_weight_in_place():
    # ``x @ w.t()`` of a Linear layer's size goes to the native f32 kernel, which packs
    # its panels from any strides: no row-major copy of ``w.t()`` is made (it would be
    # made again after every optimiser step), and the bits are those of the product
    # with the rhs stored row-major.
    from tallow.backends.cpu import gemm

    if not gemm.native_takes(64, 256, 256):
        pytest.skip("the native f32 kernel is not built or is switched off")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w0 = rng.standard_normal((256, 256)).astype(np.float32)
    w = tl.Var(w0)
    y = tl.Tensor(x).matmul(w.t())
    assert getattr(w._storage, "_ws", None) is None or w._storage.write_state().cache is None
    row_major = tl.Tensor(x).matmul(tl.Tensor(np.ascontiguousarray(w0.T)))
    np.testing.assert_array_equal(y.numpy(), row_major.numpy())
    np.testing.assert_allclose(y.numpy(), ref(x, w0.T), rtol=1e-4, atol=1e-4)
