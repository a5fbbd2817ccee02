"""PyTorch spellings on tensors (docs/semantics.md), each against PyTorch.

Reductions with dim=/keepdim=, max(dim) -> (values, indices), sort/topk on any
dim, var/std, any/all, view/size/ndim/numel, dtype shorthands and aliases,
where/masked_fill, random constructors with manual_seed, in-place ops, formatting,
and a docstring on every public Tensor method.
"""

import inspect

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import assert_close, shapes

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _pair(device, shape, seed=0, dtype=np.float32):
    arr = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return tl.tensor(arr, device=device), torch.from_numpy(arr.copy())


def _np(t):
    return t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t.numpy())


# -- reductions ------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_sum_mean_with_dim_and_keepdim_match_torch(device, data):
    shape = data.draw(shapes(min_rank=1, max_rank=4, max_side=5))
    x, r = _pair(device, shape, data.draw(st.integers(0, 99)))
    rank = len(shape)
    dims = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                              unique_by=lambda d: d % rank))
    keep = data.draw(st.booleans())
    for name in ("sum", "mean"):
        got = getattr(x, name)(dim=tuple(dims), keepdim=keep)
        ref = getattr(r, name)(dim=tuple(dims), keepdim=keep)
        assert got.shape == tuple(ref.shape)
        assert_close(got, ref.numpy(), tl.f32, device, loose=True)
        # candle's positional spelling is the same call.
        assert_close(getattr(x, name)(dims[0]), getattr(r, name)(dims[0]).numpy(), tl.f32, device, loose=True)
    assert x.sum().shape == () and x.mean().shape == ()
    assert_close(x.sum(), r.sum().numpy(), tl.f32, device, loose=True)
    assert x.sum(keepdim=True).shape == (1,) * rank


def test_max_min_dim_return_values_and_indices_as_torch(device):
    arr = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0], [0.0, -1.0, 3.0]], dtype=np.float32)
    x, r = tl.tensor(arr, device=device), torch.from_numpy(arr)
    for dim in (0, 1, -1):
        for keep in (False, True):
            for name in ("max", "min"):
                got = getattr(x, name)(dim, keepdim=keep)
                ref = getattr(r, name)(dim, keepdim=keep)
                np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
                np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
                assert got.indices.dtype == tl.i64
                values, indices = got  # unpacks like PyTorch's named tuple
                assert values.shape == tuple(ref.values.shape)
    assert x.max().item() == 7.0 and x.min().item() == -1.0
    other = tl.full((3, 3), 4.0, device=device)
    np.testing.assert_array_equal(x.max(other).numpy(), torch.max(r, torch.full((3, 3), 4.0)).numpy())
    np.testing.assert_array_equal(x.amax((0, 1)).numpy(), r.amax((0, 1)).numpy())
    np.testing.assert_array_equal(x.amin(1, keepdim=True).numpy(), r.amin(1, keepdim=True).numpy())


def test_argmax_argmin_are_i64_as_torch(device):
    x, r = _pair(device, (4, 5), 3)
    assert x.argmax().item() == r.argmax().item()
    assert x.argmax().dtype == tl.i64
    np.testing.assert_array_equal(x.argmax(1).numpy(), r.argmax(1).numpy())
    np.testing.assert_array_equal(x.argmin(0, keepdim=True).numpy(), r.argmin(0, keepdim=True).numpy())
    np.testing.assert_array_equal(x.argmax_keepdim(1).numpy(), r.argmax(1, keepdim=True).numpy())
    # The accuracy idiom: i64 predictions compare with i64 labels.
    labels = tl.tensor(r.argmax(1).tolist(), device=device)
    assert (x.argmax(1) == labels).float().mean().item() == 1.0


def test_max_gradient_through_the_values():
    w = tl.Var([[1.0, 3.0], [4.0, 2.0]])
    grads = w.max(1).values.sum().backward()
    np.testing.assert_array_equal(grads[w].numpy(), [[0.0, 1.0], [1.0, 0.0]])


@pytest.mark.parametrize("kwargs", [{}, {"unbiased": False}, {"correction": 0}, {"correction": 2},
                                    {"dim": 1}, {"dim": (0, 2), "keepdim": True},
                                    {"dim": -1, "unbiased": True}])
