"""Tensors larger than the adapter's max storage binding size: element-wise ops
split their work over binding windows; ops that cannot split raise a clear error;
nothing ever returns wrong values."""

import numpy as np
import pytest

import tallow as tl
from tallow.backends.gpu import new_device_state

pytestmark = pytest.mark.gpu

LIMIT = 64 * 1024  # a pretend max binding: 16384 f32


@pytest.fixture(scope="module")
def small():
    state = new_device_state(0, max_binding=LIMIT)
    assert state.max_binding == LIMIT
    return tl.Device.of(state)


def test_split_element_wise_ops(small):
    rng = np.random.default_rng(0)
    n = 100_003
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ta, tb = tl.Tensor(a, device=small), tl.Tensor(b, device=small)
    before = small.info()["dispatches"]
    np.testing.assert_allclose((ta + tb).numpy(), a + b, rtol=1e-6)
    assert small.info()["dispatches"] - before > 1  # it was split
    np.testing.assert_allclose(ta.exp().numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose((ta * 3.0).numpy(), a * 3.0, rtol=1e-6)
    np.testing.assert_array_equal(ta.gt(tb).numpy(), (a > b).astype(np.uint8))
    np.testing.assert_array_equal(ta.to_dtype("f16").numpy(), a.astype(np.float16))
    np.testing.assert_array_equal(ta.to_dtype("u8").numpy(), np.clip(a, 0, 255).astype(np.uint8))
    c = ta.gt(tb)
    np.testing.assert_allclose(c.where_cond(ta, tb).numpy(), np.where(a > b, a, b))
    np.testing.assert_array_equal(ta.copy().numpy(), a)


def test_split_strided_and_broadcast_operands(small):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, 250)).astype(np.float32)  # 300 KB, beyond the binding
    ta = tl.Tensor(a, device=small)
    np.testing.assert_allclose(ta[:, ::2].contiguous().numpy(), a[:, ::2])
    np.testing.assert_allclose(ta[1::3].exp().numpy(), np.exp(a[1::3]), rtol=1e-5)
    # Each row of a transposed view spans the whole 300 KB buffer: no window fits.
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        ta.t().contiguous()
    tall = rng.standard_normal((8000, 4)).astype(np.float32)  # columns span 128 KB
    tt = tl.Tensor(tall[:2000].copy(), device=small)  # 32 KB: fits whole
    np.testing.assert_allclose(tt.t().contiguous().numpy(), tall[:2000].T)
    row = tl.Tensor(a[0], device=small)
    np.testing.assert_allclose(ta.broadcast_add(row).numpy(), a + a[0], rtol=1e-6)
    col = tl.Tensor(a[:, :1], device=small)
    np.testing.assert_allclose(ta.broadcast_mul(col).numpy(), a * a[:, :1], rtol=1e-6)
    np.testing.assert_allclose(ta.narrow(0, 100, 150).exp().numpy(), np.exp(a[100:250]), rtol=1e-5)


def test_split_in_place_writes(small):
    n = 70_000
    t = tl.zeros((n,), device=small)
    t.narrow(0, 10_000, 50_000).const_set(2.5)
    v = t.numpy()
    assert v[:10_000].sum() == 0 and (v[10_000:60_000] == 2.5).all() and v[60_000:].sum() == 0
    src = tl.ones((40_000,), device=small)
    t.slice_set(src, 0, 25_000)
    v = t.numpy()
    assert (v[25_000:65_000] == 1.0).all() and (v[10_000:25_000] == 2.5).all()
    u = tl.zeros((n,), dtype="u8", device=small)
    u.narrow(0, 3, n - 7).one_set()
    w = u.numpy()
    assert w[:3].sum() == 0 and (w[3:n - 4] == 1).all() and w[n - 4:].sum() == 0


def test_ops_that_cannot_split_raise_clearly(small):
    a = tl.ones((200, 200), device=small)
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        a.matmul(a)
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        a.sum_keepdim(1)


def test_a_single_window_too_large_raises(small):
    # each output row reads a 200 KB column of a transposed operand: cannot fit
    a = tl.ones((50_000, 4), device=small)
    b = tl.ones((4, 50_000), device=small).t()
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        (a + b).numpy()


def test_real_binding_limit(gpu):
    """A tensor beyond the adapter's real limit (lavapipe: 128 MiB)."""
    limit = gpu._state.max_binding
    n = limit // 4 + 4096 * 3 + 5
    if n * 4 * 6 > 4 << 30:
        pytest.skip("the adapter's binding limit is too large to exceed cheaply here")
    a = np.arange(n, dtype=np.float32) % 1000
    t = tl.Tensor(a, device=gpu)
    u = (t + 1.0).numpy()
    assert u.shape == (n,) and u[0] == 1.0 and u[-1] == a[-1] + 1.0
    np.testing.assert_array_equal(u[-5000:], a[-5000:] + 1.0)
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        t.sum_keepdim(0)


