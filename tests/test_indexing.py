"""Indexing and index ops against NumPy and PyTorch."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import ALL_DTYPES, np_values

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def index_expr(draw, shape):
    items = []
    dims = list(range(len(shape)))
    d = 0
    used_ellipsis = False
    while d < len(shape):
        kind = draw(st.sampled_from(["int", "slice", "step", "neg", "none", "list", "ellipsis", "full"]))
        n = shape[d]
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            a = draw(st.integers(-n - 1, n + 1))
            b = draw(st.integers(-n - 1, n + 1))
            items.append(slice(a, b))
        elif kind == "step":
            items.append(slice(draw(st.integers(0, n)), None, draw(st.integers(1, 3))))
        elif kind == "neg":
            items.append(slice(None, None, -draw(st.integers(1, 2))))
        elif kind == "none":
            items.append(None)
            continue
        elif kind == "list":
            items.append(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)))
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
            skip = draw(st.integers(0, len(shape) - d))
            d += skip
            continue
        else:
            items.append(slice(None))
        d += 1
    del dims
    return tuple(items)


def numpy_sequential(arr, index):
    """NumPy result of candle-pyo3's rules: list indices select one dim at a time."""
    out = arr
    dim = 0
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    for item in index:
        if item is Ellipsis:
            dim += arr.ndim - consumed
        elif item is None:
            out = np.expand_dims(out, dim)
            dim += 1
        elif isinstance(item, list):
            out = np.take(out, item, axis=dim)
            dim += 1
        elif isinstance(item, slice):
            sl = [slice(None)] * out.ndim
            sl[dim] = item
            out = out[tuple(sl)]
            dim += 1
        else:
            sl = [slice(None)] * out.ndim
            sl[dim] = item
            out = out[tuple(sl)]
    return out


@given(data=st.data())
@SETTINGS
def test_getitem_matches_numpy(data, device):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    arr = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = tl.Tensor(arr, device=device)
    index = data.draw(index_expr(shape))
    try:
        expected = arr[index]
    except IndexError:  # id lists that do not broadcast together
        with pytest.raises(IndexError):
            t[index]
        return
    out = t[index]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    # candle's ``i`` keeps candle's meaning: one dim at a time.
    np.testing.assert_array_equal(t.i(index).numpy(), numpy_sequential(arr, index))


def test_candle_pyo3_indexing_examples():
    t = tl.Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]])
    assert t[0].values() == [3.0, 1.0, 4.0, 1.0]
    assert t[-1].values() == [5.0, 9.0, 2.0, 6.0]
    assert t[:, 0].values() == [3.0, 5]
    assert t[0, 0].values() == 3.0
    assert t[:, -4].values() == [3.0, 5]
    assert t[..., 0].values() == [3.0, 5]
    v = tl.Tensor([3.0, 1, 4, 10, 5, 9, 2, 6])
    assert v[-4:-2].values() == [5.0, 9.0]
    assert v[:-4].values() == [3.0, 1.0, 4.0, 10.0]
    t3 = tl.Tensor([[[1, 2, 3, 4], [5, 6, 7, 8]], [[9, 10, 11, 12], [13, 14, 15, 16]]])
    assert t3[:, :, 0].values() == [[1, 5], [9, 13]]
    assert t3[..., 0:2].values() == [[[1, 2], [5, 6]], [[9, 10], [13, 14]]]
    assert t3[:, 0, 0].values() == [1, 9]


def test_index_with_tensors_lists_and_none(device):
    arr = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = tl.Tensor(arr, device=device)
    ids = tl.Tensor(np.array([3, 0, 3], np.int64), device=device)
    np.testing.assert_array_equal(t[ids].numpy(), arr[[3, 0, 3]])
    np.testing.assert_array_equal(t[:, [5, -1, 0]].numpy(), arr[:, [5, 5, 0]])
    np.testing.assert_array_equal(t[None, 1].numpy(), arr[None, 1])
    ids2 = tl.Tensor(np.array([[0, 1], [2, 3]], np.int64), device=device)
    np.testing.assert_array_equal(t[ids2].numpy(), arr[np.array([[0, 1], [2, 3]])])
    assert t[tl.Tensor(2, device=device)].shape == (6,)