def test_var_std_match_torch(device, kwargs):
    x, r = _pair(device, (3, 4, 5), 7)
    for name in ("var", "std"):
        assert_close(getattr(x, name)(**kwargs), getattr(r, name)(**kwargs).numpy(), tl.f32, device, loose=True)


def test_var_keeps_candles_positional_form(device):
    x, r = _pair(device, (3, 4), 1)
    assert_close(x.var(1), r.var(1).numpy(), tl.f32, device, loose=True)
    assert_close(x.var_keepdim(0, False), r.var(0, keepdim=True, unbiased=False).numpy(), tl.f32, device, loose=True)


def test_any_all_match_torch(device):
    arr = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 3.0, -1.0]], dtype=np.float32)
    x, r = tl.tensor(arr, device=device), torch.from_numpy(arr)
    assert x.any().item() == 1 and x.all().item() == 0
    for dim in (0, 1):
        np.testing.assert_array_equal(x.any(dim).numpy(), r.any(dim).numpy().astype(np.uint8))
        np.testing.assert_array_equal(x.all(dim, keepdim=True).numpy(),
                                      r.all(dim, keepdim=True).numpy().astype(np.uint8))


def test_cumsum_matches_torch(device):
    x, r = _pair(device, (3, 5), 2)
    for d in (0, 1, -1):
        assert_close(x.cumsum(d), r.cumsum(d).numpy(), tl.f32, device, loose=True)
    ints = tl.tensor([[1, -2, 3]], device=device)
    assert ints.cumsum(1).values() == [[1, -1, 2]]


# -- sorting ---------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_sort_and_topk_on_any_dim_match_torch(device, data):
    shape = data.draw(shapes(min_rank=1, max_rank=3, max_side=6))
    # Distinct values, so the indices are unique too.
    arr = np.random.default_rng(data.draw(st.integers(0, 99))).permutation(int(np.prod(shape)))
    arr = arr.astype(np.float32).reshape(shape)
    x, r = tl.tensor(arr, device=device), torch.from_numpy(arr)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    desc = data.draw(st.booleans())
    got, ref = x.sort(dim, descending=desc), r.sort(dim, descending=desc)
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    assert got.indices.dtype == tl.i64
    np.testing.assert_array_equal(x.argsort(dim, descending=desc).numpy(), r.argsort(dim, descending=desc).numpy())
    k = data.draw(st.integers(0, shape[dim]))
    largest = data.draw(st.booleans())
    got, ref = x.topk(k, dim, largest=largest), r.topk(k, dim, largest=largest)
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())


def test_sort_is_stable_and_topk_checks_k(device):
    x = tl.tensor([2.0, 1.0, 2.0, 1.0], device=device)
    assert x.sort().indices.values() == [1, 3, 0, 2]
    assert x.sort(descending=True).indices.values() == [0, 2, 1, 3]
    with pytest.raises(tl.ShapeMismatchError):
        x.topk(5)


# -- shapes and dtypes -------------------------------------------------------------------------
def test_view_size_ndim_numel(device):
    x, r = _pair(device, (2, 3, 4))
    assert x.view(6, -1).shape == tuple(r.view(6, -1).shape)
    assert x.view(24).storage_and_layout()[0] is x.storage_and_layout()[0]  # no copy
    assert x.size() == tuple(r.size()) and x.size(-1) == r.size(-1) == 4
    assert x.ndim == r.ndim == 3 and x.dim() == 3
    assert x.numel() == r.numel() == 24
    with pytest.raises(tl.NotContiguousError, match="reshape"):
        x.transpose(0, 2).view(24)
    assert x.squeeze().shape == (2, 3, 4)
    assert tl.zeros((1, 3, 1), device=device).squeeze().shape == (3,)


def test_dtype_shorthands_and_aliases(device):
    x = tl.tensor([-1.5, 0.0, 2.7], device=device)
    assert x.float().dtype == tl.float32 == tl.f32
    assert x.long().dtype == tl.int64 == tl.i64
    assert x.int().dtype == tl.int32 == tl.i32
    assert x.int().values() == torch.tensor([-1.5, 0.0, 2.7]).int().tolist()
    assert x.long().values() == torch.tensor([-1.5, 0.0, 2.7]).long().tolist()
    assert x.half().dtype == tl.float16 and x.bfloat16().dtype == tl.bfloat16
    if device.supports_dtype(tl.f64):
        assert x.double().dtype == tl.float64
    assert x.bool().values() == [True, False, True]   # nonzero (0.5 is true), as torch
    assert tl.tensor([0.5], device=device).bool().values() == [True]
    assert tl.tensor([3], device=device).byte().dtype == tl.uint8
    assert tl.uint32 is tl.u32
    assert tl.zeros(2, dtype=tl.float64).dtype == tl.f64


