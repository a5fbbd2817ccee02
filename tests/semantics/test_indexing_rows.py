"""The indexing idioms a NumPy or PyTorch programmer writes, each against PyTorch
(values, shapes, gradients) on CPU and GPU: paired id arrays, the textbook NLL
``logits[arange(B), y]``, separated arrays, diagonal writes, ``index_put_``
with ``accumulate``, and what stays a view."""

import numpy as np
import pytest
import torch

import tallow as tl

A3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def _t(arr, device, dtype=None):
    return tl.tensor(arr, device=device) if dtype is None else tl.tensor(arr, dtype=dtype, device=device)


def test_two_id_lists_pair_up(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = _t(x, device)
    ref = torch.from_numpy(x)
    np.testing.assert_array_equal(t[[0, 1], [1, 0]].numpy(), ref[[0, 1], [1, 0]].numpy())
    assert t[[0, 1], [1, 0]].shape == (2,)
    i0 = _t(np.array([0, 2, 1]), device)
    i1 = _t(np.array([3, 0, 1]), device)
    np.testing.assert_array_equal(
        t[i0, i1].numpy(), ref[torch.tensor([0, 2, 1]), torch.tensor([3, 0, 1])].numpy())


def test_textbook_nll_picks_one_logit_per_row(device):
    rng = np.random.default_rng(0)
    B, C = 3, 5
    logits = rng.standard_normal((B, C)).astype(np.float32)
    y = np.array([4, 0, 2])
    t = _t(logits, device)
    yt = _t(y, device)
    picked = t[tl.arange(0, B, device=device), yt]
    assert picked.shape == (B,)
    ref_logits = torch.from_numpy(logits)
    ref_y = torch.from_numpy(y)
    np.testing.assert_array_equal(picked.numpy(), ref_logits[torch.arange(B), ref_y].numpy())
    loss = -tl.nn.functional.log_softmax(t, dim=-1)[tl.arange(0, B, device=device), yt].mean()
    ref = torch.nn.functional.cross_entropy(ref_logits, ref_y)
    np.testing.assert_allclose(float(loss.item()), float(ref), rtol=1e-5)


@pytest.mark.parametrize("index", [
    (slice(None), [0, 1], [1, 2]),         # adjacent: dims stay in place
    ([0, 1], slice(None), [1, 2]),         # separated by a slice: to the front
    ([0, 1], [1, 2], [3, 0]),              # three arrays: one element each
    ([[0], [1]], [[0, 1, 2]], 1),          # broadcast (2,1) with (1,3), an int among them
    (1, slice(None), [0, 3]),              # an int separated from a list: NumPy's rule
    (Ellipsis, [0, 2]),
    (None, [1, 0], None, [2, 2]),
], ids=["adjacent", "separated", "three", "broadcast", "int-sep", "ellipsis", "none"])
def test_advanced_index_placement_as_numpy(device, index):
    t = _t(A3, device)
    expected = A3[index]
    out = t[index]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    if not any(isinstance(i, int) for i in index):
        # PyTorch agrees whenever no int stands apart from the arrays.
        assert tuple(torch.from_numpy(A3)[index].shape) == expected.shape


def test_int_apart_from_a_list_follows_numpy_not_torch():
    # NumPy counts the int as an array (separated from [0, 3] by the slice, so the
    # broadcast dim goes first); PyTorch applies the int first.
    t = tl.tensor(A3)
    assert t[1, :, [0, 3]].shape == A3[1, :, [0, 3]].shape == (2, 3)
    assert tuple(torch.from_numpy(A3)[1, :, [0, 3]].shape) == (3, 2)


def test_diagonal_write_sets_three_elements(device):
    a = tl.zeros((3, 3), device=device)
    a[[0, 1, 2], [0, 1, 2]] = 1
    np.testing.assert_array_equal(a.numpy(), np.eye(3, dtype=np.float32))
    ref = torch.zeros(3, 3)
    ref[[0, 1, 2], [0, 1, 2]] = 1
    np.testing.assert_array_equal(a.numpy(), ref.numpy())


def test_masks_mix_with_ids_and_slices(device):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = _t(x, device)
    rows = x[:, 0] > 5
    for index in [(rows,), (rows, slice(1, None, 2)), (slice(None), x[0] > 2), (x > 10,),
                  (rows, [0, 1, 5])]:
        tidx = tuple(_t(i.astype(np.uint8), device, tl.u8) if isinstance(i, np.ndarray)
                     and i.dtype == bool else i for i in index)
        np.testing.assert_array_equal(t[tidx].numpy(), x[index])
        ref = torch.from_numpy(x)[tuple(torch.from_numpy(i) if isinstance(i, np.ndarray) else i
                                        for i in index)]
        np.testing.assert_array_equal(t[tidx].numpy(), ref.numpy())
    np.testing.assert_array_equal(t[t > 10].numpy(), x[x > 10])


def test_repeated_positions_last_write_wins(device):
    t = tl.zeros((4,), device=device)
    t[[1, 1, 3, 1]] = tl.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    expected = np.zeros(4, np.float32)
    expected[[1, 1, 3, 1]] = [1, 2, 3, 4]
    np.testing.assert_array_equal(t.numpy(), expected)
    assert t.numpy()[1] == 4.0


def test_writes_of_more_than_65535_elements(device):
    # One GPU invocation walking every id stopped at 65,535 on lavapipe: the rest
    # of x[mask] = v was silently dropped. The ids are spread over columns now.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 300)).astype(np.float32)
    t = _t(x, device)
    t[_t((x > -5).astype(np.uint8), device, tl.u8)] = 2.0        # 90,000 positions
    np.testing.assert_array_equal(t.numpy(), np.full_like(x, 2.0))
    pos = rng.integers(0, 500, 100_000)                          # repeats: the last wins
    vals = np.arange(100_000, dtype=np.float32)
    t = tl.zeros((500,), device=device)
    t[_t(pos, device)] = _t(vals, device)
    expected = np.zeros(500, np.float32)
    expected[pos] = vals
    np.testing.assert_array_equal(t.numpy(), expected)
    for pos in (rng.permutation(90_000)[:80_000].repeat(2),      # two layers of adds
                np.zeros(70_000, np.int64)):                     # one position, many adds
        vals = rng.standard_normal(pos.size).astype(np.float32)
        t = tl.zeros((90_000,), device=device)
        t.index_put_((_t(pos, device),), _t(vals, device), accumulate=True)
        ref = torch.zeros(90_000).index_put_((torch.from_numpy(pos),), torch.from_numpy(vals),
                                              accumulate=True)
        np.testing.assert_allclose(t.numpy(), ref.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_as_torch(device, accumulate):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows, cols = np.array([0, 2, 0, 0]), np.array([1, 3, 1, 2])
    vals = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
    t = _t(x, device)
    out = t.index_put_((_t(rows, device), _t(cols, device)), _t(vals, device), accumulate=accumulate)
    assert out is t
    ref = torch.from_numpy(x.copy())
    ref.index_put_((torch.from_numpy(rows), torch.from_numpy(cols)), torch.from_numpy(vals),
                   accumulate=accumulate)
    if accumulate:
        np.testing.assert_array_equal(t.numpy(), ref.numpy())
        assert t.numpy()[0, 1] == 1 + 10 + 30  # the repeated position sums both
    else:
        expected = x.copy()
        expected[rows, cols] = vals
        np.testing.assert_array_equal(t.numpy(), expected)
    # A mask and a broadcast scalar value.
    m = x > 6
    t2 = _t(x, device)
    t2.index_put_((_t(m.astype(np.uint8), device, tl.u8),), tl.tensor(1.5, device=device),
                  accumulate=accumulate)
    ref2 = torch.from_numpy(x.copy()).index_put_((torch.from_numpy(m),), torch.tensor(1.5),
                                                 accumulate=accumulate)
    np.testing.assert_array_equal(t2.numpy(), ref2.numpy())


def test_write_values_are_cast_as_torch(device):
    t = tl.zeros((2, 3), dtype=tl.i64, device=device)
    t[[0, 1], [2, 0]] = 2.7  # truncated toward zero, as PyTorch
    t[1, [1]] = -3.9
    ref = torch.zeros(2, 3, dtype=torch.int64)
    ref[[0, 1], [2, 0]] = 2.7
    ref[1, [1]] = -3.9
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
    f = tl.zeros((3,), device=device)
    f[[0, 2]] = tl.tensor([4, 5], dtype=tl.i64, device=device)
    np.testing.assert_array_equal(f.numpy(), [4.0, 0.0, 5.0])


def test_advanced_write_is_seen_by_views(device):
    t = tl.zeros((3, 4), device=device)
    row = t[1]                 # a view of the same storage
    col = t[:, 2]
    t[[1, 1, 0], [2, 3, 0]] = 7
    np.testing.assert_array_equal(row.numpy(), [0, 0, 7, 7])
    np.testing.assert_array_equal(col.numpy(), [0, 7, 0])
    # ... and a write through a view's advanced index reaches the base.
    row[[0, -1]] = 5
    np.testing.assert_array_equal(t.numpy()[1], [5, 0, 7, 5])
    tt = t.t()                 # a non-contiguous view written through ids
    tt[[0, 3], [2, 2]] = -1
    assert t.numpy()[2, 0] == -1 and t.numpy()[2, 3] == -1


def test_indexed_writes_keep_clones_apart_and_bump_versions(device):
    # PyTorch: a clone never sees the other's writes; a backward through a tensor
    # written since it was used raises.
    x = tl.arange(0, 12, device=device).reshape(3, 4).to_dtype(tl.f32)
    y = x.clone()
    row = y[1]
    y[[1, 1], [0, 3]] = -1
    x[x > 9] = 0
    y.index_put_((tl.tensor([2], device=device),), tl.tensor(7.0, device=device), accumulate=True)
    np.testing.assert_array_equal(x.numpy(), [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 0]])
    np.testing.assert_array_equal(y.numpy(), [[0, 1, 2, 3], [-1, 5, 6, -1], [15, 16, 17, 18]])
    np.testing.assert_array_equal(row.numpy(), [-1, 5, 6, -1])
    w = tl.Var([1.0, 2.0, 3.0], device=device)
    a = tl.ones((3,), device=device)
    loss = (w * a).sum()
    a[[0, 2]] = 5
    with pytest.raises(tl.StaleGraphError):
        loss.backward()


def test_out_of_range_raises_before_any_write(device):
    t = tl.zeros((3, 4), device=device)
    with pytest.raises(tl.IndexOutOfRangeError, match="index -5 is out of range for dim 0"):
        t[tl.tensor([0, -5], device=device)]
    with pytest.raises(tl.IndexOutOfRangeError, match="index 5 is out of range for dim 1 of size 4"):
        t[[0, 1], [1, 5]] = 1
    with pytest.raises(IndexError, match="-4"):
        t[[0, -4], [0, 0]] = 1
    with pytest.raises(IndexError):
        t.index_put_((tl.tensor([0, 3]),), tl.tensor(1.0), accumulate=True)
    with pytest.raises(IndexError, match="broadcast"):
        t[[0, 1], [0, 1, 2]]
    np.testing.assert_array_equal(t.numpy(), np.zeros((3, 4)))


def test_an_id_at_the_dtype_max_is_out_of_range(device):
    # index_select reads u32::MAX / i64::MAX as candle's "no id" (a row of zeros);
    # t[...] is NumPy's, where that id is out of range.
    t = tl.zeros((3, 4), device=device)
    for value, ids in ((0xFFFFFFFF, tl.tensor([0, 0xFFFFFFFF], dtype=tl.u32, device=device)),
                       (np.iinfo(np.int64).max,
                        tl.tensor([np.iinfo(np.int64).max], dtype=tl.i64, device=device))):
        with pytest.raises(tl.IndexOutOfRangeError,
                           match=f"index {value} is out of range for dim 0 of size 3"):
            t[ids]
        with pytest.raises(tl.IndexOutOfRangeError):
            t[:, 1:][ids]
        with pytest.raises(IndexError):
            t[ids] = 1.0


def test_float_indices_are_refused(device):
    t = tl.zeros((3, 4), device=device)
    for bad in ([0.0, 1.0], np.array([1.5]), tl.tensor([1.0, 0.0], device=device)):
        with pytest.raises(TypeError):
            t[bad]
        with pytest.raises(TypeError):
            t[bad] = 1


@pytest.mark.parametrize("index", [True, False, (0, True), (1, Ellipsis, False),
                                   (False, slice(0, 2), True), (True, None, 0)], ids=str)
def test_bare_bools_index_as_numpy(device, index):
    # A bare bool is a 0-d mask: a new dim of size 1 (True) or 0 (False), joined with
    # the ints beside it as NumPy's advanced indices.
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(_t(x, device)[index].numpy(), x[index])
    want = x.copy()
    want[index] = -1.0
    got = _t(x, device)
    got[index] = -1.0
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("np_dtype", [np.int64, np.int32, np.int16, np.uint8, np.uint32])
def test_ids_of_every_integer_dtype(device, np_dtype):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = _t(x, device)
    ids = np.array([2, 0, 2], dtype=np_dtype)
    np.testing.assert_array_equal(t[ids, 1].numpy(), x[ids, 1])
    np.testing.assert_array_equal(t[:, ids[:2]].numpy(), x[:, ids[:2]])


def test_basic_indexing_still_makes_views():
    # The seed's table (SPEC.md): indexing of a contiguous tensor is a view.
    a = tl.arange(0, 24).reshape((2, 3, 4))
    for view in (a[:, 1, :], a[1], a[..., 1:3], a[None, 0, ::2], a[-1, -2:]):
        assert view.storage_and_layout()[0] is a.storage_and_layout()[0]
    assert not a[:, 1, :].is_contiguous()
    row = a[1, :]
    assert row.contiguous().storage_and_layout()[0] is a.storage_and_layout()[0]
    # An advanced index allocates.
    assert a[[0, 1], 0].storage_and_layout()[0] is not a.storage_and_layout()[0]


def test_candle_i_keeps_one_dim_at_a_time():
    # ``i`` is candle's name (PyTorch and NumPy have none), so it keeps candle's meaning.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tl.tensor(x)
    np.testing.assert_array_equal(t.i(([0, 1], [1, 0])).numpy(), x[[0, 1]][:, [1, 0]])
    np.testing.assert_array_equal(t[[0, 1], [1, 0]].numpy(), x[[0, 1], [1, 0]])


def _grad_check(device, arr, index, torch_index=None):
    """d/dx of sum(x[index] * w) against PyTorch (a scatter-add for repeated ids)."""
    x = tl.Var(arr, device=device)
    ref = torch.tensor(arr, requires_grad=True)
    out = x[index]
    if callable(torch_index):
        ref_out = torch_index(ref)
    else:
        ref_out = ref[torch_index if torch_index is not None else index]
    assert out.shape == tuple(ref_out.shape)
    w = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    grads = (out * tl.tensor(w, device=device)).sum_all().backward()
    (ref_out * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(grads[x].numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_of_advanced_indexing_match_torch(device):
    arr = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    _grad_check(device, arr, ([0, 2, 0], [1, 1, 1]))                       # repeated pairs
    _grad_check(device, arr, (slice(None), [0, 3, 3], [4, 0, 4]))          # adjacent, in place
    _grad_check(device, arr, ([2, 0], slice(1, None, 2), [1, 3]))          # separated
    _grad_check(device, arr, ([[0], [2]], [[1, 1, 3]]))                    # broadcast
    mask = arr[:, :, 0] > 0
    _grad_check(device, arr, (mask,), (torch.from_numpy(mask),))
    _grad_check(device, arr, (Ellipsis, [4, 4, 0]))
    _grad_check(device, arr, (slice(None, None, -1), [1, 2]),               # reversed and ids
                lambda r: r.flip(0)[:, [1, 2]])
    logits = arr[:, :, 0].copy()
    _grad_check(device, logits, (tl.arange(0, 3, device=device), tl.tensor([3, 0, 3], device=device)),
                (torch.arange(3), torch.tensor([3, 0, 3])))
