"""``t[index]``, ``t[index] = v`` and ``index_put_`` against NumPy (and PyTorch), over
random shapes (rank 0-4) and every index kind: ints, slices (negative, stepped),
``None``, ``...``, int lists, int arrays of shapes that broadcast, boolean masks
(NumPy arrays, lists, bool and u8 tensors), integer tensors, and their mixes.

The CPU tests draw 2,400 cases together (get, set, index_put_); the GPU tests run
the same strategies with fewer examples. Cases NumPy refuses (ids out of range,
arrays that do not broadcast, masks of the wrong shape) must raise IndexError
here too, and a refused write must leave the tensor unchanged.
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl

CPU_EXAMPLES = 800
GPU_EXAMPLES = 120


def _settings(n):
    return settings(max_examples=n, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def _examples(device):
    return CPU_EXAMPLES if device.kind == "cpu" else GPU_EXAMPLES


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple).filter(
    lambda s: int(np.prod(s)) <= 256)


@st.composite
def _ids_shape(draw, family):
    """A shape that broadcasts to ``family`` (dims dropped from the front or set to 1)."""
    drop = draw(st.integers(0, len(family)))
    return tuple(1 if draw(st.booleans()) and draw(st.booleans()) else n for n in family[drop:])


@st.composite
def _ids(draw, n, family):
    """An id index for a dim of size ``n``: a list, a NumPy array or a tensor."""
    shape = draw(_ids_shape(family))
    lo = -n if draw(st.integers(0, 9)) else -n - 1  # now and then one out of range
    hi = n - 1 if draw(st.integers(0, 9)) else n
    if n == 0 and lo == -n and hi == n - 1:
        shape = (0,)  # the only ids a size-0 dim takes: none
    count = int(np.prod(shape))
    values = np.asarray(draw(st.lists(st.integers(lo, max(lo, hi)), min_size=count,
                                      max_size=count)), dtype=np.int64).reshape(shape)
    kind = draw(st.sampled_from(["list", "i64", "i32", "u8ids", "tensor", "tensor_u32"]))
    if kind == "list":
        return values.tolist() if values.ndim else [int(values)]
    if kind == "i64":
        return values
    if kind == "i32":
        return values.astype(np.int32)
    if kind == "u8ids":
        return values.astype(np.int16)
    if kind == "tensor_u32" and values.size and values.min() >= 0:
        return tl.tensor(values.astype(np.uint32), dtype=tl.u32)
    narrow = [getattr(tl, name) for name in ("i32", "i16", "i8") if hasattr(tl, name)]
    if kind == "tensor" and narrow and draw(st.booleans()):
        dtype = draw(st.sampled_from(narrow))
        return tl.tensor(values.astype(dtype.np), dtype=dtype)
    return tl.tensor(values, dtype=tl.i64)


@st.composite
def _mask(draw, covered):
    values = np.asarray(draw(st.lists(st.booleans(), min_size=int(np.prod(covered)),
                                      max_size=int(np.prod(covered)))), dtype=bool)
    values = values.reshape(covered)
    kind = draw(st.sampled_from(["numpy", "list", "u8", "cmp"]))
    if kind == "numpy":
        return values
    if kind == "list":
        return values.tolist()
    if kind == "u8":
        return tl.tensor(values.astype(np.uint8), dtype=tl.u8)
    # a comparison's result, whatever dtype comparisons return
    return tl.tensor(values.astype(np.int64)) > 0


@st.composite
def index_exprs(draw, shape):
    """An index for ``shape``: a tuple of items (or a lone item), NumPy-valid or not."""
    family = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    items = []
    d = 0
    used_ellipsis = False
    rank = len(shape)
    while d < rank and len(items) < 6:
        n = shape[d]
        kind = draw(st.sampled_from(
            ["int", "slice", "step", "full", "none", "ellipsis", "ids", "ids", "mask"]))
        if kind == "int":
            if n == 0:
                continue
            items.append(draw(st.integers(-n, n - 1)))
            d += 1
        elif kind == "slice":
            items.append(slice(draw(st.none() | st.integers(-n - 2, n + 2)),
                               draw(st.none() | st.integers(-n - 2, n + 2))))
            d += 1
        elif kind == "step":
            items.append(slice(draw(st.none() | st.integers(-n - 2, n + 2)),
                               draw(st.none() | st.integers(-n - 2, n + 2)),
                               draw(st.sampled_from([2, 3, -1, -2]))))
            d += 1
        elif kind == "full":
            items.append(slice(None))
            d += 1
        elif kind == "none":
            items.append(None)
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
            d += draw(st.integers(0, rank - d))
        elif kind == "ids":
            items.append(draw(_ids(n, family)))
            d += 1
        elif kind == "mask":
            k = draw(st.integers(1, rank - d))
            items.append(draw(_mask(shape[d:d + k])))
            d += k
    if rank == 0 and draw(st.booleans()):
        items.append(draw(st.sampled_from([None, Ellipsis])))
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def numpy_index(index):
    """The same index with tensors as NumPy arrays (bool for masks), for the oracle."""
    def one(item):
        if isinstance(item, tl.Tensor):
            arr = np.asarray(item.numpy())
            return arr != 0 if item.dtype.name in ("u8", "bool") else arr
        return item
    return tuple(one(i) for i in index) if isinstance(index, tuple) else one(index)


def on(device, index):
    """``index`` with its tensors moved to ``device``."""
    def one(item):
        return item.to_device(device) if isinstance(item, tl.Tensor) else item
    return tuple(one(i) for i in index) if isinstance(index, tuple) else one(index)


def _array(shape, dtype=np.float32):
    return np.asarray(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) + 1)


def check_get(device, shape, index):
    arr = _array(shape)
    t = tl.tensor(arr, device=device)
    try:
        expected = arr[numpy_index(index)]
    except IndexError:
        with pytest.raises(IndexError):
            t[on(device, index)]
        return
    out = t[on(device, index)]
    assert out.shape == expected.shape, (index, out.shape, expected.shape)
    np.testing.assert_array_equal(out.numpy(), expected)


@st.composite
def values_for(draw, shape):
    """A value to write into a selection of ``shape``: a scalar, or an array of a shape
    that broadcasts to it (as a NumPy array, a list or a tensor)."""
    kind = draw(st.sampled_from(["scalar", "int_scalar", "full", "broadcast", "tensor"]))
    if kind == "scalar":
        return -draw(st.floats(0.5, 100.0, allow_nan=False).map(lambda x: round(x, 2)))
    if kind == "int_scalar":
        return -draw(st.integers(1, 100))
    vshape = draw(_ids_shape(shape)) if kind == "broadcast" else shape
    values = -np.arange(1, int(np.prod(vshape)) + 1, dtype=np.float32).reshape(vshape) * 7
    if kind == "tensor":
        return tl.tensor(values)
    return values.tolist() if draw(st.booleans()) and values.ndim else values


def _oracle_value(value):
    return np.asarray(value.numpy()) if isinstance(value, tl.Tensor) else value


def check_set(device, shape, index, value, transposed):
    """Write through ``index`` into a tensor (a transposed view when asked, for rank 2)
    and check it, and a flat view of its storage, against NumPy."""
    transposed = transposed and len(shape) == 2
    base = _array(shape[::-1] if transposed else shape)
    t_base = tl.tensor(base, device=device)
    t = t_base.t() if transposed else t_base
    arr = base.T.copy() if transposed else base.copy()
    storage_view = t_base.reshape(-1)  # shares the storage: it must see the write
    expected = arr.copy()
    try:
        expected[numpy_index(index)] = _oracle_value(value)
    except (IndexError, ValueError) as e:
        with pytest.raises(IndexError if isinstance(e, IndexError) else ValueError):
            t[on(device, index)] = value
        np.testing.assert_array_equal(t.numpy(), arr)  # nothing written
        return
    t[on(device, index)] = value
    np.testing.assert_array_equal(t.numpy(), expected)
    np.testing.assert_array_equal(storage_view.numpy(),
                                  (expected.T if transposed else expected).reshape(-1))


@pytest.mark.parametrize("rank", [0, 1, 2, 3, 4])
def test_get_matches_numpy(rank, device):
    @given(data=st.data())
    @_settings(_examples(device) // 5)
    def run(data):
        shape = data.draw(shapes.filter(lambda s: len(s) == rank))
        check_get(device, shape, data.draw(index_exprs(shape)))
    run()


@pytest.mark.parametrize("rank", [0, 1, 2, 3, 4])
def test_set_matches_numpy(rank, device):
    @given(data=st.data())
    @_settings(_examples(device) // 5)
    def run(data):
        shape = data.draw(shapes.filter(lambda s: len(s) == rank))
        index = data.draw(index_exprs(shape))
        try:
            sel = np.empty(shape)[numpy_index(index)].shape
        except IndexError:
            sel = ()
        value = data.draw(values_for(sel))
        check_set(device, shape, index, value, transposed=data.draw(st.booleans()))
    run()


@given(data=st.data())
@_settings(CPU_EXAMPLES)
def test_index_put_matches_torch(data):
    shape = data.draw(shapes.filter(lambda s: len(s) >= 1 and 0 not in s))
    k = data.draw(st.integers(1, len(shape)))
    family = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    count = int(np.prod(family))
    ids = [np.asarray(data.draw(st.lists(st.integers(-n, n - 1), min_size=count, max_size=count)),
                      dtype=np.int64).reshape(family)
           for n in shape[:k]]
    accumulate = data.draw(st.booleans())
    arr = _array(shape)
    vshape = family + shape[k:]
    values = np.arange(1, int(np.prod(vshape)) + 1, dtype=np.float32).reshape(vshape) * 10
    t = tl.tensor(arr)
    out = t.index_put_(tuple(tl.tensor(i) for i in ids), tl.tensor(values), accumulate=accumulate)
    assert out is t
    if accumulate:
        expected = torch.from_numpy(arr.copy()).index_put_(
            tuple(torch.from_numpy(i) for i in ids), torch.from_numpy(values), accumulate=True)
        np.testing.assert_allclose(t.numpy(), expected.numpy(), rtol=1e-6)
    else:
        # PyTorch leaves the winner among repeated positions unspecified; NumPy's last
        # write wins here.
        expected = arr.copy()
        expected[tuple(ids)] = values
        np.testing.assert_array_equal(t.numpy(), expected)
