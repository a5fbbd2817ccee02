"""PyTorch's Tensor methods, module-level functions and ``nn.functional`` names against
torch: values on the CPU and the GPU, gradients of the differentiable ones, the special
values (NaN, inf), and ``view``'s stride rule over random strided tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import tallow as tl
import tallow.nn.functional as F
import torch.nn.functional as TF


def _x(shape, seed=0, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def _as_np(v):
    if isinstance(v, torch.Tensor):
        return v.detach().numpy()
    if isinstance(v, tl.Tensor):
        return v.numpy()
    return np.asarray(v)


def _same(ours, theirs, atol=2e-5, rtol=1e-4):
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _same(o, t, atol, rtol)
        return
    o, t = _as_np(ours), _as_np(theirs)
    assert o.shape == t.shape, (o.shape, t.shape)
    if t.dtype == np.bool_ or np.issubdtype(t.dtype, np.integer):
        np.testing.assert_array_equal(o, t)
    else:
        np.testing.assert_allclose(o, t, atol=atol, rtol=rtol, equal_nan=True)


def _check(fn_ours, fn_theirs, arrays, device, grad=True, atol=2e-5, rtol=1e-4):
    """Run both on the same inputs; compare the result and (``grad``) each input's
    gradient of a random weighting of the output."""
    tin = [torch.tensor(a, requires_grad=grad) for a in arrays]
    ours_in = [tl.Var(a, device=device) if grad else tl.Tensor(a, device=device) for a in arrays]
    theirs = fn_theirs(*tin)
    ours = fn_ours(*ours_in)
    _same(ours, theirs, atol, rtol)
    if not grad:
        return
    r = np.random.default_rng(7).standard_normal(tuple(theirs.shape)).astype(np.float32)
    (theirs * torch.from_numpy(r)).sum().backward()
    grads = (ours * tl.Tensor(r, device=device)).sum_all().backward()
    for v, t in zip(ours_in, tin):
        expected = t.grad if t.grad is not None else torch.zeros_like(t)
        got = grads.get(v)
        got = np.zeros(t.shape, np.float32) if got is None else got.numpy()
        np.testing.assert_allclose(got, expected.numpy(), atol=atol, rtol=rtol)


# -- Tensor methods: (id, ours, theirs, input shapes, differentiable) ---------------------------
METHODS = [
    ("prod_dim", lambda x: x.prod(1), lambda x: x.prod(1), [(3, 5, 4)], True),
    ("prod_all", lambda x: x.prod(), lambda x: x.prod(), [(2, 3)], True),
    ("prod_keepdim", lambda x: x.prod(-1, keepdim=True), lambda x: x.prod(-1, keepdim=True), [(3, 7)], True),
    ("cumprod", lambda x: x.cumprod(1), lambda x: x.cumprod(1), [(3, 6)], True),
    ("cumprod_0", lambda x: x.cumprod(0), lambda x: x.cumprod(0), [(5, 2)], True),
    ("median_dim", lambda x: x.median(1).values, lambda x: x.median(1).values, [(3, 6)], True),
    ("median_idx", lambda x: x.median(-1).indices, lambda x: x.median(-1).indices, [(4, 5)], False),
    ("median_all", lambda x: x.median(), lambda x: x.median(), [(4, 5)], True),
    ("lerp", lambda a, b: a.lerp(b, 0.3), lambda a, b: a.lerp(b, 0.3), [(3, 4), (3, 4)], True),
    ("tril", lambda x: x.tril(), lambda x: x.tril(), [(2, 4, 5)], True),
    ("triu_1", lambda x: x.triu(1), lambda x: x.triu(1), [(4, 5)], True),
    ("tril_m1", lambda x: x.tril(-1), lambda x: x.tril(-1), [(5, 4)], True),
    ("unbind", lambda x: x.unbind(1)[2], lambda x: x.unbind(1)[2], [(2, 3, 4)], True),
    ("rsqrt", lambda x: x.abs().rsqrt(), lambda x: x.abs().rsqrt(), [(3, 4)], True),
    ("mT", lambda x: x.mT, lambda x: x.mT, [(2, 3, 4)], True),
    ("softmax", lambda x: x.softmax(1), lambda x: x.softmax(1), [(3, 4)], True),
    ("log_softmax", lambda x: x.log_softmax(-1), lambda x: x.log_softmax(-1), [(3, 4)], True),
    ("unfold", lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2), [(2, 8, 3)], True),
    ("unfold_last", lambda x: x.unfold(-1, 2, 1), lambda x: x.unfold(-1, 2, 1), [(3, 5)], True),
    ("view_as", lambda a, b: a.view_as(b), lambda a, b: a.view_as(b), [(2, 6), (3, 4)], True),
    ("expand_as", lambda a, b: a.expand_as(b), lambda a, b: a.expand_as(b), [(1, 4), (3, 4)], True),
    ("diff", lambda x: x.diff(), lambda x: x.diff(), [(3, 5)], True),
    ("diff_2_dim0", lambda x: x.diff(2, 0), lambda x: x.diff(2, 0), [(5, 3)], True),
    ("square", lambda x: x.square(), lambda x: x.square(), [(3, 4)], True),
    ("reciprocal", lambda x: x.abs().reciprocal(), lambda x: x.abs().reciprocal(), [(3, 4)], True),
    ("log1p", lambda x: x.abs().log1p(), lambda x: x.abs().log1p(), [(3, 4)], True),
    ("log1p_tiny", lambda x: (x * 1e-9).log1p(), lambda x: (x * 1e-9).log1p(), [(3, 4)], True),
    ("expm1", lambda x: x.expm1(), lambda x: x.expm1(), [(3, 4)], True),
    ("expm1_tiny", lambda x: (x * 1e-9).expm1(), lambda x: (x * 1e-9).expm1(), [(3, 4)], True),
    ("addcmul", lambda a, b, c: a.addcmul(b, c, value=0.5), lambda a, b, c: a.addcmul(b, c, value=0.5),
     [(3, 4), (3, 4), (3, 4)], True),
    ("count_nonzero", lambda x: x.gt(0).count_nonzero(1), lambda x: x.gt(0).count_nonzero(1), [(3, 4)], False),
    ("outer", lambda a, b: a.outer(b), lambda a, b: a.outer(b), [(3,), (4,)], True),
    ("trace", lambda x: x.trace(), lambda x: x.trace(), [(4, 4)], True),
    ("diag_vec", lambda x: x.diag(), lambda x: x.diag(), [(4,)], True),
    ("diag_vec_up", lambda x: x.diag(2), lambda x: x.diag(2), [(3,)], True),
    ("diag_vec_down", lambda x: x.diag(-1), lambda x: x.diag(-1), [(3,)], True),
    ("diag_mat", lambda x: x.diag(1), lambda x: x.diag(1), [(4, 5)], True),
    ("diagonal", lambda x: x.diagonal(0, 1, 2), lambda x: x.diagonal(0, 1, 2), [(2, 3, 4)], True),
    ("diagonal_off", lambda x: x.diagonal(-1, 0, 2), lambda x: x.diagonal(-1, 0, 2), [(4, 2, 3)], True),
    ("einsum", lambda a, b: a.einsum("bij,bjk->bik", b), lambda a, b: torch.einsum("bij,bjk->bik", a, b),
     [(2, 3, 4), (2, 4, 5)], True),
    ("repeat_interleave", lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1),
     [(2, 3)], True),
    ("repeat_interleave_flat", lambda x: x.repeat_interleave(3), lambda x: x.repeat_interleave(3),
     [(2, 2)], True),
    ("tile", lambda x: x.tile((2, 1, 2)), lambda x: x.tile((2, 1, 2)), [(3, 2)], True),
    ("movedim", lambda x: x.movedim(0, -1), lambda x: x.movedim(0, -1), [(2, 3, 4)], True),
    ("movedim_many", lambda x: x.movedim((0, 1), (2, 0)), lambda x: x.movedim((0, 1), (2, 0)),
     [(2, 3, 4)], True),
    ("swapaxes", lambda x: x.swapaxes(0, 2), lambda x: x.swapaxes(0, 2), [(2, 3, 4)], True),
    ("clamp_kw", lambda x: x.clamp(min=-0.5, max=0.5), lambda x: x.clamp(min=-0.5, max=0.5), [(3, 4)], True),
    ("clamp_min", lambda x: x.clamp_min(0.1), lambda x: x.clamp_min(0.1), [(3, 4)], True),
    ("clamp_max", lambda x: x.clamp_max(0.1), lambda x: x.clamp_max(0.1), [(3, 4)], True),
    ("fmod", lambda x: x.fmod(0.3), lambda x: x.fmod(0.3), [(3, 4)], False),
    ("isclose", lambda a, b: a.isclose(b, atol=0.5), lambda a, b: a.isclose(b, atol=0.5), [(3, 4), (3, 4)], False),
    ("unflatten", lambda x: x.unflatten(1, (2, -1)), lambda x: x.unflatten(1, (2, -1)), [(3, 6)], True),
    ("mm", lambda a, b: a.mm(b), lambda a, b: a.mm(b), [(3, 4), (4, 2)], True),
    ("bmm", lambda a, b: a.bmm(b), lambda a, b: a.bmm(b), [(2, 3, 4), (2, 4, 2)], True),
    ("transpose_kw", lambda x: x.transpose(dim0=0, dim1=1), lambda x: x.transpose(dim0=0, dim1=1),
     [(2, 3)], True),
    ("nan_to_num", lambda x: x.nan_to_num(), lambda x: x.nan_to_num(), [(3, 4)], True),
]


@pytest.mark.parametrize("case", METHODS, ids=[c[0] for c in METHODS])
def test_method_matches_torch(case, device):
    _, ours, theirs, shapes, grad = case
    arrays = [_x(s, seed=i) for i, s in enumerate(shapes)]
    _check(ours, theirs, arrays, device, grad)


def test_index_methods_match_torch(device):
    x = _x((3, 4, 5))
    ids = np.array([[[0, 2, 1, 3, 0]], [[1, 1, 1, 1, 1]], [[3, 2, 1, 0, 3]]], np.int64)
    ti = torch.from_numpy(ids)
    _check(lambda v: v.take_along_dim(tl.Tensor(ids, device=device), 1),
           lambda t: t.take_along_dim(ti, 1), [x], device)
    _check(lambda v: v.take_along_dim(tl.Tensor(np.array([0, 7, 59]), device=device)),
           lambda t: t.take_along_dim(torch.tensor([0, 7, 59])), [x], device)
    _check(lambda v: v.index_fill(1, tl.Tensor(np.array([0, 2]), device=device), -1.5),
           lambda t: t.index_fill(1, torch.tensor([0, 2]), -1.5), [x], device)
    idx = np.array([2, 0], np.int64)
    _check(lambda v: v.index_select(1, tl.Tensor(idx, device=device)),
           lambda t: t.index_select(1, torch.from_numpy(idx)), [x], device)
    _check(lambda v: v.gather(1, tl.Tensor(ids, device=device)),
           lambda t: t.gather(1, ti), [x], device)


def test_repeat_interleave_with_counts(device):
    x = _x((3, 2))
    _check(lambda v: v.repeat_interleave(tl.Tensor(np.array([2, 0, 1]), device=device), 0),
           lambda t: t.repeat_interleave(torch.tensor([2, 0, 1]), 0), [x], device)


def test_integer_products_and_fmod_match_torch(device):
    a = np.array([[3, -2, 4], [1, 5, -1]], np.int64)
    ours, theirs = tl.Tensor(a, device=device), torch.from_numpy(a)
    _same(ours.prod(1), theirs.prod(1))
    _same(ours.prod(), theirs.prod())
    _same(ours.cumprod(1), theirs.cumprod(1))
    _same(ours.prod(1).dtype == tl.i64, True)
    for divisor in (3, -3):
        _same(ours.fmod(divisor), theirs.fmod(divisor))


# -- special values ----------------------------------------------------------------------------
SPECIAL = np.array([0.0, -1.0, 1e-20, -0.0, math.inf, -math.inf, math.nan, 100.0, -200.0, 3.5],
                   np.float32)


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite", "nan_to_num", "log1p", "expm1",
                                  "rsqrt", "square"])
def test_special_values_match_torch(name, device):
    ours = getattr(tl.Tensor(SPECIAL, device=device), name)()
    theirs = getattr(torch.from_numpy(SPECIAL), name)()
    _same(ours, theirs, atol=0, rtol=1e-6)


def test_nan_to_num_with_values_and_f64():
    a = SPECIAL.astype(np.float64)
    _same(tl.Tensor(a).nan_to_num(1.0, 2.0, -3.0), torch.from_numpy(a).nan_to_num(1.0, 2.0, -3.0))
    _same(tl.Tensor(a).nan_to_num(), torch.from_numpy(a).nan_to_num())


def test_integer_tests_of_values():
    a = np.array([1, -2, 0], np.int64)
    for name in ("isnan", "isinf", "isfinite"):
        _same(getattr(tl.Tensor(a), name)(), getattr(torch.from_numpy(a), name)())


def test_median_propagates_nan_as_torch(device):
    a = np.array([[1.0, math.nan, 3.0, 0.5], [2.0, 1.0, math.nan, math.nan], [4.0, 1.0, 2.0, 3.0]],
                 np.float32)
    ours, theirs = tl.Tensor(a, device=device).median(1), torch.from_numpy(a).median(1)
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)
    _same(tl.Tensor(a, device=device).median(), torch.from_numpy(a).median())


def test_sort_with_nan_matches_torch(device):
    a = np.array([3.0, math.nan, -1.0, math.inf, -math.inf, 0.0], np.float32)
    ours, theirs = tl.Tensor(a, device=device).sort(), torch.from_numpy(a).sort()
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)


@pytest.mark.parametrize("values", [
    [3.0, 1.0, math.nan, 1.0, math.nan, 2.0],
    [-0.0, 0.0, math.inf, -math.inf, math.inf],
    [5.0, 5.0, 5.0],
])
def test_unique_matches_torch(values, device):
    a = np.array(values, np.float32)
    ours = tl.Tensor(a, device=device).unique(return_inverse=True, return_counts=True)
    theirs = torch.from_numpy(a).unique(return_inverse=True, return_counts=True)
    _same(ours, theirs)


def test_unique_along_a_dim_and_of_integers():
    a = np.array([[1, 2], [3, 4], [1, 2]], np.int64)
    _same(tl.Tensor(a).unique(dim=0, return_counts=True),
          torch.from_numpy(a).unique(dim=0, return_counts=True))
    _same(tl.Tensor(a).unique(), torch.from_numpy(a).unique())


# -- new tensors, types, autograd flags ------------------------------------------------------
def test_new_constructors_take_dtype_and_device_from_self(device):
    x = tl.Tensor(np.zeros((2,), np.float64), device=device)
    for made, shape in ((x.new_zeros(2, 3), (2, 3)), (x.new_ones((4,)), (4,)),
                        (x.new_full((2, 2), 7.0), (2, 2)), (x.new_empty(3), (3,)),
                        (x.new_tensor([1, 2]), (2,))):
        assert made.shape == shape and made.dtype == tl.f64 and made.device == x.device
    assert x.new_full((2,), 7.0).tolist() == [7.0, 7.0]
    assert x.new_tensor([1, 2]).tolist() == [1.0, 2.0]
    assert x.new_zeros(2, dtype=tl.i64).dtype == tl.i64


def test_type_converts():
    assert tl.zeros(2).type(tl.f64).dtype == tl.f64


def test_uniform_and_normal_fill_in_place(device):
    x = tl.zeros((2000,), device=device)
    assert x.uniform_(-2.0, 3.0) is x
    v = x.numpy()
    assert v.min() >= -2.0 and v.max() < 3.0 and abs(v.mean() - 0.5) < 0.15
    x.normal_(1.0, 2.0)
    v = x.numpy()
    assert abs(v.mean() - 1.0) < 0.2 and abs(v.std() - 2.0) < 0.2


def test_requires_grad_and_is_leaf_follow_torch():
    w = tl.Var([1.0, 2.0])
    y = w * 2
    plain = tl.tensor([1.0])
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = t * 2
    assert (w.requires_grad, w.is_leaf) == (t.requires_grad, t.is_leaf)
    assert (y.requires_grad, y.is_leaf) == (ty.requires_grad, ty.is_leaf)
    assert (plain.requires_grad, plain.is_leaf) == (False, True)
    assert w.requires_grad_() is w and plain.requires_grad_(False) is plain
    with pytest.raises(tl.InvalidArgumentError, match="tl.Var"):
        plain.requires_grad_()


def test_allclose_and_equal():
    a = _x((3, 4))
    assert tl.Tensor(a).allclose(tl.Tensor(a + 1e-7)) == torch.from_numpy(a).allclose(
        torch.from_numpy(a + 1e-7))
    assert tl.allclose(tl.Tensor(a), tl.Tensor(a + 1e-2)) is False
    assert tl.equal(tl.Tensor(a), tl.Tensor(a.copy())) is True


def test_errors_name_the_problem():
    with pytest.raises(tl.ShapeMismatchError, match="mm"):
        tl.zeros((2, 3, 4)).mm(tl.zeros((4, 2)))
    with pytest.raises(tl.ShapeMismatchError, match="unflatten"):
        tl.zeros((2, 6)).unflatten(1, (4, 2))
    with pytest.raises(tl.InvalidArgumentError, match="einsum"):
        tl.einsum("ij,jk->ik", tl.zeros((2, 3)))


# -- einsum ---------------------------------------------------------------------------------
EINSUMS = [
    ("ij->ji", [(3, 4)]), ("ii->i", [(4, 4)]), ("ii", [(3, 3)]), ("ij->", [(3, 4)]),
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]), ("...ij,...jk->...ik", [(2, 2, 3, 4), (2, 4, 5)]),
    ("i,j->ij", [(3,), (4,)]), ("i,i->", [(5,), (5,)]), ("bij,bij->b", [(2, 3, 4), (2, 3, 4)]),
    ("ijk,ikl,ilm->ijm", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]), ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]), ("abc,cd,b->ad", [(2, 3, 4), (4, 5), (3,)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_matches_torch(equation, shapes, device):
    arrays = [_x(s, seed=i) for i, s in enumerate(shapes)]
    _check(lambda *v: tl.einsum(equation, *v), lambda *t: torch.einsum(equation, *t), arrays, device,
           atol=1e-4)


# -- view on strided tensors -------------------------------------------------------------------
def test_split_qkv_views_without_a_copy():
    fused = tl.Tensor(_x((2, 5, 3 * 32)))
    q, k, v = fused.chunk(3, -1)
    heads = q.view(2, 5, 4, 8)
    assert heads.storage_and_layout()[0] is fused.storage_and_layout()[0]
    tq = torch.from_numpy(fused.numpy()).chunk(3, -1)[0].view(2, 5, 4, 8)
    assert tuple(heads.stride) == tq.stride()
    _same(heads, tq)


def test_view_raises_as_torch_where_no_strides_can():
    t = tl.zeros((4, 6)).t()
    with pytest.raises(tl.NotContiguousError, match="reshape"):
        t.view(24)
    with pytest.raises(RuntimeError):
        torch.zeros(4, 6).t().view(24)


def test_view_of_a_strided_var_has_gradients():
    _check(lambda x: x.narrow(1, 2, 4).view(3, 2, 2) * 1.5,
           lambda x: x.narrow(1, 2, 4).view(3, 2, 2) * 1.5, [_x((3, 8))], tl.cpu)


_dims = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(shape=_dims, perm_seed=st.integers(0, 1000), narrow=st.booleans(), data=st.data())
def test_view_follows_torch_on_strided_layouts(shape, perm_seed, narrow, data):
    base = np.arange(int(np.prod(shape)) * 2, dtype=np.float32)[:int(np.prod(shape))].reshape(shape)
    ours, theirs = tl.Tensor(base), torch.from_numpy(base.copy())
    perm = list(np.random.default_rng(perm_seed).permutation(len(shape)))
    ours, theirs = ours.permute(perm), theirs.permute(perm)
    if narrow and theirs.shape[-1] > 1:
        ours, theirs = ours.narrow(-1, 1, theirs.shape[-1] - 1), theirs.narrow(-1, 1, theirs.shape[-1] - 1)
    n = theirs.numel()
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    first = data.draw(st.sampled_from(divisors))
    new_shape = (first, n // first) if data.draw(st.booleans()) else (n // first, 1, first)
    try:
        expected = theirs.view(new_shape)
    except RuntimeError:
        with pytest.raises(tl.NotContiguousError):
            ours.view(new_shape)
        return
    got = ours.view(new_shape)
    # a dim of size 1 is never stepped along, so its stride is free
    assert [s for s, n in zip(got.stride, new_shape) if n > 1] == \
        [s for s, n in zip(expected.stride(), new_shape) if n > 1]
    _same(got, expected)


# -- module-level functions --------------------------------------------------------------------
FUNCTIONS = [
    ("exp", lambda m, x: m.exp(x)), ("log", lambda m, x: m.log(m.abs(x))), ("sum", lambda m, x: m.sum(x, 1)),
    ("mean", lambda m, x: m.mean(x)), ("softmax", lambda m, x: m.softmax(x, 1)),
    ("log_softmax", lambda m, x: m.log_softmax(x, -1)), ("tril", lambda m, x: m.tril(x)),
    ("triu", lambda m, x: m.triu(x, 1)), ("sqrt", lambda m, x: m.sqrt(m.abs(x))),
    ("maximum", lambda m, x: m.maximum(x, x[0])), ("minimum", lambda m, x: m.minimum(x, x[:, :1])),
    ("max_dim", lambda m, x: m.max(x, 1)[0]), ("max_all", lambda m, x: m.max(x)),
    ("max_pair", lambda m, x: m.max(x, x * 2)), ("min_dim", lambda m, x: m.min(x, 0).values),
    ("argmax", lambda m, x: m.argmax(x, 1)), ("clamp", lambda m, x: m.clamp(x, min=-0.2, max=0.4)),
    ("sigmoid", lambda m, x: m.sigmoid(x)), ("tanh", lambda m, x: m.tanh(x)), ("relu", lambda m, x: m.relu(x)),
    ("norm", lambda m, x: m.norm(x)), ("topk", lambda m, x: m.topk(x, 2).values),
    ("sort", lambda m, x: m.sort(x, 1).values), ("argsort", lambda m, x: m.argsort(x, 1)),
    ("cumsum", lambda m, x: m.cumsum(x, 1)), ("cumprod", lambda m, x: m.cumprod(x, 1)),
    ("prod", lambda m, x: m.prod(x, 0)), ("median", lambda m, x: m.median(x)),
    ("lerp", lambda m, x: m.lerp(x, x * 2, 0.25)), ("rsqrt", lambda m, x: m.rsqrt(m.abs(x))),
    ("flatten", lambda m, x: m.flatten(x)), ("reshape", lambda m, x: m.reshape(x, (4, 3))),
    ("transpose", lambda m, x: m.transpose(x, 0, 1)), ("permute", lambda m, x: m.permute(x, (1, 0))),
    ("squeeze", lambda m, x: m.squeeze(m.unsqueeze(x, 0), 0)), ("chunk", lambda m, x: m.chunk(x, 2, 1)[1]),
    ("split", lambda m, x: m.split(x, 1, 0)[2]), ("masked_fill", lambda m, x: m.masked_fill(x, x > 0, 0.0)),
    ("outer", lambda m, x: m.outer(x[0], x[1])), ("bmm", lambda m, x: m.bmm(x[None], x.t()[None])),
    ("mm", lambda m, x: m.mm(x, x.t())), ("matmul", lambda m, x: m.matmul(x, x.t())),
    ("diag", lambda m, x: m.diag(x[0])), ("logsumexp", lambda m, x: m.logsumexp(x, 1)),
    ("std", lambda m, x: m.std(x, 1)), ("pow", lambda m, x: m.pow(x, 2)), ("sin", lambda m, x: m.sin(x)),
    ("cos", lambda m, x: m.cos(x)), ("floor", lambda m, x: m.floor(x)), ("ceil", lambda m, x: m.ceil(x)),
    ("round", lambda m, x: m.round(x * 3)), ("sign", lambda m, x: m.sign(x)), ("erf", lambda m, x: m.erf(x)),
    ("abs", lambda m, x: m.abs(x)), ("addmm", lambda m, x: m.addmm(x[0, :3], x, x.t()[:, :3], beta=0.5, alpha=2)),
    ("flip", lambda m, x: m.flip(x, (0,))), ("roll", lambda m, x: m.roll(x, 1)),
    ("roll_dims", lambda m, x: m.roll(x, (1, 2), (0, 1))),
    ("repeat_interleave", lambda m, x: m.repeat_interleave(x, 2, 0)), ("tile", lambda m, x: m.tile(x, (2,))),
    ("unbind", lambda m, x: m.unbind(x, 1)[1]), ("narrow", lambda m, x: m.narrow(x, 1, 1, 2)),
    ("einsum", lambda m, x: m.einsum("ij,kj->ik", x, x)), ("nan_to_num", lambda m, x: m.nan_to_num(x)),
    ("broadcast_tensors", lambda m, x: m.broadcast_tensors(x, x[0])[1]),
    ("gather", lambda m, x: m.gather(x, 1, m.argsort(x, 1))),
    ("index_select", lambda m, x: m.index_select(x, 1, m.argmax(x, 1))),
]


@pytest.mark.parametrize("case", FUNCTIONS, ids=[c[0] for c in FUNCTIONS])
def test_function_matches_torch(case, device):
    _, call = case
    a = _x((3, 4))
    _same(call(tl, tl.Tensor(a, device=device)), call(torch, torch.from_numpy(a)))


def test_functions_that_make_tensors():
    assert tl.empty(2, 3).shape == (2, 3) and tl.empty((4,)).dtype == tl.f32
    x = tl.zeros((2,), dtype=tl.f64)
    assert tl.empty_like(x).dtype == tl.f64 and tl.numel(tl.zeros((2, 5))) == 10
    assert tl.as_tensor(x) is x
    assert tl.as_tensor([1, 2]).tolist() == [1, 2]
    assert tl.dropout(x + 1, 0.5, False).tolist() == [1.0, 1.0]
    g = tl.meshgrid(tl.arange(3), tl.arange(2), indexing="xy")
    tg = torch.meshgrid(torch.arange(3), torch.arange(2), indexing="xy")
    assert isinstance(g, tuple)
    _same(g, tg)
    _same(tl.meshgrid(tl.arange(3), tl.arange(2), indexing="ij"),
          torch.meshgrid(torch.arange(3), torch.arange(2), indexing="ij"))
    assert isinstance(tl.meshgrid([tl.arange(3), tl.arange(2)], True), list)  # candle-pyo3's form


def test_every_listed_function_exists():
    names = ("exp log sum mean softmax log_softmax tril triu allclose isnan isinf isfinite einsum "
             "matmul sqrt abs maximum minimum max min argmax clamp sigmoid tanh relu norm topk sort "
             "argsort cumsum cumprod prod unique median lerp rsqrt nan_to_num flatten reshape "
             "transpose permute squeeze unsqueeze chunk split gather index_select masked_fill outer "
             "bmm mm diag logsumexp std isclose equal numel as_tensor empty empty_like dropout pow "
             "sin cos floor ceil round sign erf addmm broadcast_tensors flip roll repeat_interleave "
             "tile unbind narrow").split()
    assert [n for n in names if not callable(getattr(tl, n, None))] == []


# -- nn.functional -----------------------------------------------------------------------------
F_CASES = [
    ("pad_constant", lambda m, x: m.pad(x, (1, 2, 0, 1)), (2, 3, 4)),
    ("pad_value_crop", lambda m, x: m.pad(x, (-1, 2), value=0.5), (2, 3, 4)),
    ("pad_reflect", lambda m, x: m.pad(x, (2, 1, 1, 2), mode="reflect"), (1, 2, 4, 5)),
    ("pad_replicate", lambda m, x: m.pad(x, (2, 1), mode="replicate"), (1, 2, 4)),
    ("pad_circular", lambda m, x: m.pad(x, (1, 2, 2, 1), mode="circular"), (1, 2, 4, 5)),
    ("layer_norm", lambda m, x: m.layer_norm(x, (3, 4)), (2, 3, 4)),
    ("normalize", lambda m, x: m.normalize(x, dim=-1), (3, 4)),
    ("normalize_p1", lambda m, x: m.normalize(x, p=1.0, dim=0), (3, 4)),
    ("nearest_size", lambda m, x: m.interpolate(x, size=(5, 7)), (1, 2, 3, 4)),
    ("nearest_scale", lambda m, x: m.interpolate(x, scale_factor=2), (1, 2, 3, 4)),
    ("nearest_1d", lambda m, x: m.interpolate(x, size=7), (1, 2, 3)),
    ("bilinear", lambda m, x: m.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False),
     (1, 2, 3, 4)),
    ("bilinear_corners", lambda m, x: m.interpolate(x, size=(6, 3), mode="bilinear", align_corners=True),
     (2, 1, 3, 4)),
    ("bilinear_scale", lambda m, x: m.interpolate(x, scale_factor=1.5, mode="bilinear"), (1, 2, 4, 4)),
    ("linear", lambda m, x: m.interpolate(x, size=9, mode="linear"), (1, 2, 4)),
    ("cosine_similarity", lambda m, x: m.cosine_similarity(x, x.flip(0), dim=1), (3, 4)),
    ("softplus", lambda m, x: m.softplus(x * 10, beta=2.0, threshold=5.0), (3, 4)),
    ("group_norm", lambda m, x: m.group_norm(x, 2), (2, 4, 3)),
    ("smooth_l1", lambda m, x: m.smooth_l1_loss(x, x.flip(0) * 2, beta=0.5), (3, 4)),
    ("smooth_l1_none", lambda m, x: m.smooth_l1_loss(x, x * 0, reduction="none"), (3, 4)),
    ("kl_div", lambda m, x: m.kl_div(m.log_softmax(x, 1), m.softmax(x.flip(0), 1),
                                     reduction="batchmean"), (3, 4)),
    ("kl_div_log_target", lambda m, x: m.kl_div(m.log_softmax(x, 1), m.log_softmax(x.flip(0), 1),
                                                reduction="sum", log_target=True), (3, 4)),
    ("unfold", lambda m, x: m.unfold(x, (2, 3), padding=1, stride=(2, 1)), (2, 2, 4, 5)),
    ("unfold_dilation", lambda m, x: m.unfold(x, 2, dilation=2), (1, 2, 5, 5)),
    ("pairwise_distance", lambda m, x: m.pairwise_distance(x, x.flip(0)), (3, 4)),
    ("elu", lambda m, x: m.elu(x, 0.7), (3, 4)),
    ("hardtanh", lambda m, x: m.hardtanh(x, -0.5, 0.5), (3, 4)),
    ("logsigmoid", lambda m, x: m.logsigmoid(x * 30), (3, 4)),
    ("glu", lambda m, x: m.glu(x, 1), (3, 4)),
    ("mish", lambda m, x: m.mish(x), (3, 4)),
    ("gelu_tanh", lambda m, x: m.gelu(x, approximate="tanh"), (3, 4)),
    ("gelu", lambda m, x: m.gelu(x), (3, 4)),
]


@pytest.mark.parametrize("case", F_CASES, ids=[c[0] for c in F_CASES])
def test_functional_matches_torch(case, device):
    _, call, shape = case
    _check(lambda x: call(F, x), lambda x: call(TF, x), [_x(shape)], device, atol=1e-4)


def test_functional_parameters_get_gradients(device):
    x, w, b = _x((2, 4, 3)), _x((4,), 1), _x((4,), 2)
    _check(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: TF.group_norm(x, 2, w, b),
           [x, w, b], device, atol=1e-4)
    w2, b2 = _x((4, 3), 3), _x((4, 3), 4)
    _check(lambda x, w, b: F.layer_norm(x, (4, 3), w, b), lambda x, w, b: TF.layer_norm(x, (4, 3), w, b),
           [x, w2, b2], device, atol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_torch(training, device):
    x, w, b = _x((4, 3, 5)), _x((3,), 1), _x((3,), 2)
    rm, rv = _x((3,), 3), _x((3,), 4, positive=True)
    trm, trv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    orm, orv = tl.Tensor(rm, device=device), tl.Tensor(rv, device=device)
    _check(lambda x, w, b: F.batch_norm(x, orm, orv, w, b, training=training, momentum=0.2),
           lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, training=training, momentum=0.2),
           [x, w, b], device, atol=1e-4)
    _same(orm, trm)
    _same(orv, trv)


def test_one_hot_matches_torch(device):
    ids = np.array([[0, 3], [2, 1]], np.int64)
    _same(F.one_hot(tl.Tensor(ids, device=device)), TF.one_hot(torch.from_numpy(ids)))
    _same(F.one_hot(tl.Tensor(ids, device=device), 6), TF.one_hot(torch.from_numpy(ids), 6))


def test_embedding_padding_idx_gets_no_gradient():
    table = _x((5, 3))
    ids = np.array([[0, 2, 2], [1, 0, 4]], np.int64)
    _check(lambda w: F.embedding(tl.Tensor(ids), w, padding_idx=2),
           lambda w: TF.embedding(torch.from_numpy(ids), w, padding_idx=2), [table], tl.cpu)


def test_torch_signatures_are_accepted():
    import inspect

    assert "approximate" in inspect.signature(F.gelu).parameters
    assert list(inspect.signature(F.scaled_dot_product_attention).parameters) == [
        "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    for name in ("embedding", "dropout", "pad",
                 "interpolate", "layer_norm", "normalize"):
        ours = list(inspect.signature(getattr(F, name)).parameters)
        theirs = [p for p in inspect.signature(getattr(TF, name)).parameters if p != "_random_samples"]
        assert ours[:len(theirs)] == theirs[:len(ours)], (name, ours, theirs)


# -- hypothesis over shapes, dims and dtypes ---------------------------------------------------
_DTYPES = {"f32": (np.float32, 1e-4), "f64": (np.float64, 1e-10)}


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data(),
       dtype=st.sampled_from(sorted(_DTYPES)), seed=st.integers(0, 2**16))
def test_scans_windows_and_repeats_follow_torch(shape, data, dtype, seed):
    np_dtype, tol = _DTYPES[dtype]
    a = np.random.default_rng(seed).uniform(-1.5, 1.5, shape).astype(np_dtype)
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[d]
    size = data.draw(st.integers(1, n))
    step = data.draw(st.integers(1, 3))
    reps = data.draw(st.integers(0, 3))
    calls = [
        lambda x: x.prod(d), lambda x: x.cumprod(d), lambda x: x.unfold(d, size, step),
        lambda x: x.repeat_interleave(reps, d), lambda x: x.diff(dim=d), lambda x: x.movedim(d, 0),
        lambda x: x.median(d).values, lambda x: x.logsumexp(d),
    ]
    call = data.draw(st.sampled_from(calls))
    _check(call, call, [a], tl.cpu, atol=tol, rtol=tol)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 3), i=st.integers(1, 4), j=st.integers(1, 4), k=st.integers(1, 4),
       seed=st.integers(0, 2**16), form=st.sampled_from(
           ["bij,bjk->bik", "bij,bkj->bki", "bij,bjk->", "bij,bjk->bk", "bji,bjk->ik"]))
def test_einsum_follows_torch_over_shapes(b, i, j, k, seed, form):
    rng = np.random.default_rng(seed)
    lhs, rhs = form.split("->")[0].split(",")
    sizes = {"b": b, "i": i, "j": j, "k": k}
    arrays = [rng.standard_normal(tuple(sizes[c] for c in t)) for t in (lhs, rhs)]
    _check(lambda *v: tl.einsum(form, *v), lambda *t: torch.einsum(form, *t), arrays, tl.cpu,
           atol=1e-10, rtol=1e-10)


def test_gather_and_index_select_take_torch_keywords(device):
    a = _x((3, 4))
    ids = np.array([[1, 0, 3], [2, 2, 0], [3, 1, 1]], np.int64)
    x, t = tl.Tensor(a, device=device), torch.from_numpy(a)
    i, ti = tl.Tensor(ids, device=device), torch.from_numpy(ids)
    _same(x.gather(1, index=i), t.gather(1, index=ti))
    _same(x.gather(dim=1, index=i), t.gather(dim=1, index=ti))
    _same(x.index_select(dim=1, index=i[0]), t.index_select(dim=1, index=ti[0]))
    _same(x.index_select(i[0], 1), t.index_select(1, ti[0]))  # candle's order


def test_every_listed_method_and_functional_name_exists():
    methods = ("prod unique median isnan isfinite isinf nan_to_num cumprod lerp tril triu unbind "
               "rsqrt mT softmax log_softmax uniform_ normal_ new_zeros new_ones new_tensor new_full "
               "new_empty type unfold view_as expand_as diff square reciprocal log1p expm1 addcmul "
               "count_nonzero outer trace diag diagonal einsum repeat_interleave tile movedim "
               "swapaxes clamp_min clamp_max fmod allclose isclose unflatten mm bmm take_along_dim "
               "index_fill requires_grad_ requires_grad is_leaf grad").split()
    assert [n for n in methods if not hasattr(tl.Tensor, n)] == []
    functional = ("pad one_hot layer_norm normalize interpolate cosine_similarity softplus "
                  "group_norm batch_norm smooth_l1_loss kl_div unfold pairwise_distance elu hardtanh "
                  "logsigmoid glu mish gelu embedding dropout scaled_dot_product_attention").split()
    assert [n for n in functional if not callable(getattr(F, n, None))] == []
