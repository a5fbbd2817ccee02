"""The views-and-copies facts of SPEC section 1, exactly as specified."""

import numpy as np
import pytest

import tallow as tl


def ptr(t):
    return t.storage_and_layout()[0].ptr


ROWS = [
    ("a", lambda a: a, [3, 4], [4, 1], 0, True, True),
    ("a.clone()", lambda a: a.clone(), [3, 4], [4, 1], 0, True, True),
    ("a.reshape((2,6))", lambda a: a.reshape((2, 6)), [2, 6], [6, 1], 0, True, True),
    ("a.unsqueeze(0)", lambda a: a.unsqueeze(0), [1, 3, 4], [4, 4, 1], 0, True, True),
    ("a.t()", lambda a: a.t(), [4, 3], [1, 4], 0, False, True),
    ("a.t().contiguous()", lambda a: a.t().contiguous(), [4, 3], [3, 1], 0, True, False),
    ("a.t().reshape(12)", lambda a: a.t().reshape(12), [12], [1], 0, True, False),
    ("a[1:, 1:3]", lambda a: a.i((slice(1, None), slice(1, 3))), [2, 2], [4, 1], 5, False, True),
    ("a[2]", lambda a: a[2], [4], [1], 8, True, True),
    ("a[:, 2]", lambda a: a[:, 2], [3], [4], 2, False, True),
    ("a.broadcast_as((2,3,4))", lambda a: a.broadcast_as((2, 3, 4)), [2, 3, 4], [0, 4, 1], 0, False, True),
    ("a.to_dtype(same)", lambda a: a.to_dtype(a.dtype), [3, 4], [4, 1], 0, True, True),
    ("a.detach()", lambda a: a.detach(), [3, 4], [4, 1], 0, True, True),
    ("a.copy()", lambda a: a.copy(), [3, 4], [4, 1], 0, True, False),
    ("a + 1.0", lambda a: a + 1.0, [3, 4], [4, 1], 0, True, False),
]


@pytest.mark.parametrize("dtype", [tl.f32, tl.f64])
@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_views_and_copies_table(dtype, row):
    _, f, dims, stride, offset, contiguous, same = row
    a = tl.arange(0, 12, dtype=dtype).reshape((3, 4))
    t = f(a)
    assert list(t.dims) == dims
    assert list(t.stride) == stride
    assert t.layout.start_offset == offset
    assert t.is_contiguous() is contiguous
    assert (ptr(t) == ptr(a)) is same


def test_transposed_reshape_order_and_values():
    a = tl.arange(0, 12, dtype=tl.f32).reshape((3, 4))
    assert a.t().reshape(12).values() == [0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]
    t = a.t()
    tc = t.contiguous()
    assert t[0].values() == tc[0].values() == [0.0, 4.0, 8.0]
    assert t.equal(tc)


EXERCISE_1 = [
    ("a.permute((2,0,1))", lambda a: a.permute((2, 0, 1)), False, True),
    ("a.permute((2,0,1)).flatten_all()", lambda a: a.permute((2, 0, 1)).flatten_all(), True, False),
    ("a.flatten_all()", lambda a: a.flatten_all(), True, True),
    ("a[:, 1, :]", lambda a: a[:, 1, :], False, True),
    ("a[:, 1, :].contiguous()", lambda a: a[:, 1, :].contiguous(), True, False),
    ("a[1, :].contiguous()", lambda a: a[1, :].contiguous(), True, True),
    ("a.squeeze(0)", lambda a: a.squeeze(0), True, True),
    ("a.transpose(1, 1)", lambda a: a.transpose(1, 1), True, True),
]


@pytest.mark.parametrize("row", EXERCISE_1, ids=[r[0] for r in EXERCISE_1])
def test_exercise_1(row):
    _, f, contiguous, same = row
    a = tl.arange(0, 24, dtype=tl.f32).reshape((2, 3, 4))
    t = f(a)
    assert t.is_contiguous() is contiguous
    assert (ptr(t) == ptr(a)) is same