# -- where and masks ---------------------------------------------------------------------------
def test_where_masked_fill_match_torch(device):
    x, r = _pair(device, (3, 4), 5)
    c, rc = x > 0, r > 0
    np.testing.assert_array_equal(tl.where(c, x, -x).numpy(), torch.where(rc, r, -r).numpy())
    np.testing.assert_array_equal(tl.where(c, x, 0.0).numpy(), torch.where(rc, r, 0.0).numpy())
    np.testing.assert_array_equal(x.where(c, 1.0).numpy(), r.where(rc, 1.0).numpy())
    np.testing.assert_array_equal(x.masked_fill(c, -7.0).numpy(), r.masked_fill(rc, -7.0).numpy())
    row = tl.tensor([[1, 0, 1, 0]], dtype=tl.u8, device=device)
    np.testing.assert_array_equal(x.masked_fill(row, 9.0).numpy(),
                                  r.masked_fill(torch.tensor([[True, False, True, False]]), 9.0).numpy())
    for got, ref in zip(tl.where(c), torch.where(rc)):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
    np.testing.assert_array_equal(x.nonzero().numpy(), r.nonzero().numpy())
    np.testing.assert_array_equal(x.masked_select(c).numpy(), r.masked_select(rc).numpy())
    assert tl.where(tl.tensor([1.0, 0.0], device=device), 1, 2).values() == [1, 2]


# -- random ------------------------------------------------------------------------------------
def test_manual_seed_repeats_every_random_constructor(device):
    def draw():
        return [tl.rand(5, device=device).values(), tl.randn(3, device=device).values(),
                tl.randint(-3, 4, (50,), device=device).values(), tl.randperm(10, device=device).values(),
                tl.multinomial(tl.tensor([0.1, 0.0, 0.9], device=device), 2).values()]

    tl.manual_seed(1234)
    first = draw()
    tl.manual_seed(1234)
    assert draw() == first
    tl.manual_seed(99)
    assert draw() != first


def test_randint_randperm_ranges(device):
    tl.manual_seed(0)
    r = tl.randint(-3, 4, (2000,), device=device)
    assert r.dtype == tl.i64 and r.shape == (2000,)
    assert set(r.values()) == set(range(-3, 4))
    assert tl.randint(5, size=(3, 4), device=device).shape == (3, 4)
    p = tl.randperm(50, device=device)
    assert sorted(p.values()) == list(range(50)) and p.dtype == tl.i64
    with pytest.raises(ValueError):
        tl.randint(3, 3, (2,))


def test_multinomial_frequencies_and_no_repeats(device):
    tl.manual_seed(3)
    probs = np.array([0.1, 0.0, 0.6, 0.3], dtype=np.float32)
    p = tl.tensor(probs, device=device)
    draws = tl.multinomial(p, 20000, replacement=True)
    assert draws.dtype == tl.i64 and draws.shape == (20000,)
    freq = np.bincount(np.asarray(draws.numpy()), minlength=4) / 20000
    np.testing.assert_allclose(freq, probs, atol=0.02)
    assert freq[1] == 0.0
    rows = tl.tensor(np.tile(probs, (50, 1)), device=device).multinomial(3)
    for row in rows.values():
        assert len(set(row)) == 3 and 1 not in row
    with pytest.raises(ValueError):
        tl.multinomial(p, 5)