def test_index_errors(device):
    t = tl.zeros((2, 3), device=device)
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(tl.IndexOutOfRangeError):
        t[:, -4]
    with pytest.raises(tl.DimOutOfRangeError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[..., ...]
    with pytest.raises(TypeError):
        t["a"]
    with pytest.raises(tl.IndexOutOfRangeError):
        t[[0, 2]]


def test_index_lists_of_floats_are_refused_and_bools_are_masks(device):
    # NumPy and PyTorch refuse float indices and read a bool list as a mask (tallow
    # too: docs/semantics.md, comparisons and masks); casting either to ids would
    # select the wrong rows without a word.
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tl.Tensor(arr, device=device)
    for bad in ([1.5], np.array([1.0])):
        with pytest.raises(TypeError):
            t[bad]
        with pytest.raises(TypeError):
            t[:, bad]
    for mask in ([True, False, True], np.array([True, False, True])):
        np.testing.assert_array_equal(t[mask].numpy(), arr[np.asarray(mask)])
    with pytest.raises(IndexError):
        t[:, [True, False, True]]  # dim 1 has 4 entries


def test_too_negative_index_list_names_the_given_index(device):
    t = tl.zeros((3, 4), device=device)
    with pytest.raises(tl.IndexOutOfRangeError, match="-4"):
        t[[0, -4]]
    with pytest.raises(tl.IndexOutOfRangeError, match="-5"):
        t[:, [-5]]


def test_strided_slices_are_views():
    a = tl.arange(0, 20, dtype=tl.f32).reshape((4, 5))
    v = a[::2, 1::2]
    assert v.storage_and_layout()[0].ptr == a.storage_and_layout()[0].ptr
    assert v.stride == (10, 2) and v.layout.start_offset == 1
    np.testing.assert_array_equal(v.numpy(), np.arange(20).reshape(4, 5)[::2, 1::2])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("ids_dtype", [tl.u8, tl.u32, tl.i64], ids=str)
def test_index_select_gather(dtype, ids_dtype, device, rng):
    if not (device.supports_dtype(dtype) and device.supports_dtype(ids_dtype)):
        pytest.skip("dtype not on this device")
    x = np_values((5, 4, 3), dtype, rng)
    t = tl.Tensor(x, device=device)
    for dim in range(3):
        ids = rng.integers(0, x.shape[dim], size=7)
        tid = tl.Tensor(ids.astype(ids_dtype.np), device=device)
        np.testing.assert_array_equal(t.index_select(tid, dim).numpy(), np.take(x, ids, axis=dim))
        gshape = list(x.shape)
        gshape[dim] = 6
        gids = rng.integers(0, x.shape[dim], size=gshape)
        out = t.gather(tl.Tensor(gids.astype(ids_dtype.np), device=device), dim)
        np.testing.assert_array_equal(out.numpy(), np.take_along_axis(x, gids, axis=dim))


def test_gather_with_smaller_ids_matches_torch(device, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    ids = rng.integers(0, 5, size=(2, 3))
    out = tl.Tensor(x, device=device).gather(tl.Tensor(ids.astype(np.int64), device=device), 1)
    np.testing.assert_array_equal(out.numpy(), torch.gather(torch.from_numpy(x), 1, torch.from_numpy(ids)).numpy())


def test_max_index_means_no_index(device):
    x = tl.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    ids = tl.Tensor(np.array([2, 0xFFFFFFFF, 0], np.uint32), device=device)
    assert x.index_select(ids, 0).values() == [[8, 9, 10, 11], [0, 0, 0, 0], [0, 1, 2, 3]]
    g = x.gather(tl.Tensor(np.array([[1], [0xFFFFFFFF], [3]], np.uint32), device=device), 1)
    assert g.values() == [[1], [0], [11]]
    emb = x.embedding(tl.Tensor(np.array([[1, 0xFFFFFFFF]], np.uint32), device=device))
    assert emb.shape == (1, 2, 4) and emb.values() == [[[4, 5, 6, 7], [0, 0, 0, 0]]]


def test_out_of_range_ids_raise(device):
    if device.kind != "cpu":
        pytest.skip("range checks on the GPU are the GPU backend's tests")
    x = tl.zeros((3, 4))
    with pytest.raises(tl.IndexOutOfRangeError, match="3"):
        x.index_select(tl.Tensor([0, 3]), 0)
    with pytest.raises(IndexError):
        x.gather(tl.Tensor([[4]]), 1)
    with pytest.raises(tl.IndexOutOfRangeError):
        x.index_select(tl.Tensor(np.array([-1], np.int64)), 0)
    with pytest.raises(tl.UnsupportedDTypeError):
        x.index_select(tl.Tensor([0.0]), 0)


@pytest.mark.parametrize("dtype", [tl.f32, tl.f64, tl.i64], ids=str)
def test_scatter_ops_match_torch(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    x = np_values((4, 5), dtype, rng)
    src = np_values((3, 5), dtype, rng)
    ids = rng.integers(0, 4, size=(3, 5))
    t, ts, ti = (tl.Tensor(x, device=device), tl.Tensor(src, device=device),
                 tl.Tensor(ids.astype(np.int64), device=device))
    tx, tsrc, tids = torch.from_numpy(x), torch.from_numpy(src), torch.from_numpy(ids)
    np.testing.assert_allclose(t.scatter_add(ti, ts, 0).numpy(), tx.scatter_add(0, tids, tsrc).numpy(), rtol=1e-6)
    # scatter without duplicates (ties would be order-dependent)
    uniq = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1)
    tu = tl.Tensor(uniq.astype(np.int64), device=device)
    np.testing.assert_array_equal(t.scatter(tu, ts, 0).numpy(), tx.scatter(0, torch.from_numpy(uniq), tsrc).numpy())
    before = t.numpy().copy()
    t.scatter_set(tu, ts, 0)
    np.testing.assert_array_equal(t.numpy(), torch.from_numpy(before).scatter(0, torch.from_numpy(uniq), tsrc).numpy())
    rows = rng.integers(0, 4, size=6)
    srows = np_values((6, 5), dtype, rng)
    out = tl.Tensor(x, device=device).index_add(tl.Tensor(rows.astype(np.int64), device=device),
                                                tl.Tensor(srows, device=device), 0)
    np.testing.assert_allclose(out.numpy(), tx.index_add(0, torch.from_numpy(rows), torch.from_numpy(srows)).numpy(), rtol=1e-6)


def test_cat_stack_chunk_split(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 5)).astype(np.float32)
    ta, tb = tl.Tensor(a, device=device), tl.Tensor(b, device=device)
    np.testing.assert_array_equal(tl.cat([ta, tb], 1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(tl.cat([ta.t(), tb.t()], 0).numpy(), np.concatenate([a.T, b.T], 0))
    np.testing.assert_array_equal(tl.stack([ta, ta], 1).numpy(), np.stack([a, a], 1))
    np.testing.assert_array_equal(tl.Tensor.cat([ta, ta], 0).numpy(), np.concatenate([a, a], 0))
    with pytest.raises(tl.ShapeMismatchError):
        tl.cat([ta, tb], 0)
    with pytest.raises(tl.ShapeMismatchError):
        tl.stack([ta, tb], 0)
    parts = tl.Tensor(np.arange(10, dtype=np.float32), device=device).chunk(3, 0)
    assert [p.shape[0] for p in parts] == [4, 4, 2]  # torch's: ceil(10 / 3), the last shorter
    assert [p.shape[0] for p in tl.zeros(2, device=device).chunk(3, 0)] == [1, 1]
    assert [p.shape[0] for p in tl.zeros(10, device=device).split(4)] == [4, 4, 2]
    assert [p.shape[0] for p in tl.zeros(10, device=device).split([1, 9])] == [1, 9]


def test_pad_flip_roll_repeat_match_numpy(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = tl.Tensor(x, device=device)
    np.testing.assert_array_equal(t.pad_with_zeros(1, 2, 1).numpy(), np.pad(x, ((0, 0), (2, 1))))
    np.testing.assert_array_equal(t.pad_with_same(0, 1, 2).numpy(), np.pad(x, ((1, 2), (0, 0)), mode="edge"))
    np.testing.assert_array_equal(t.flip([0, 1]).numpy(), np.flip(x, (0, 1)))
    np.testing.assert_array_equal(t.flip(1).numpy(), np.flip(x, 1))
    for shift in (-5, -1, 0, 1, 3, 9):
        np.testing.assert_array_equal(t.roll(shift, 1).numpy(), np.roll(x, shift, 1))
    np.testing.assert_array_equal(t.repeat((2, 3)).numpy(), np.tile(x, (2, 3)))
    np.testing.assert_array_equal(t.repeat((2, 1, 2)).numpy(), np.tile(x, (2, 1, 2)))


def test_tril_triu_meshgrid(device):
    np.testing.assert_array_equal(tl.Tensor.tril2(4, tl.f32, device).numpy(), np.tril(np.ones((4, 4))))
    np.testing.assert_array_equal(tl.triu2(3, dtype=tl.u8, device=device).numpy(), np.triu(np.ones((3, 3))))
    x = tl.Tensor([1.0, 2.0, 3.0], device=device)
    y = tl.Tensor([4.0, 5.0], device=device)
    for xy in (False, True):
        got = tl.Tensor.meshgrid([x, y], xy)
        exp = np.meshgrid(x.numpy(), y.numpy(), indexing="xy" if xy else "ij")
        for g, e in zip(got, exp):
            np.testing.assert_array_equal(g.numpy(), e)