def test_exercise_1_details():
    a = tl.arange(0, 24, dtype=tl.f32).reshape((2, 3, 4))
    row = a[1, :]
    assert row.layout.start_offset == 12
    assert row.contiguous() is row
    assert a.squeeze(0) is a  # dim 0 has size 2: returned unchanged, no error
    assert a.transpose(1, 1) is a


def test_exercise_2_compact_copies():
    bias = tl.zeros(1000, dtype=tl.f32)
    wide = bias.broadcast_as((1000, 1000))
    copy = wide.contiguous()
    row = copy[0]
    small = row.copy()
    compact = row.force_contiguous()

    def nbytes(t):
        return t.storage_and_layout()[0].nbytes

    assert bias.storage_and_layout()[0].nbytes == 4000
    assert wide.nelement == 1_000_000 and nbytes(wide) == 4000
    assert nbytes(copy) == 4_000_000
    assert row.nelement == 1000 and nbytes(row) == 4_000_000
    # tallow's copy is compact, unlike candle's (which keeps the whole 4 MB storage).
    assert nbytes(small) == 4000
    assert nbytes(compact) == 4000
    assert small.storage_and_layout()[0].count == 1000


def test_copy_is_independent_of_in_place_writes():
    a = tl.arange(0, 6, dtype=tl.f32)
    c = a.copy()
    a.const_set(7.0)
    assert c.values() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert a.values() == [7.0] * 6


def test_from_vec_keeps_the_buffer_from_slice_copies():
    arr = np.arange(12, dtype=np.float32)
    t = tl.Tensor.from_vec(arr, (3, 4))
    assert ptr(t) == arr.ctypes.data
    arr[0] = 42.0  # the tensor sees writes to the caller's array
    assert t[0, 0].values() == 42.0
    s = tl.Tensor.from_slice(arr, (3, 4), tl.cpu)
    assert ptr(s) != arr.ctypes.data
    n = tl.Tensor.new(arr)
    assert ptr(n) != arr.ctypes.data
    assert tl.from_numpy(arr).storage_and_layout()[0].ptr == arr.ctypes.data


def test_from_vec_refuses_what_it_cannot_share():
    with pytest.raises(tl.ShapeMismatchError):
        tl.Tensor.from_vec(np.zeros((4, 4), np.float32).T, (4, 4))
    with pytest.raises(tl.ShapeMismatchError):
        tl.Tensor.from_vec(np.zeros(5, np.float32), (2, 3))
    with pytest.raises(tl.UnsupportedDTypeError):  # no u16 in candle's dtype set
        tl.Tensor.from_vec(np.zeros(4, np.uint16), (4,))
    shared = np.zeros(4, np.int32)  # i32 is one of tallow's dtypes now: shared, not widened
    t = tl.Tensor.from_vec(shared, (4,))
    shared[1] = 7
    assert t.dtype == tl.i32 and t.numpy().tolist() == [0, 7, 0, 0]
    with pytest.raises(TypeError):
        tl.Tensor.from_vec([1.0, 2.0], (2,))


def test_storage_and_layout_fields():
    a = tl.arange(0, 12, dtype=tl.f64).reshape((3, 4))
    s, lay = a[1:].storage_and_layout()
    assert s.nbytes == 96 and s.count == 12 and s.dtype == tl.f64 and s.device == "cpu"
    assert s.buffer_size == 96
    assert lay.shape == (2, 4) and lay.stride == (4, 1) and lay.start_offset == 4
    flat = np.asarray(s)
    assert flat.shape == (12,) and flat[5] == 5.0


def test_unsqueeze_strides():
    a = tl.arange(0, 12, dtype=tl.f32).reshape((3, 4))
    assert a.unsqueeze(1).stride == (4, 1, 1)
    assert a.unsqueeze(2).stride == (4, 1, 1)
    assert a.unsqueeze(-1).shape == (3, 4, 1)


