"""The CPU's fused kernels on the edges: chunk boundaries, threads, serial mode."""

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tallow as tl
from tallow.backends.cpu import fused, parallel
from tallow.nn import ops


def test_serial_mode_is_per_thread():
    big = (1024, 1024)
    assert parallel.worth_splitting(big) == (tl.utils.get_num_threads() > 1)
    seen = {}
    with parallel.serial():
        assert not parallel.worth_splitting(big)

        def other():
            seen["other"] = parallel.worth_splitting(big)

        th = threading.Thread(target=other)
        th.start()
        th.join()
    assert seen["other"] == (tl.utils.get_num_threads() > 1)
    assert parallel.worth_splitting(big) == (tl.utils.get_num_threads() > 1)


@pytest.mark.parametrize("serial", [False, True])
def test_kernels_across_chunks_and_threads(serial, monkeypatch):
    # Small chunks force many chunk boundaries, with and without the thread split.
    monkeypatch.setattr(fused, "CHUNK", 1 << 10)
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 10)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((97, 61)) * 3).astype(np.float32)
    w, b = rng.standard_normal(61).astype(np.float32), rng.standard_normal(61).astype(np.float32)
    tx = torch.from_numpy(x)
    ctx = parallel.serial() if serial else _null()
    with ctx:
        got = [ops.softmax(tl.Tensor(x), -1), ops.gelu_erf(tl.Tensor(x)),
               ops.layer_norm(tl.Tensor(x), tl.Tensor(w), tl.Tensor(b), 1e-5),
               ops.rms_norm(tl.Tensor(x), tl.Tensor(w), 1e-5)]
    want = [torch.softmax(tx, -1), F.gelu(tx.double()).float(),
            F.layer_norm(tx, (61,), torch.from_numpy(w), torch.from_numpy(b), 1e-5),
            tx * torch.rsqrt((tx * tx).mean(-1, keepdim=True) + 1e-5) * torch.from_numpy(w)]
    for g, e in zip(got, want):
        np.testing.assert_allclose(g.numpy(), e.numpy(), atol=2e-5, rtol=2e-5)


def test_attention_groups_and_threads(monkeypatch):
    monkeypatch.setattr(fused, "CHUNK", 1 << 8)  # one batch element per group
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 8)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((5, 2, 7, 4)).astype(np.float32) for _ in range(3))
    keep = np.ones((5, 1, 1, 7), np.float32)
    keep[2, ..., 5:] = 0
    mask = (1 - keep) * np.finfo(np.float32).min
    got = ops.scaled_dot_product_attention(tl.Tensor(q), tl.Tensor(k), tl.Tensor(v), tl.Tensor(mask))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                          attn_mask=torch.from_numpy(keep).bool())
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_linear_kernel_strided_and_half():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    wt = tl.Tensor(np.ascontiguousarray(w.T)).t()  # a (4, 6) view over a transposed buffer
    got = tl.nn.linear(tl.Tensor(x).t(), wt)  # strided input and weight
    np.testing.assert_allclose(got.numpy(), x.T @ w.T, rtol=1e-5, atol=1e-5)
    h = tl.nn.linear(tl.Tensor(x.T.copy()).to_dtype("f16"), tl.Tensor(w).to_dtype("f16"))
    assert h.dtype == tl.f16
    np.testing.assert_allclose(h.numpy().astype(np.float32), x.T @ w.T, rtol=2e-2, atol=2e-2)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# -- bias + GELU and residual + LayerNorm (compiled with numba, NumPy without) -----------------

@pytest.fixture(params=["numba", "numpy"])
def kernels(request, monkeypatch):
    """Both implementations of the fused kernels: numba's and the NumPy fallback."""
    if request.param == "numpy":
        monkeypatch.setenv("TALLOW_NO_NUMBA", "1")
    elif fused.compiled() is None:
        pytest.skip("numba is not available")
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("split", [False, True])
def test_bias_gelu_matches_torch(kernels, dtype, split, monkeypatch):
    if split:  # rows split over threads
        monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 8)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((37, 2, 50)) * 3).astype(dtype)
    x[0, 0, :6] = [0.0, -0.0, 6.5, -6.5, 40.0, -40.0]  # erf's clamp and GELU's tails
    b = rng.standard_normal(50).astype(dtype)
    want = F.gelu(torch.from_numpy(x.astype(np.float64) + b)).numpy()
    got = ops.gelu_erf(tl.Tensor(x), tl.Tensor(b)).numpy()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)
    plain = ops.gelu_erf(tl.Tensor(x)).numpy()  # without a bias: the same kernel
    np.testing.assert_allclose(plain, F.gelu(torch.from_numpy(x.astype(np.float64))).numpy(),
                               atol=2e-6, rtol=2e-6)
    # a strided input (a transposed view) gives the same values
    xt = tl.Tensor(np.ascontiguousarray(x.transpose(2, 1, 0))).permute((2, 1, 0))
    np.testing.assert_allclose(ops.gelu_erf(xt, tl.Tensor(b)).numpy(), got, atol=1e-7, rtol=0)


