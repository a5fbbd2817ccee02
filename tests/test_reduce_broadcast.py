"""Reductions of broadcast views (stride-0 dims), against NumPy and PyTorch.

A reduction over a broadcast dim reads one element of it (sum: times the count),
so a huge view such as ``ones(1).broadcast_as((2**25, 2**25))`` reduces at once,
as its values say it should; a reduction that needs a full-size intermediate or
result (var, cumsum, a kept huge dim) fails up front with ShapeTooLargeError.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import assert_close, np_values

HUGE = (2**25, 2**25)  # 2^50 elements, 4 PiB as f32


@st.composite
def broadcast_views(draw, dtype):
    """(tallow broadcast view, its NumPy twin materialised, the view's shape)."""
    rank = draw(st.integers(1, 4))
    base_shape = tuple(draw(st.sampled_from([1, 1, 2, 3])) for _ in range(rank))
    # Each dim of size 1 may grow; a new leading dim may be added too.
    shape = tuple(draw(st.integers(1, 5)) if n == 1 else n for n in base_shape)
    if draw(st.booleans()):
        shape = (draw(st.integers(2, 4)),) + shape
    seed = draw(st.integers(0, 2**31 - 1))
    base = np_values(base_shape, dtype, np.random.default_rng(seed))
    t = tl.from_numpy(base).broadcast_as(shape)
    return t, np.broadcast_to(base, shape).copy(), shape


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_reductions_of_broadcast_views_equal_numpy(data):
    dtype = data.draw(st.sampled_from([tl.f32, tl.f64, tl.f16, tl.i64, tl.u32, tl.u8]))
    t, arr, shape = data.draw(broadcast_views(dtype))
    rank = len(shape)
    dims = tuple(data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank,
                                    unique=True)))
    if dtype is tl.u8:  # u8 sums are i64, as PyTorch's sums of bool
        expected_sum = np.sum(arr, axis=dims, dtype=np.int64)
        assert t.sum(dims).dtype == tl.i64
        np.testing.assert_array_equal(t.sum(dims).numpy(), expected_sum)
    elif dtype is tl.f16:  # accumulated in f32
        expected_sum = np.sum(arr.astype(np.float32), axis=dims).astype(np.float16)
        assert_close(t.sum(dims), expected_sum, dtype)
    else:  # integers wrap in their dtype, as NumPy's sums with that dtype
        assert_close(t.sum(dims), np.sum(arr, axis=dims, dtype=dtype.np), dtype)
    if dtype.is_float:
        assert_close(t.mean(dims, keepdim=True),
                     np.mean(arr.astype(np.float64), axis=dims, keepdims=True).astype(dtype.np),
                     dtype)
    else:  # integer means are f32
        assert_close(t.mean(dims), np.mean(arr.astype(np.float64), axis=dims), tl.f32)
    np.testing.assert_array_equal(t.amax(dims).numpy(), np.max(arr, axis=dims))
    np.testing.assert_array_equal(t.amin(dims).numpy(), np.min(arr, axis=dims))
    d = dims[0]
    np.testing.assert_array_equal(t.max(d).values.numpy(), np.max(arr, axis=d))
    np.testing.assert_array_equal(t.argmax(d).numpy(), np.argmax(arr, axis=d))
    np.testing.assert_array_equal(t.argmin(d).numpy(), np.argmin(arr, axis=d))
    assert t.argmax().item() == np.argmax(arr) and t.argmin().item() == np.argmin(arr)


def test_gradient_through_a_broadcast_sum_equals_torch():
    base = np.array([[0.5], [-2.0], [3.25]], np.float32)
    x = tl.Var(base)
    y = x.broadcast_as((4, 3, 1000))
    grads = (y.sum((0, 2)) * tl.tensor([1.0, 2.0, 3.0])).sum_all().backward()
    xt = torch.tensor(base, requires_grad=True)
    (xt.expand(4, 3, 1000).sum((0, 2)) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(grads.get(x).numpy(), xt.grad.numpy(), rtol=1e-6)


def test_huge_broadcast_view_reduces_without_materialising():
    x = tl.ones(1).broadcast_as(HUGE)
    assert x.sum_all().item() == 2.0**50  # exact: 2^50 is a float32
    assert x.sum().item() == 2.0**50
    assert x.mean().item() == 1.0 and x.mean((0, 1)).item() == 1.0
    assert x.max().item() == 1.0 and x.min().item() == 1.0
    assert x.amax((0, 1)).item() == 1.0
    assert x.argmax().item() == 0 and x.argmin().item() == 0

    # Some dims: a broadcast dim reduced, a real one kept.
    row = tl.tensor([0.0, 1.5, -2.0])
    view = row.broadcast_as((2**40, 3))
    np.testing.assert_array_equal(view.sum(0).numpy(), np.float32([0.0, 1.5, -2.0]) * 2.0**40)
    np.testing.assert_array_equal(view.max(0).values.numpy(), [0.0, 1.5, -2.0])
    np.testing.assert_array_equal(view.argmin(0).numpy(), [0, 0, 0])
    assert view.argmax().item() == 1 and view.argmin().item() == 2

    # Other dtypes: u8 counts in i64, integer and f16 means, integer wrapping.
    assert tl.ones(1, dtype=tl.u8).broadcast_as(HUGE).sum_all().item() == 2**50
    assert tl.full(1, 3, dtype=tl.i64).broadcast_as(HUGE).sum_all().item() == 3 * 2**50
    assert tl.full(1, 1, dtype=tl.u32).broadcast_as((2**16, 2**16 + 3)).sum().item() == \
        (2**16 * (2**16 + 3)) % 2**32
    assert tl.full(1, 7, dtype=tl.u32).broadcast_as(HUGE).mean().item() == 7.0
    assert tl.full(1, 0.5, dtype=tl.f16).broadcast_as(HUGE).mean().item() == 0.5


@pytest.mark.parametrize("name, f", [
    ("var", lambda x: x.var(1)),
    ("var", lambda x: x.std()),
    ("log_sum_exp", lambda x: x.logsumexp(1)),
    ("norm", lambda x: x.norm()),
    ("cumsum", lambda x: x.cumsum(1)),
    ("any", lambda x: x.any()),
    ("sum_keepdim", lambda x: x.unsqueeze(2).broadcast_as(HUGE + (2,)).sum(2)),
    ("max_keepdim", lambda x: x.unsqueeze(2).broadcast_as(HUGE + (2,)).max(2)),
])
def test_huge_broadcast_view_that_would_materialise_fails_up_front(name, f):
    x = tl.ones(1).broadcast_as(HUGE)
    with pytest.raises(tl.ShapeTooLargeError, match=rf"^{name}: shape .* needs \d+ bytes"):
        f(x)