def test_an_op_that_raises_returns_its_output_buffer(small):
    x = tl.ones((1, 3, 100, 100), device=small)  # 120 KB: beyond the binding
    k = tl.ones((1, 3, 1, 1), device=small)
    before = small.memory_stats()["active_bytes"]
    for _ in range(3):
        with pytest.raises(tl.TallowError, match="max storage binding size"):
            x.max_pool2d(2, 2)
        with pytest.raises(tl.TallowError, match="max storage binding size"):
            x.conv2d(k)
    assert small.memory_stats()["active_bytes"] == before


def test_index_ops_over_large_sources_split_or_raise(small):
    # The kernels add id * stride to what a chunk touches: each window must reach
    # over the whole indexed dim, or the op must raise, never read a wrong window.
    # Along dim 0 of a table larger than a binding, the work goes in slabs of rows.
    rng = np.random.default_rng(2)
    a = rng.standard_normal((300, 250)).astype(np.float32)  # 300 KB, beyond the binding
    a[7, 3] = -0.0  # slab merging keeps the sign of zero
    ta = tl.Tensor(a, device=small)
    cols = rng.integers(0, 250, 100).astype(np.uint32)
    gi = rng.integers(0, 300, (3, 250)).astype(np.uint32)
    for id_dtype in (np.uint32, np.int64):
        rows = np.array([299, 0, 150, 7, 7, 64, 65], id_dtype)
        tr = tl.Tensor(rows, device=small)
        got = ta.index_select(tr, 0).numpy()
        np.testing.assert_array_equal(got, a[rows])
        assert np.signbit(got[3, 3]) and np.signbit(got[4, 3])
        emb = ta.embedding(tl.Tensor(rows.reshape(7, 1), device=small)).numpy()
        np.testing.assert_array_equal(emb, a[rows].reshape(7, 1, 250))
        g = ta.gather(tl.Tensor(gi.astype(id_dtype), device=small), 0).numpy()
        np.testing.assert_array_equal(g, np.take_along_axis(a, gi.astype(np.int64), 0))
        ref = np.zeros_like(a)
        np.add.at(ref, rows.astype(np.int64), np.arange(7 * 250, dtype=np.float32).reshape(7, 250))
        src = tl.Tensor(np.arange(7 * 250, dtype=np.float32).reshape(7, 250), device=small)
        got = tl.zeros((300, 250), device=small).index_add(tr, src, 0).numpy()
        np.testing.assert_array_equal(got, ref)
        gids = gi.astype(id_dtype)
        ref2 = np.zeros_like(a)
        np.add.at(ref2, (gids.astype(np.int64), np.arange(250)[None, :]), 1.0)
        got = tl.zeros((300, 250), device=small).scatter_add(
            tl.Tensor(gids, device=small), tl.ones((3, 250), device=small), 0).numpy()
        np.testing.assert_array_equal(got, ref2)
    # u8 ids over a slab boundary (widened before the shift)
    small8 = rng.standard_normal((256, 250)).astype(np.float32)
    ids8 = np.array([255, 0, 70, 130, 200], np.uint8)
    np.testing.assert_array_equal(
        tl.Tensor(small8, device=small).index_select(tl.Tensor(ids8, device=small), 0).numpy(),
        small8[ids8])
    # Columns: a window of whole rows for each chunk of the output.
    np.testing.assert_array_equal(ta.index_select(tl.Tensor(cols, device=small), 1).numpy(),
                                  a[:, cols])
    # A source whose single slice along the dim passes the binding: a clear error.
    wide = tl.zeros((2, 20000), device=small)
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        wide.index_select(tl.Tensor(np.array([1, 0], np.uint32), device=small), 1)


def test_an_in_place_write_that_cannot_split_leaves_its_destination_untouched(small):
    # Chunks inside a row of the source fit a binding; the chunk that crosses to the
    # next row (160 KB further on) cannot. Nothing may be written before that is known.
    big = tl.Tensor(np.arange(80_000, dtype=np.float32).reshape(2, 40_000), device=small)
    src = big.narrow(1, 0, 20_000)
    dst = tl.zeros((2, 20_000), device=small)
    with pytest.raises(tl.TallowError, match="max storage binding size"):
        dst.slice_set(src, 0, 0)
    assert not dst.numpy().any()