def test_bias_gelu_half_and_nan(kernels):
    x = np.array([[-1.5, 0.25, np.nan, np.inf]], np.float32)
    b = np.array([0.5, 0.0, 1.0, 0.0], np.float32)
    got = ops.gelu_erf(tl.Tensor(x), tl.Tensor(b)).numpy()
    # float64: PyTorch's vectorised f32 GELU (AVX-512 builds) turns +inf into NaN, its
    # scalar and f64 paths keep it, as the limit does
    want = F.gelu(torch.from_numpy((x + b).astype(np.float64))).numpy()
    assert np.isposinf(want[0, 3])
    np.testing.assert_allclose(got, want, atol=1e-6)  # NaN in the same place, inf kept
    h = ops.gelu_erf(tl.Tensor(x[:, :2]).to_dtype("f16"), tl.Tensor(b[:2]).to_dtype("f16"))
    assert h.dtype == tl.f16
    np.testing.assert_allclose(h.numpy().astype(np.float32), want[:, :2], atol=2e-3)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_beta", [True, False])
@pytest.mark.parametrize("split", [False, True])
def test_add_layer_norm_matches_torch(kernels, with_bias, with_beta, split, monkeypatch):
    if split:
        monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 8)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((29, 3, 48)) * 2 + 5).astype(np.float32)
    r = rng.standard_normal((29, 3, 48)).astype(np.float32)
    w, beta, bias = (rng.standard_normal(48).astype(np.float32) for _ in range(3))
    s = torch.from_numpy(x) + torch.from_numpy(r)
    if with_bias:
        s = s + torch.from_numpy(bias)
    want = F.layer_norm(s.double(), (48,), torch.from_numpy(w).double(),
                        torch.from_numpy(beta).double() if with_beta else None, 1e-12).numpy()
    got = ops.add_layer_norm(tl.Tensor(x), tl.Tensor(r), tl.Tensor(w),
                             tl.Tensor(beta) if with_beta else None, 1e-12,
                             bias=tl.Tensor(bias) if with_bias else None).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    # a row of one repeated large value normalises to exactly beta (no rounding residue)
    flat = np.full((1, 48), 1000.1, np.float32)
    one = ops.add_layer_norm(tl.Tensor(flat), tl.Tensor(np.zeros_like(flat)), tl.Tensor(w),
                             tl.Tensor(beta) if with_beta else None, 1e-5).numpy()
    np.testing.assert_allclose(one[0], beta if with_beta else 0.0, atol=1e-6)


def test_add_layer_norm_gradients_and_errors():
    from tallow.errors import ShapeMismatchError

    rng = np.random.default_rng(5)
    x, r = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
    w, beta, bias = (rng.standard_normal(8).astype(np.float32) for _ in range(3))
    vx, vw = tl.Var(x), tl.Var(w)
    y = ops.add_layer_norm(vx, tl.Tensor(r), vw, tl.Tensor(beta), 1e-5, bias=tl.Tensor(bias))
    grads = (y * y).sum_all().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = F.layer_norm(tx + torch.from_numpy(r) + torch.from_numpy(bias), (8,), tw,
                      torch.from_numpy(beta), 1e-5)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(grads.get(vx).numpy(), tx.grad.numpy(), atol=1e-4)
    np.testing.assert_allclose(grads.get(vw).numpy(), tw.grad.numpy(), atol=1e-4)
    with pytest.raises(ShapeMismatchError, match="residual"):
        ops.add_layer_norm(tl.Tensor(x), tl.Tensor(r[:2]), tl.Tensor(w), None, 1e-5)
    with pytest.raises(ShapeMismatchError, match="add_layer_norm"):
        ops.add_layer_norm(tl.Tensor(x), tl.Tensor(r), tl.Tensor(w), None, 1e-5,
                           bias=tl.Tensor(bias[:4]))
    with pytest.raises(ShapeMismatchError, match="gelu_erf"):
        ops.gelu_erf(tl.Tensor(x), tl.Tensor(bias[:4]))


