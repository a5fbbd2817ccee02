"""The specialised replay kernels of a captured step (``compile/cpu_lower.py``): fused
linear layers, matrix products, ReLU, sums over dims and the SGD update write into
buffers planned once per recording, and must give eager tallow's results bit for bit
(and PyTorch's to float tolerance), over many replays, for any shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl

torch = pytest.importorskip("torch")


def _mlp(ws, bs, lr, reduction="mean"):
    w = [tl.Var(a) for a in ws]
    b = [None if a is None else tl.Var(a) for a in bs]
    opt = tl.nn.optim.SGD(w + [v for v in b if v is not None], lr=lr)

    def step(x, y):
        h = x
        for i in range(len(w)):
            h = tl.nn.linear(h, w[i], b[i])
            if i < len(w) - 1:
                h = h.relu()
        loss = tl.nn.loss.cross_entropy(h, y, reduction=reduction)
        opt.backward_step(loss)
        return loss

    return step, w + [v for v in b if v is not None]


def _weights(rng, widths, bias, dtype):
    ws = [rng.uniform(-0.3, 0.3, (o, i)).astype(dtype) for i, o in zip(widths[:-1], widths[1:])]
    bs = [rng.uniform(-0.1, 0.1, o).astype(dtype) if bias else None for o in widths[1:]]
    return ws, bs


def _torch_run(ws, bs, batches, lr, reduction):
    F = torch.nn.functional
    w = [torch.tensor(a, requires_grad=True) for a in ws]
    b = [None if a is None else torch.tensor(a, requires_grad=True) for a in bs]
    params = w + [v for v in b if v is not None]
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        h = torch.from_numpy(x)
        for i in range(len(w)):
            h = F.linear(h, w[i], b[i])
            if i < len(w) - 1:
                h = h.relu()
        loss = F.cross_entropy(h, torch.from_numpy(y), reduction=reduction)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy() for p in params]


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 9), widths=st.lists(st.integers(1, 12), min_size=2, max_size=4),
       bias=st.booleans(), f64=st.booleans(), reduction=st.sampled_from(["mean", "sum"]),
       seed=st.integers(0, 2**16))
def test_linear_step_replays_eager_bit_for_bit_and_matches_torch(batch, widths, bias, f64,
                                                                 reduction, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    widths = widths + [max(2, widths[-1])]  # at least two classes
    ws, bs = _weights(rng, widths, bias, dtype)
    batches = [(rng.standard_normal((batch, widths[0])).astype(dtype),
                rng.integers(0, widths[-1], batch)) for _ in range(4)]
    eager, eager_params = _mlp(ws, bs, 0.05, reduction)
    step, params = _mlp(ws, bs, 0.05, reduction)
    compiled = tl.compile(step)
    losses = []
    for x, y in batches:
        tx, ty = tl.Tensor(x), tl.Tensor(y.astype(np.int64))
        le, lc = eager(tx, ty), compiled(tx, ty)
        assert lc.to_scalar() == le.to_scalar()
        for p, q in zip(params, eager_params):
            np.testing.assert_array_equal(p.numpy(), q.numpy())
        losses.append(lc.to_scalar())
    assert compiled.stats()["replays"] == 3
    assert compiled.stats()["lowered"] > 0
    t_losses, t_params = _torch_run(ws, bs, batches, 0.05, reduction)
    tol = 1e-10 if f64 else 2e-5
    np.testing.assert_allclose(losses, t_losses, rtol=tol, atol=tol)
    for p, q in zip(params, t_params):
        np.testing.assert_allclose(p.numpy(), q, rtol=tol, atol=tol)


def test_the_mlp_bench_step_runs_every_hot_call_lowered():
    from tallow.bench.train import tallow_steps

    eager, other = tallow_steps()["mlp"], tallow_steps()["mlp"]
    step = tl.compile(other)
    for _ in range(3):
        assert step().item() == eager().item()
    stats = step.stats()
    # 3 linear, 2 relu and their 2 backward, 3 linear backward (5 products, 3 bias
    # sums), 6 updates
    assert stats["lowered"] == 16
    assert stats["calls"] == 17  # the 16 above and the cross entropy


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 7), k=st.integers(1, 7), n=st.integers(1, 7), f64=st.booleans(),
       seed=st.integers(0, 2**16))
def test_products_sums_and_relu_with_returned_gradients(m, k, n, f64, seed):
    """Values made by lowered kernels and returned (new buffers each call) next to
    values kept in planned buffers: what an earlier call returned never changes."""
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    w = tl.Var(rng.standard_normal((n, k)).astype(dtype))

    def f(x, v):
        h = x.matmul(w.t()).relu()            # matmul with a transposed Var, relu
        s = h.sum(0)                           # a sum over dim 0
        p = h.t().matmul(v)                    # a transposed lhs
        loss = (p.sum_all() + s.sum_all())
        grads = loss.backward()
        return loss.detach(), grads[w], h.detach(), p.detach()

    compiled = tl.compile(f)
    seen = []
    for _ in range(4):
        x = tl.Tensor(rng.standard_normal((m, k)).astype(dtype))
        v = tl.Tensor(rng.standard_normal((m, 3)).astype(dtype))
        want = f(x, v)
        got = compiled(x, v)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        seen.append(([a.numpy().copy() for a in got], got))
    for copies, tensors in seen:  # later replays did not write into earlier results
        for c, t in zip(copies, tensors):
            np.testing.assert_array_equal(t.numpy(), c)
    # PyTorch's values and gradient for the last inputs
    tw = torch.tensor(w.numpy(), requires_grad=True)
    tx, tv = torch.from_numpy(x.numpy()), torch.from_numpy(v.numpy())
    th = (tx @ tw.t()).relu()
    tl_ = (th.t() @ tv).sum() + th.sum(0).sum()
    tl_.backward()
    tol = 1e-10 if f64 else 1e-4
    np.testing.assert_allclose(got[0].numpy(), tl_.item(), rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1].numpy(), tw.grad.numpy(), rtol=tol, atol=tol)


def test_unlowered_without_fusion_gives_the_same_step():
    from tallow.bench.train import tallow_steps

    a = tl.compile(tallow_steps()["mlp"])
    b = tl.compile(tallow_steps()["mlp"], fuse=False)
    for _ in range(3):
        assert a().item() == b().item()
    assert b.stats()["lowered"] == 0 and a.stats()["lowered"] > 0