# -- in-place ops ------------------------------------------------------------------------------
def test_inplace_ops_match_torch_and_write_through_views(device):
    x, r = _pair(device, (3, 4), 11)
    view, rview = x[1:], r[1:]
    other, rother = _pair(device, (4,), 12)
    for op, args, rargs in [("add_", (other,), (rother,)), ("sub_", (0.5,), (0.5,)),
                            ("mul_", (other,), (rother,)), ("div_", (2.0,), (2.0,)),
                            ("clamp_", (-0.5, 0.5), (-0.5, 0.5)), ("add_", (other, ), (rother,))]:
        out = getattr(view, op)(*args)
        getattr(rview, op)(*rargs)
        assert out is view
        assert_close(x, r.numpy(), tl.f32, device)
    view.add_(other, alpha=2.0)
    rview.add_(rother, alpha=2.0)
    assert_close(x, r.numpy(), tl.f32, device)
    x.masked_fill_(x > 0, 0.0)
    r.masked_fill_(r > 0, 0.0)
    assert_close(x, r.numpy(), tl.f32, device)
    x[0].fill_(3.0)
    x[2].zero_()
    r[0].fill_(3.0)
    r[2].zero_()
    assert_close(x, r.numpy(), tl.f32, device)
    x.copy_(tl.tensor([[1, 2, 3, 4]], device=device))   # broadcast and cast, as torch
    r.copy_(torch.tensor([[1, 2, 3, 4]]))
    assert_close(x, r.numpy(), tl.f32, device)


def test_inplace_ops_refuse_a_var_and_wrong_dtypes(device):
    v = tl.Var([1.0, 2.0], device=device)
    for call in (lambda t: t.add_(1.0), lambda t: t.mul_(2.0), lambda t: t.zero_(),
                 lambda t: t.fill_(1.0), lambda t: t.copy_(t), lambda t: t.clamp_(0, 1)):
        with pytest.raises(tl.InplaceOnTrackedError, match="no_grad"):
            call(v)  # PyTorch's leaf rule
        call(v * 1.0)  # a result computed from the Var is written (tests/semantics)
    assert v.values() == [1.0, 2.0]
    v.detach().add_(1.0)  # the escape hatch writes the Var's storage
    assert v.values() == [2.0, 3.0]
    ints = tl.tensor([1, 2], device=device)
    with pytest.raises(tl.DTypeMismatchError):
        ints.div_(2)   # true division cannot be stored in i64, as torch refuses
    ints.mul_(3)
    assert ints.values() == [3, 6]
    with pytest.raises(tl.ShapeMismatchError):
        tl.zeros((2,), device=device).add_(tl.ones((3, 2), device=device))


# -- printing ----------------------------------------------------------------------------------
def test_format_and_str_of_scalars(device):
    loss = tl.tensor(0.123456, device=device)
    assert f"{loss:.4f}" == "0.1235" == f"{torch.tensor(0.123456):.4f}"
    assert f"{tl.tensor([2.5], device=device):.1f}" == "2.5"
    assert f"{tl.tensor(7, device=device):d}" == "7"
    assert str(loss) == "0.123456"
    assert "\n" not in str(loss)
    assert f"{loss}" == str(loss)
    assert str(tl.tensor(3, device=device)) == "3"
    assert "Tensor[" in repr(loss)
    with pytest.raises(TypeError):
        f"{tl.zeros(3, device=device):.2f}"


# -- docstrings --------------------------------------------------------------------------------
def test_every_public_tensor_method_has_a_docstring():
    missing = []
    for name in dir(tl.Tensor):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(tl.Tensor, name)
        target = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if not (getattr(target, "__doc__", None) or "").strip():
            missing.append(name)
    assert not missing, f"public Tensor methods without a docstring: {missing}"


def test_logsumexp_norm_cat_stack_match_torch(device):
    x, r = _pair(device, (3, 4), 21)
    assert_close(x.logsumexp(1), r.logsumexp(1).numpy(), tl.f32, device, loose=True)
    assert_close(x.logsumexp((0, 1), keepdim=True), r.logsumexp((0, 1), keepdim=True).numpy(),
                 tl.f32, device, loose=True)
    for p in ("fro", 2, 1, float("inf")):
        assert_close(x.norm(p), r.norm(p).numpy(), tl.f32, device, loose=True)
        assert_close(x.norm(p, dim=1, keepdim=True), r.norm(p, dim=1, keepdim=True).numpy(),
                     tl.f32, device, loose=True)
    np.testing.assert_array_equal(tl.cat([x, x]).numpy(), torch.cat([r, r]).numpy())
    np.testing.assert_array_equal(tl.stack([x, x]).numpy(), torch.stack([r, r]).numpy())
