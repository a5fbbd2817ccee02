"""The PyTorch/NumPy idioms that once gave a different number than PyTorch and NumPy,
one test each, written as a PyTorch programmer writes them; CPU and GPU, checked
against NumPy or PyTorch (or raising where PyTorch raises)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tallow as tl

F = tl.nn.functional


def _close(got, want, **kw):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, **kw)


X = np.arange(6, dtype=np.float32).reshape(2, 3)
A3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_two_index_lists_pair_up(device):
    x = tl.tensor(X, device=device)
    _close(x[[0, 1], [1, 0]], X[[0, 1], [1, 0]])
    t0, t1 = tl.tensor([0, 1], device=device), tl.tensor([1, 0], device=device)
    _close(x[t0, t1], torch.from_numpy(X)[torch.tensor([0, 1]), torch.tensor([1, 0])])


def test_textbook_nll_picks_one_logit_per_row(device):
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((3, 5)).astype(np.float32)
    labels = np.array([4, 0, 2])
    B = 3
    logits = F.log_softmax(tl.tensor(raw, device=device), dim=-1)
    y = tl.tensor(labels, device=device)
    loss = -logits[tl.arange(0, B, device=device), y].mean()
    tlogits = torch.from_numpy(raw).log_softmax(-1)
    want = -tlogits[torch.arange(0, B), torch.from_numpy(labels)].mean()
    assert logits[tl.arange(0, B, device=device), y].shape == (B,)
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    assert loss.item() == pytest.approx(TF.nll_loss(tlogits, torch.from_numpy(labels)).item(), rel=1e-5)


@pytest.mark.parametrize("index", [
    (slice(None), [0, 1], [1, 2]),
    ([0, 1], slice(None), [1, 2]),
    ([[0], [1]], [0, 2, 1], [3, 1, 0]),
], ids=["adjacent", "separated", "three_arrays"])
def test_advanced_indices_follow_numpy_placement(device, index):
    a3 = tl.tensor(A3, device=device)
    _close(a3[index], A3[index])


def test_paired_index_set_writes_the_diagonal(device):
    a = tl.zeros((3, 3), device=device)
    a[[0, 1, 2], [0, 1, 2]] = 1
    want = np.zeros((3, 3), dtype=np.float32)
    want[[0, 1, 2], [0, 1, 2]] = 1
    _close(a, want)


def test_int_clamp_with_float_bounds_promotes(device):
    got = tl.tensor([0, 5, -3], device=device).clamp(0.5, 4.5)
    want = torch.tensor([0, 5, -3]).clamp(0.5, 4.5)
    assert got.dtype == tl.f32 and want.dtype == torch.float32
    _close(got, want)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_without_dim_takes_torchs_legacy_dim_with_a_warning(device, name):
    x3d = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    with pytest.warns(UserWarning):
        want = getattr(TF, name)(torch.from_numpy(x3d))
    with pytest.warns(UserWarning, match="dim"):
        got = getattr(F, name)(tl.tensor(x3d, device=device))
    _close(got, want)


def test_clone_then_add_leaves_the_original(device):
    x = tl.tensor([1.0, 2.0], device=device)
    y = x.clone()
    y.add_(10)
    tx = torch.tensor([1.0, 2.0])
    ty = tx.clone()
    ty.add_(10)
    _close(x, tx)
    _close(y, ty)


def test_augmented_update_and_row_view_write_in_place(device):
    p = tl.tensor([1.0, 2.0], device=device)
    alias = p
    lr, g = 0.5, tl.tensor([2.0, 4.0], device=device)
    p -= lr * g
    tp = torch.tensor([1.0, 2.0])
    talias = tp
    tp -= 0.5 * torch.tensor([2.0, 4.0])
    assert p is alias and tp is talias
    _close(alias, talias)
    x = tl.tensor(X, device=device)
    tx = torch.from_numpy(X.copy())
    row = x[0]
    row += 1
    trow = tx[0]
    trow += 1
    _close(x, tx)


def test_chunk_makes_torchs_pieces(device):
    got = tl.arange(0, 6, device=device).chunk(4)
    want = torch.arange(0, 6).chunk(4)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        _close(g, w)


def test_bool_masks_promote_as_torch(device):
    x = tl.tensor([1.0, -1.0, 2.0], device=device)
    tx = torch.tensor([1.0, -1.0, 2.0])
    got, want = (x > 0) + 255, (tx > 0) + 255
    assert got.dtype == tl.i64 and want.dtype == torch.int64
    _close(got, want)
    got, want = (x > 0) + (x > 0), (tx > 0) + (tx > 0)
    assert got.dtype == tl.bool and want.dtype == torch.bool
    assert got.values() == want.tolist()


def test_backward_after_a_saved_input_changed_raises(device):
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    tx = torch.tensor([3.0, 4.0])
    ty = (tw * tx).sum()
    tx.mul_(10.0)
    with pytest.raises(RuntimeError, match="inplace"):
        ty.backward()
    w = tl.Var([1.0, 2.0], device=device)
    x = tl.tensor([3.0, 4.0], device=device)
    y = (w * x).sum()
    x.mul_(10.0)
    with pytest.raises(tl.StaleGraphError):
        y.backward()[w]


def _qkv(device):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    return [tl.tensor(a, device=device) for a in (q, k, v)], [torch.from_numpy(a) for a in (q, k, v)]


def test_attention_bool_mask_masks(device):
    (q, k, v), (tq, tk, tv) = _qkv(device)
    keep = np.tril(np.ones((4, 4), dtype=bool))
    got = F.scaled_dot_product_attention(q, k, v, tl.tensor(keep, device=device))
    want = TF.scaled_dot_product_attention(tq, tk, tv, torch.from_numpy(keep))
    _close(got, want)
    got = tl.nn.ops.scaled_dot_product_attention(q, k, v, tl.tensor(keep, device=device))
    _close(got, want)


def test_attention_float_mask_adds_and_is_causal(device):
    (q, k, v), (tq, tk, tv) = _qkv(device)
    bias = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    got = F.scaled_dot_product_attention(q, k, v, tl.tensor(bias, device=device))
    _close(got, TF.scaled_dot_product_attention(tq, tk, tv, torch.from_numpy(bias)))
    got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    _close(got, TF.scaled_dot_product_attention(tq, tk, tv, is_causal=True))