@pytest.mark.parametrize("chunk", [1 << 8, 1 << 17])  # one batch row per group / many
@pytest.mark.parametrize("split", [False, True])
def test_attention_with_padding_of_mixed_lengths(kernels, chunk, split, monkeypatch):
    """Key-padding masks of different lengths per batch row (the keys they hide are
    left out of the products), a row with no padding, and a fully masked row."""
    monkeypatch.setattr(fused, "CHUNK", chunk)
    if split:
        monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 8)
    rng = np.random.default_rng(6)
    lengths = [10, 1, 4, 7, 10, 0, 5, 9]
    b, h, s, d = len(lengths), 3, 10, 8
    q, k, v = ((rng.standard_normal((b, h, s, d)) * 2).astype(np.float32) for _ in range(3))
    keep = (np.arange(s)[None] < np.array(lengths)[:, None]).astype(np.float32)
    mask = ((1 - keep) * np.finfo(np.float32).min).reshape(b, 1, 1, s)
    got = ops.scaled_dot_product_attention(tl.Tensor(q), tl.Tensor(k), tl.Tensor(v), tl.Tensor(mask))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                          attn_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5, rtol=1e-5)
    # no mask, and f64 (the NumPy softmax)
    got = ops.scaled_dot_product_attention(tl.Tensor(q), tl.Tensor(k), tl.Tensor(v), None, scale=0.3)
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), scale=0.3)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5, rtol=1e-5)
    got = ops.scaled_dot_product_attention(*(tl.Tensor(a.astype(np.float64)) for a in (q, k, v, mask)))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a.astype(np.float64)) for a in (q, k, v)),
                                          attn_mask=torch.from_numpy(mask.astype(np.float64)))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-10, rtol=1e-10)
    # the same with -inf for the hidden keys (all rows keep at least one key here)
    inf_mask = np.where(keep > 0, 0.0, -np.inf).astype(np.float32).reshape(b, 1, 1, s)
    live = [i for i, n in enumerate(lengths) if n]
    got = ops.scaled_dot_product_attention(*(tl.Tensor(a[live]) for a in (q, k, v, inf_mask)))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a[live]) for a in (q, k, v)),
                                          attn_mask=torch.from_numpy(keep[live].reshape(-1, 1, 1, s) > 0))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_packed_matches_torch_per_sequence(kernels, split, dtype, monkeypatch):
    """Sequences of mixed lengths packed one after another (one empty), q/k/v as strided
    views of one packed projection, as BERT gives them; each sequence against PyTorch's
    attention on that sequence alone; the composed path (a tracked input) agrees."""
    if split:
        monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 6)
    rng = np.random.default_rng(7)
    lengths = [7, 1, 0, 12, 3, 12, 5]
    t, h, d = sum(lengths), 3, 8
    qkv = (rng.standard_normal((t, 3, h, d)) * 2).astype(dtype)
    q, k, v = (tl.Tensor(qkv).narrow(1, i, 1).squeeze(1) for i in range(3))
    got = ops.attention_packed(q, k, v, lengths, 0.4).numpy()
    assert got.shape == (t, h, d) and got.dtype == dtype
    start = 0
    for n in lengths:
        if n:
            a = torch.from_numpy(qkv[start:start + n]).permute(1, 2, 0, 3)  # (3, h, n, d)
            want = F.scaled_dot_product_attention(a[0], a[1], a[2], scale=0.4).permute(1, 0, 2)
            tol = 1e-10 if dtype == np.float64 else 2e-5
            np.testing.assert_allclose(got[start:start + n], want.numpy(), atol=tol, rtol=tol)
        start += n
    composed = ops.attention_packed(tl.Var(qkv[:, 0]), k, v, lengths, 0.4).numpy()
    np.testing.assert_allclose(composed, got, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_attention_packed_errors():
    from tallow.errors import ShapeMismatchError

    x = tl.Tensor(np.zeros((5, 2, 4), np.float32))
    with pytest.raises(ShapeMismatchError, match="do not sum to the 5 tokens"):
        ops.attention_packed(x, x, x, [2, 2])
    with pytest.raises(ShapeMismatchError, match="tokens, heads, dim"):
        ops.attention_packed(x.reshape((5, 8)), x, x, [5])
    assert ops.attention_packed(x.narrow(0, 0, 0), x.narrow(0, 0, 0), x.narrow(0, 0, 0), []).shape == (0, 2, 4)
