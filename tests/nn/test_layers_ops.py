"""Layers and nn.ops against PyTorch: fused kernels, composed paths and gradients."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tallow as tl
from tallow.nn import ops
from tallow.nn.rotary import rope, rope_i, rope_thd

RNG = np.random.default_rng(7)


def arr(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def tt(a, device=tl.cpu):
    return tl.Tensor(a, device=device)


def close(a, b, atol=1e-5, rtol=1e-5):
    a = a.numpy() if isinstance(a, tl.Tensor) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol)


# -- layers --------------------------------------------------------------------------------

def test_linear_matches_torch(device):
    w, b = arr(7, 5), arr(7)
    lin = tl.nn.Linear.from_weights(tt(w, device), tt(b, device))
    ref = torch.nn.Linear(5, 7)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
        ref.bias.copy_(torch.from_numpy(b))
    for shape in ((5,), (3, 5), (2, 4, 5), (2, 2, 3, 5)):
        x = arr(*shape)
        close(lin(tt(x, device)), ref(torch.from_numpy(x)), atol=2e-5)
    nb = tl.nn.Linear.from_weights(tt(w, device))
    x = arr(4, 5)
    close(nb(tt(x, device)), torch.from_numpy(x) @ torch.from_numpy(w).T, atol=2e-5)
    # a strided input (transposed view) reads directly
    xt = arr(5, 6)
    close(lin(tt(xt, device).t()), ref(torch.from_numpy(xt).T), atol=2e-5)


def test_linear_rejects_wrong_width():
    with pytest.raises(tl.ShapeMismatchError):
        tl.nn.Linear(4, 3)(tl.randn((2, 5)))


def test_linear_init_like_pytorch():
    fan_in = 64
    lin = tl.nn.Linear(fan_in, 256)
    w = lin.weight.numpy()
    bound = 1.0 / math.sqrt(fan_in)
    assert lin.weight.shape == (256, 64) and lin.bias.shape == (256,)
    assert np.abs(w).max() <= bound
    # U(-b, b): std b/sqrt(3); 16384 samples put the estimate within ~1%
    assert abs(w.std() - bound / math.sqrt(3)) < 0.03 * bound
    assert abs(w.mean()) < 0.02 * bound
    assert np.abs(lin.bias.numpy()).max() <= bound
    ref = torch.nn.Linear(fan_in, 256).weight.detach().numpy()
    assert abs(ref.std() - w.std()) < 0.05 * bound


def test_embedding_layer_norm_rms_norm_layers(device):
    table = arr(11, 6)
    ids = np.array([[1, 0, 10], [3, 3, 2]], np.uint32)
    emb = tl.nn.Embedding.from_weights(tt(table, device))
    close(emb(tl.Tensor(ids, device=device)), table[ids.astype(np.int64)])
    x = arr(2, 3, 6, scale=3.0)
    g, b = arr(6), arr(6)
    ln = tl.nn.LayerNorm.from_weights(tt(g, device), tt(b, device), 1e-5)
    close(ln(tt(x, device)), F.layer_norm(torch.from_numpy(x), (6,), torch.from_numpy(g),
                                          torch.from_numpy(b), 1e-5), atol=2e-5)
    ln0 = tl.nn.LayerNorm(6, device=device)
    close(ln0(tt(x, device)), F.layer_norm(torch.from_numpy(x), (6,)), atol=2e-5)
    rms = tl.nn.RmsNorm.from_weights(tt(g, device), 1e-6)
    ref = torch.nn.RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(g))
    close(rms(tt(x, device)), ref(torch.from_numpy(x)), atol=2e-5)


# -- softmax & co: fused (plain tensors) and composed (a Var forces it) -------------------

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_log_softmax(device, dim):
    x = arr(3, 4, 5, scale=4.0)
    close(ops.softmax(tt(x, device), dim), torch.softmax(torch.from_numpy(x), dim), atol=1e-6)
    close(ops.log_softmax(tt(x, device), dim), torch.log_softmax(torch.from_numpy(x), dim),
          atol=2e-5)
    v = tl.Var(x, device=device)
    close(ops.softmax(v, dim), torch.softmax(torch.from_numpy(x), dim), atol=1e-6)


def test_softmax_last_dim_strided_and_large_values(device):
    x = arr(6, 7, scale=50.0)
    t = tt(x, device).t()  # a strided view
    close(ops.softmax_last_dim(t), torch.softmax(torch.from_numpy(x).T, -1), atol=1e-6)


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_fused_norms_match_composed(dtype, device):
    if not device.supports_dtype(tl.DType.parse(dtype)):
        pytest.skip(f"{device} has no {dtype}")
    x = arr(5, 33, scale=2.0)
    w, b = arr(33), arr(33)
    xt, wt, bt = (tl.Tensor(a).to_dtype(dtype).to_device(device) for a in (x, w, b))
    tol = {"f32": 2e-5, "f64": 1e-10, "f16": 2e-2, "bf16": 1e-1}[dtype]
    fused = ops.layer_norm(xt, wt, bt, 1e-5)
    composed = ops.layer_norm(tl.Var(xt), wt, bt, 1e-5)
    assert fused.dtype == xt.dtype and composed.dtype == xt.dtype
    ref = F.layer_norm(torch.from_numpy(x).double(), (33,), torch.from_numpy(w).double(),
                       torch.from_numpy(b).double(), 1e-5).numpy()
    close(fused.to_dtype("f64"), ref, atol=tol, rtol=tol)
    close(composed.to_dtype("f64"), ref, atol=tol, rtol=tol)
    f2 = ops.rms_norm(xt, wt, 1e-5)
    c2 = ops.rms_norm(tl.Var(xt), wt, 1e-5)
    xd = torch.from_numpy(x).double()
    ref2 = (xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-5) * torch.from_numpy(w).double())
    close(f2.to_dtype("f64"), ref2, atol=tol, rtol=tol)
    close(c2.to_dtype("f64"), ref2, atol=tol, rtol=tol)


def test_layer_norm_without_beta_and_bad_weight(device):
    x, w = arr(4, 8), arr(8)
    close(ops.layer_norm(tt(x, device), tt(w, device), None, 1e-5),
          F.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), None, 1e-5), atol=2e-5)
    close(ops.layer_norm(tl.Var(x, device=device), tt(w, device), None, 1e-5),
          F.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(w), None, 1e-5), atol=2e-5)
    with pytest.raises(tl.ShapeMismatchError):
        ops.layer_norm(tt(x), tt(arr(7)), None, 1e-5)
    with pytest.raises(tl.ShapeMismatchError):
        ops.rms_norm(tt(x), tt(arr(3)), 1e-5)


def test_gelu_erf_fused_matches_torch(device):
    x = np.concatenate([arr(5000, scale=3.0), np.array([0.0, -0.0, 8, -8, 30, -30, 1e-8], np.float32)])
    got = ops.gelu_erf(tt(x, device))
    close(got, F.gelu(torch.from_numpy(x).double()).numpy(), atol=1e-6, rtol=1e-6)
    close(ops.gelu(tt(x, device)), F.gelu(torch.from_numpy(x), approximate="tanh"), atol=1e-5)
    assert ops.activation("gelu") is ops.gelu_erf
    with pytest.raises(ValueError):
        ops.activation("nope")


def test_activations():
    x = arr(50, scale=3.0)
    tx = torch.from_numpy(x)
    close(ops.silu(tt(x)), F.silu(tx), atol=1e-6)
    close(ops.sigmoid(tt(x)), torch.sigmoid(tx), atol=1e-6)
    close(ops.leaky_relu(tt(x), 0.1), F.leaky_relu(tx, 0.1), atol=1e-6)
    x2 = arr(3, 8)
    a, b = torch.from_numpy(x2).chunk(2, -1)
    close(ops.swiglu(tt(x2)), F.silu(a) * b, atol=1e-6)


# -- rotary embeddings ----------------------------------------------------------------------

def _rope_ref(x, cos, sin, interleaved):
    x = torch.from_numpy(x)
    cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
    if cos.dim() == 2:
        cos, sin = cos[None, None], sin[None, None]
    else:
        cos, sin = cos[:, None], sin[:, None]
    if interleaved:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out
    half = x.shape[-1] // 2
    cos2, sin2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)  # transformers' rotate_half
    return x * cos2 + rot * sin2


@pytest.mark.parametrize("batched_tables", [False, True])
def test_rope_and_rope_i(device, batched_tables):
    b, h, t, d = 2, 3, 5, 8
    x = arr(b, h, t, d)
    shape = (b, t, d // 2) if batched_tables else (t, d // 2)
    ang = RNG.uniform(-3, 3, shape).astype(np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    for f, inter in ((rope, False), (rope_i, True)):
        want = _rope_ref(x, cos, sin, inter)
        close(f(tt(x, device), tt(cos, device), tt(sin, device)), want, atol=1e-5)
        # composed path (a Var) gives the same numbers
        close(f(tl.Var(x, device=device), tt(cos, device), tt(sin, device)), want, atol=1e-5)
    xthd = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    got = rope_thd(tt(xthd, device), tt(cos, device), tt(sin, device))
    close(got, _rope_ref(x, cos, sin, False).permute(0, 2, 1, 3), atol=1e-5)


def test_rope_shape_errors():
    with pytest.raises(tl.ShapeMismatchError):
        rope(tl.randn((2, 3, 5, 8)), tl.randn((4, 4)), tl.randn((4, 4)))
    with pytest.raises(tl.ShapeMismatchError):
        rope_i(tl.randn((2, 3, 5, 7)), tl.randn((5, 3)), tl.randn((5, 3)))


def test_rope_tables_match_transformers_formula():
    cos, sin = tl.nn.rotary_emb.rope_tables(8, 6, theta=500.0)
    inv = 1.0 / (500.0 ** (torch.arange(0, 8, 2).float() / 8))
    f = torch.outer(torch.arange(6).float(), inv)
    close(cos, torch.cos(f), atol=1e-6)
    close(sin, torch.sin(f), atol=1e-6)


# -- attention ---------------------------------------------------------------------------------

@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("masked", [False, True])
def test_scaled_dot_product_attention(device, groups, masked):
    b, hk, sq, sk, d = 2, 2, 4, 6, 8
    h = hk * groups
    q, k, v = arr(b, h, sq, d), arr(b, hk, sk, d), arr(b, hk, sk, d)
    mask = None
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    tk, tv = tk.repeat_interleave(groups, 1), tv.repeat_interleave(groups, 1)
    tmask = None
    if masked:
        keep = np.ones((b, 1, 1, sk), np.float32)
        keep[1, ..., 4:] = 0
        mask = (1.0 - keep) * np.finfo(np.float32).min
        tmask = torch.from_numpy(keep).bool()
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask)
    m = None if mask is None else tt(mask, device)
    got = ops.scaled_dot_product_attention(tt(q, device), tt(k, device), tt(v, device), m)
    close(got, want, atol=1e-5)
    # the composed path (tracked input) agrees
    got2 = ops.scaled_dot_product_attention(tl.Var(q, device=device), tt(k, device), tt(v, device), m)
    close(got2, want, atol=1e-5)


def test_attention_on_strided_inputs_and_causal_mask(device):
    b, s, h, d = 2, 5, 4, 8
    qkv = arr(b, s, 3, h, d)
    q, k, v = (tt(qkv, device).narrow(2, i, 1).squeeze(2).transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    causal = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1)
    got = ops.scaled_dot_product_attention(q, k, v, tt(causal, device), scale=0.3)
    tq, tk, tv = (torch.from_numpy(qkv[:, :, i]).transpose(1, 2) for i in range(3))
    want = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=0.3)
    close(got, want, atol=1e-5)


def test_attention_shape_errors():
    with pytest.raises(tl.ShapeMismatchError):
        ops.scaled_dot_product_attention(tl.randn((1, 3, 2, 4)), tl.randn((1, 2, 2, 4)),
                                         tl.randn((1, 2, 2, 4)))


# -- gradients through the ops, against torch ------------------------------------------------

def test_gradients_through_nn_ops_match_torch(device):
    x, w, b = arr(3, 6), arr(6), arr(6)
    lw, lb = arr(4, 6), arr(4)
    vx, vw, vb, vlw, vlb = (tl.Var(a, device=device) for a in (x, w, b, lw, lb))
    ang = RNG.uniform(-3, 3, (3, 2)).astype(np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    y = ops.layer_norm(vx, vw, vb, 1e-5)
    y = tl.nn.linear(y, vlw, vlb)
    alpha = tt(np.abs(arr(4)) + 0.5, device)
    y = ops.gelu_erf(y) + ops.softmax(y, -1) + ops.rms_norm(y, alpha, 1e-5) * 0
    r = rope(y.reshape((1, 1, 3, 4)), tt(cos, device), tt(sin, device))
    loss = (r.sqr().sum_all() + ops.log_softmax(y, 0).sum_all())
    grads = loss.backward()

    tx, tw, tb, tlw, tlb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b, lw, lb))
    ty = F.layer_norm(tx, (6,), tw, tb, 1e-5)
    ty = F.linear(ty, tlw, tlb)
    ty = F.gelu(ty) + torch.softmax(ty, -1)
    tr = _rope_ref_t(ty.reshape(1, 1, 3, 4), torch.from_numpy(cos), torch.from_numpy(sin))
    tloss = (tr ** 2).sum() + torch.log_softmax(ty, 0).sum()
    tloss.backward()
    close(loss, tloss, atol=1e-4, rtol=1e-5)
    for v, t in ((vx, tx), (vw, tw), (vb, tb), (vlw, tlw), (vlb, tlb)):
        close(grads[v], t.grad, atol=1e-4, rtol=1e-4)


def _rope_ref_t(x, cos, sin):
    half = x.shape[-1] // 2
    cos2, sin2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos2 + rot * sin2


def test_attention_gradient_matches_torch(device):
    q, k, v = arr(1, 2, 3, 4), arr(1, 1, 5, 4), arr(1, 1, 5, 4)
    vq, vk, vv = tl.Var(q, device=device), tl.Var(k, device=device), tl.Var(v, device=device)
    out = ops.scaled_dot_product_attention(vq, vk, vv)
    grads = (out * out).sum_all().backward()
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    tout = F.scaled_dot_product_attention(tq, tk.repeat_interleave(2, 1), tv.repeat_interleave(2, 1))
    (tout * tout).sum().backward()
    for a, t in ((vq, tq), (vk, tk), (vv, tv)):
        close(grads[a], t.grad, atol=1e-5)


def test_dropout():
    x = tl.ones((1000,))
    assert ops.dropout(x, 0.5, train=False) is x
    y = ops.dropout(x, 0.25, train=True).numpy()
    kept = y != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)


def test_attention_with_a_loose_softmax_bound_and_fully_masked_rows():
    # One key of huge norm orthogonal to every query: the shift bound |q| max|k| is far
    # above the real scores, so the kernel must fall back to the exact row maximum.
    d = 8
    q = np.zeros((1, 1, 3, d), np.float32)
    q[..., 0] = [[3.0, -2.0, 1.0]]
    k = arr(1, 1, 4, d)
    k[..., 1:] = 0
    k[0, 0, 3] = 0
    k[0, 0, 3, 5] = 1e4
    v = arr(1, 1, 4, d)
    got = ops.scaled_dot_product_attention(tt(q), tt(k), tt(v), None, scale=1.0)
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), scale=1.0)
    close(got, want, atol=1e-5)
    # a row whose keys are all masked (additive min) averages every value, as torch does
    mask = np.zeros((1, 1, 3, 4), np.float32)
    mask[0, 0, 1] = np.finfo(np.float32).min
    got = ops.scaled_dot_product_attention(tt(q), tt(k), tt(v), tt(mask), scale=1.0)
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                          attn_mask=torch.from_numpy(mask), scale=1.0)
    close(got, want, atol=1e-5)


def test_layer_norm_over_several_trailing_dims_matches_torch():
    """``LayerNorm((3, 4))`` normalises over the last two dims, as torch.nn.LayerNorm."""
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    tln = torch.nn.LayerNorm((3, 4), eps=1e-5)
    with torch.no_grad():
        tln.weight.copy_(torch.tensor(w))
        tln.bias.copy_(torch.tensor(b))
        want = tln(torch.tensor(x)).numpy()
    ln = tl.nn.LayerNorm((3, 4), eps=1e-5)
    assert ln.weight.shape == (3, 4)
    ln.load_state_dict({"weight": tl.Tensor(w), "bias": tl.Tensor(b)})
    np.testing.assert_allclose(ln(tl.Tensor(x)).numpy(), want, atol=1e-5)
    no_bias = tl.nn.LayerNorm([3, 4], bias=False)
    tnb = torch.nn.LayerNorm([3, 4], bias=False)
    with torch.no_grad():
        np.testing.assert_allclose(no_bias(tl.Tensor(x)).numpy(), tnb(torch.tensor(x)).numpy(),
                                   atol=1e-5)
    with pytest.raises(tl.ShapeMismatchError):
        ln(tl.ones((2, 4, 3)))