def test_views_of_views_share_storage_and_values():
    a = tl.arange(0, 24, dtype=tl.f32).reshape((2, 3, 4))
    v = a.permute((1, 2, 0)).narrow(1, 1, 2)[::2]
    expect = np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(1, 2, 0)[:, 1:3][::2]
    np.testing.assert_array_equal(v.numpy(), expect)
    assert ptr(v) == ptr(a)


@pytest.mark.parametrize("perm", [(1, 0), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)])
def test_contiguous_copies_of_permuted_tensors(perm):
    # Large enough for the tiled transposed copy; odd sizes leave partial tiles.
    shape = {2: (131, 197), 3: (5, 67, 93)}[len(perm)]
    arr = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = tl.Tensor(arr).permute(perm)
    np.testing.assert_array_equal(t.contiguous().numpy(), np.transpose(arr, perm))
    np.testing.assert_array_equal((t + t).numpy(), 2 * np.transpose(arr, perm))
    assert (t + t).is_contiguous()


from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def view_chain(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    steps = draw(st.lists(st.sampled_from(
        ["t", "permute", "narrow", "unsqueeze", "squeeze", "reshape", "flatten", "step", "broadcast"]),
        min_size=1, max_size=5))
    return shape, steps, draw(st.randoms(use_true_random=False))


@settings(max_examples=60, deadline=None)
@given(view_chain())
def test_chains_of_views_match_numpy(case):
    shape, steps, rnd = case
    arr = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = base = tl.Tensor(arr)  # kept alive: a freed buffer's address can come back
    base_ptr = ptr(base)
    copied = False
    for step in steps:
        rank = arr.ndim
        if step == "t" and rank >= 2:
            t, arr = t.t(), np.swapaxes(arr, -1, -2)
        elif step == "permute" and rank >= 1:
            perm = list(range(rank))
            rnd.shuffle(perm)
            t, arr = t.permute(tuple(perm)), np.transpose(arr, perm)
        elif step == "narrow" and rank >= 1:
            d = rnd.randrange(rank)
            start = rnd.randrange(arr.shape[d])
            n = rnd.randint(1, arr.shape[d] - start)
            t = t.narrow(d, start, n)
            sl = [slice(None)] * rank
            sl[d] = slice(start, start + n)
            arr = arr[tuple(sl)]
        elif step == "unsqueeze":
            d = rnd.randint(0, rank)
            t, arr = t.unsqueeze(d), np.expand_dims(arr, d)
        elif step == "squeeze" and rank >= 1:
            d = rnd.randrange(rank)
            t = t.squeeze(d)
            arr = np.squeeze(arr, d) if arr.shape[d] == 1 else arr
        elif step == "reshape":
            # A reshape is a view of a contiguous tensor and a copy otherwise.
            if not t.is_contiguous():
                copied, arr = True, np.ascontiguousarray(arr)
            t, arr = t.reshape(-1), arr.reshape(-1)
        elif step == "flatten" and rank >= 2:
            if not t.is_contiguous():
                copied, arr = True, np.ascontiguousarray(arr)
            t, arr = t.flatten_from(rank - 2), arr.reshape(arr.shape[:-2] + (-1,))
        elif step == "step" and rank >= 1:
            d = rnd.randrange(rank)
            sl = [slice(None)] * rank
            sl[d] = slice(None, None, 2)
            t, arr = t[tuple(sl)], arr[tuple(sl)]
        elif step == "broadcast":
            t, arr = t.broadcast_left(2), np.broadcast_to(arr, (2,) + arr.shape)
        assert t.shape == arr.shape
        np.testing.assert_array_equal(t.numpy(), arr)
        assert t.is_contiguous() == _np_contig(arr)
    assert (ptr(t) == base_ptr) != copied


def _np_contig(arr):
    # NumPy ignores strides of size-1 dims like tallow does, except for broadcasts.
    acc = arr.itemsize
    for n, s in zip(reversed(arr.shape), reversed(arr.strides)):
        if n > 1 and s != acc:
            return False
        acc *= n
    return True
