"""PyTorch-named ops with PyTorch's meaning: chunk, clamp's promotion, softmax without
a dim, scaled_dot_product_attention's masks. Each is checked against PyTorch."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tallow as tl
import tallow.nn.functional as F


# -- chunk ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 2, 5, 6, 7, 10, 13])
@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 5, 8])
def test_chunk_splits_as_torch(device, size, chunks):
    want = [p.tolist() for p in torch.arange(size).chunk(chunks)]
    got = [p.values() for p in tl.arange(0, size, device=device).chunk(chunks)]
    assert got == want


def test_chunk_of_the_issue_and_other_dims(device):
    assert len(tl.arange(0, 6, device=device).chunk(4)) == 3
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    want = [p.numpy() for p in torch.from_numpy(x).chunk(3, dim=-1)]
    got = [p.numpy() for p in tl.Tensor(x, device=device).chunk(3, dim=-1)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError):
        tl.arange(0, 4).chunk(0)


# -- clamp promotes as torch -------------------------------------------------------------------------
CLAMPS = [(0.5, 4.5), (1, 4), (None, 2.5), (-1.5, None), (0, None), (2.0, 2.0)]


@pytest.mark.parametrize("bounds", CLAMPS, ids=[str(b) for b in CLAMPS])
def test_clamp_of_an_integer_tensor_promotes_as_torch(device, bounds):
    lo, hi = bounds
    want = torch.tensor([0, 5, -3]).clamp(lo, hi)
    got = tl.tensor([0, 5, -3], device=device).clamp(lo, hi)
    assert str(got.dtype) == {torch.float32: "f32", torch.int64: "i64"}[want.dtype]
    assert got.values() == want.tolist()


# -- softmax without a dim: PyTorch's legacy choice, with its warning ------------------------------
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_without_dim_follows_torch(device, shape, name):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with pytest.warns(UserWarning):
        want = getattr(TF, name)(torch.from_numpy(x)).numpy()
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        got = getattr(F, name)(tl.Tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_softmax_with_dim_gives_no_warning(device):
    x = tl.randn((2, 3, 4), device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.softmax(x, dim=-1)
        F.log_softmax(x, 1)


# -- scaled_dot_product_attention: torch's masks and arguments ------------------------------------
def _qkv(shape_q, shape_k, ev=None, seed=0):
    rng = np.random.default_rng(seed)
    ev = shape_k[-1] if ev is None else ev
    q = rng.standard_normal(shape_q).astype(np.float32)
    k = rng.standard_normal(shape_k).astype(np.float32)
    v = rng.standard_normal(shape_k[:-1] + (ev,)).astype(np.float32)
    return q, k, v


def _both(q, k, v, device, mask=None, **kw):
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    tm = None if mask is None else torch.from_numpy(mask)
    want = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, **kw).numpy()
    lq, lk, lv = (tl.Tensor(a, device=device) for a in (q, k, v))
    lm = None if mask is None else tl.Tensor(mask, device=device)
    got = F.scaled_dot_product_attention(lq, lk, lv, attn_mask=lm, **kw).numpy()
    return got, want


MASK_SHAPES = [(3, 5), (1, 1, 3, 5), (2, 1, 1, 5), (2, 2, 3, 5)]


@pytest.mark.parametrize("mshape", MASK_SHAPES, ids=[str(m) for m in MASK_SHAPES])
def test_bool_mask_says_where_to_attend(device, mshape):
    q, k, v = _qkv((2, 2, 3, 4), (2, 2, 5, 4))
    mask = np.random.default_rng(1).random(mshape) > 0.4
    mask[..., 0] = True
    got, want = _both(q, k, v, device, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_query_with_nowhere_to_attend_gives_zeros(device):
    q, k, v = _qkv((1, 1, 3, 4), (1, 1, 5, 4))
    mask = np.ones((3, 5), np.bool_)
    mask[1] = False
    got, want = _both(q, k, v, device, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.any(got[0, 0, 1])


def test_float_mask_is_added(device):
    q, k, v = _qkv((2, 2, 3, 4), (2, 2, 5, 4))
    mask = np.random.default_rng(2).standard_normal((1, 2, 3, 5)).astype(np.float32)
    got, want = _both(q, k, v, device, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lengths", [(4, 4), (3, 6), (6, 3)])
def test_is_causal_and_scale(device, lengths):
    L, S = lengths
    q, k, v = _qkv((2, 2, L, 4), (2, 2, S, 4))
    got, want = _both(q, k, v, device, is_causal=True, scale=0.3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_is_causal_with_a_mask_combines_them(device):
    q, k, v = _qkv((1, 2, 4, 4), (1, 2, 4, 4))
    mask = np.random.default_rng(3).random((4, 4)) > 0.3
    got, want = _both(q, k, v, device, mask, is_causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes", [((3, 4), (5, 4)), ((2, 3, 4), (2, 5, 4)),
                                    ((2, 2, 2, 3, 4), (2, 2, 2, 5, 4))])
def test_other_ranks(device, shapes):
    q, k, v = _qkv(*shapes, ev=6)
    mask = np.random.default_rng(4).random((3, 5)) > 0.3
    mask[:, 0] = True
    got, want = _both(q, k, v, device, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_dropout_p_zero_and_positive(device):
    q, k, v = _qkv((1, 1, 3, 4), (1, 1, 5, 4))
    got, want = _both(q, k, v, device, dropout_p=0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    dropped = F.scaled_dot_product_attention(*(tl.Tensor(a, device=device) for a in (q, k, v)),
                                             dropout_p=1.0)
    assert not np.any(dropped.numpy())  # every weight dropped, as torch with p = 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float64])
def test_masks_torch_refuses_are_refused(device, dtype):
    q, k, v = _qkv((1, 1, 3, 4), (1, 1, 5, 4))
    mask = np.ones((3, 5), dtype)
    with pytest.raises(RuntimeError):
        TF.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                        attn_mask=torch.from_numpy(mask))
    with pytest.raises(tl.DTypeMismatchError, match="bool"):
        F.scaled_dot_product_attention(*(tl.Tensor(a, device=device) for a in (q, k, v)),
                                       attn_mask=tl.Tensor(mask, device=device))


def test_the_same_function_in_nn_ops(device):
    assert tl.nn.ops.scaled_dot_product_attention is F.scaled_dot_product_attention
    q, k, v = _qkv((1, 2, 3, 4), (1, 2, 5, 4))
    mask = np.zeros((3, 5), np.bool_)
    mask[:, :2] = True
    got, want = _both(q, k, v, device, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gradients_through_a_bool_mask_match_torch(device):
    q, k, v = _qkv((1, 2, 3, 4), (1, 2, 5, 4))
    mask = np.random.default_rng(5).random((3, 5)) > 0.5
    mask[1] = False  # a row with nowhere to attend: zeros, and no NaN in the gradients
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask)).sum().backward()
    lq, lk, lv = (tl.Var(a, device=device) for a in (q, k, v))
    g = F.scaled_dot_product_attention(lq, lk, lv, attn_mask=tl.Tensor(mask, device=device)) \
        .sum().backward()
    for var, tv_ in ((lq, tq), (lk, tk), (lv, tv)):
        np.testing.assert_allclose(g[var].numpy(), tv_.grad.numpy(), rtol=1e-4, atol=1e-5)
