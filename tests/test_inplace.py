"""In-place writes: shared storages see them, and bad arguments leave nothing written."""

import numpy as np
import pytest

import tallow as tl


def test_fills_write_through_views(device):
    a = tl.zeros((3, 4), device=device)
    a[1].one_set()
    a[:, 3].const_set(5.0)
    assert a.values() == [[0, 0, 0, 5], [1, 1, 1, 5], [0, 0, 0, 5]]
    a.zero_set()
    assert a.sum_all().values() == 0


def test_slice_set_writes_into_the_region(device):
    cache = tl.zeros((2, 6, 3), device=device)
    step = tl.ones((2, 2, 3), device=device)
    cache.slice_set(step, 1, 2)
    expected = np.zeros((2, 6, 3), np.float32)
    expected[:, 2:4] = 1
    np.testing.assert_array_equal(cache.numpy(), expected)
    view = cache.narrow(0, 1, 1)
    view.slice_set(tl.full((1, 1, 3), 7.0, device=device), 1, 5)
    assert cache[1, 5].values() == [7.0, 7.0, 7.0]


BAD_SLICE_SETS = [
    ("offset past the end", lambda d: (tl.ones((2, 2, 3), device=d), 1, 5), tl.NarrowOutOfBoundsError),
    ("negative offset", lambda d: (tl.ones((2, 2, 3), device=d), 1, -1), tl.NarrowOutOfBoundsError),
    ("shape off the dim", lambda d: (tl.ones((2, 2, 4), device=d), 1, 0), tl.ShapeMismatchError),
    ("rank", lambda d: (tl.ones((2, 3), device=d), 1, 0), tl.ShapeMismatchError),
    ("dtype", lambda d: (tl.ones((2, 2, 3), dtype=tl.u32, device=d), 1, 0), tl.DTypeMismatchError),
    ("dim", lambda d: (tl.ones((2, 2, 3), device=d), 3, 0), tl.DimOutOfRangeError),
]


@pytest.mark.parametrize("case", BAD_SLICE_SETS, ids=[c[0] for c in BAD_SLICE_SETS])
def test_slice_set_validates_before_writing(case, device):
    _, make, err = case
    cache = tl.zeros((2, 6, 3), device=device)
    with pytest.raises(err):
        cache.slice_set(*make(device))
    assert cache.abs().sum_all().values() == 0


def test_slice_set_refuses_its_own_storage(device):
    a = tl.zeros((4, 3), device=device)
    with pytest.raises(tl.TallowError):
        a.slice_set(a.narrow(0, 0, 1), 0, 2)


def test_scatter_set_checks_every_id_before_writing():
    a = tl.zeros((3, 4))
    ids = tl.Tensor(np.array([[0, 1, 2, 3]], np.int64))  # 3 is out of range for dim 0
    with pytest.raises(tl.IndexOutOfRangeError):
        a.scatter_set(ids, tl.ones((1, 4)), 0)
    assert a.abs().sum_all().values() == 0


def test_const_set_checks_the_value(device):
    a = tl.zeros(3, dtype=tl.u8, device=device)
    with pytest.raises(OverflowError):
        a.const_set(300)
    with pytest.raises(tl.DTypeMismatchError):
        a.const_set(1.5)
    assert a.values() == [0, 0, 0]


def test_in_place_writes_are_seen_by_every_tensor_on_the_storage(device):
    a = tl.arange(0, 6, dtype=tl.f32, device=device).reshape((2, 3))
    t = a.t()
    a.const_set(2.0)
    assert t.values() == [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]


def test_slice_assign_and_scatter0(device):
    a = tl.zeros((3, 4), device=device)
    out = a.slice_assign([slice(1, 3), (1, 3)], tl.ones((2, 2), device=device))
    assert out.values() == [[0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0]]
    assert a.abs().sum_all().values() == 0  # slice_assign returns a new tensor
    out = a.slice_scatter0(tl.full((1, 4), 3.0, device=device), 2)
    assert out[2].values() == [3.0] * 4
    with pytest.raises(tl.ShapeMismatchError):
        a.slice_assign([slice(0, 1)], tl.ones((2, 4), device=device))
