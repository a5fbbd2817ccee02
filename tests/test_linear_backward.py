"""The backward pass of a recorded ``linear`` through the backend's ``linear_backward``:
the CPU kernel gives the protocol default's bits (the composed rule's backend calls)
for every layout and every subset of wanted gradients, and PyTorch's values; a
captured step replays it bit for bit, with or without a bias and with frozen
parameters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.base import BackendStorage

torch = pytest.importorskip("torch")


def _operand(rng, shape, dtype, transposed):
    """A tensor of ``shape``, stored row-major or as the transpose of a row-major one."""
    if transposed:
        return tl.Tensor(rng.standard_normal(shape[::-1]).astype(dtype)).t()
    return tl.Tensor(rng.standard_normal(shape).astype(dtype))


def _bits(storage, shape):
    return tl.Tensor._wrap(storage, tl.layout.Layout.contiguous_of(shape)).numpy().view(np.uint8)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 70), n=st.integers(1, 70),
       f64=st.booleans(), x_t=st.booleans(), w_t=st.booleans(),
       grad_kind=st.sampled_from(["rows", "transposed", "broadcast"]),
       wanted=st.tuples(st.booleans(), st.booleans(), st.booleans()),
       seed=st.integers(0, 2**16))
def test_cpu_kernel_gives_the_default_s_bits(m, k, n, f64, x_t, w_t, grad_kind, wanted, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    x = _operand(rng, (m, k), dtype, x_t)
    w = _operand(rng, (n, k), dtype, w_t)
    if grad_kind == "broadcast":  # a sum's gradient: one row repeated (stride 0)
        g = tl.Tensor(rng.standard_normal((1, n)).astype(dtype)).broadcast_as((m, n))
    else:
        g = _operand(rng, (m, n), dtype, grad_kind == "transposed")
    args = (x._layout, w._storage, w._layout, g._storage, g._layout, wanted)
    got = x._storage.linear_backward(*args)
    want = BackendStorage.linear_backward(x._storage, *args)
    for a, b, shape, asked in zip(got, want, [(m, k), (n, k), (n,)], wanted):
        assert (a is None) == (not asked) and (b is None) == (not asked)
        if asked:
            np.testing.assert_array_equal(_bits(a, shape), _bits(b, shape))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40), f64=st.booleans(),
       bias=st.booleans(), frozen=st.sampled_from(["none", "x", "w", "b"]),
       seed=st.integers(0, 2**16))
def test_gradients_match_torch(m, k, n, f64, bias, frozen, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    xs, ws = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    bs, gs = rng.standard_normal(n).astype(dtype), rng.standard_normal((m, n)).astype(dtype)
    make = {name: (tl.Tensor if frozen == name else tl.Var) for name in "xwb"}
    x, w = make["x"](xs), make["w"](ws)
    b = make["b"](bs) if bias else None
    y = tl.nn.linear(x, w, b)
    if not any(t is not None and t._track for t in (x, w, b)):
        return
    grads = (y * tl.Tensor(gs)).sum_all().backward()
    tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
    tb = torch.tensor(bs, requires_grad=True) if bias else None
    (torch.nn.functional.linear(tx, tw, tb) * torch.from_numpy(gs)).sum().backward()
    tol = 1e-12 if f64 else 2e-5
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        if ours is None:
            continue
        got = grads.get(ours)
        if isinstance(ours, tl.Var):
            np.testing.assert_allclose(got.numpy(), theirs.grad.numpy(), rtol=tol, atol=tol)
        else:
            assert got is None


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("frozen_first", [True, False])
def test_captured_step_replays_the_eager_gradients_bit_for_bit(bias, frozen_first):
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((16, 12)).astype(np.float32), rng.integers(0, 5, 16))
            for _ in range(3)]

    def model():
        w1 = (tl.Tensor if frozen_first else tl.Var)(rng_w.uniform(-0.3, 0.3, (20, 12)).astype(np.float32))
        w2 = tl.Var(rng_w.uniform(-0.3, 0.3, (5, 20)).astype(np.float32))
        b = tl.Var(np.zeros(20, np.float32)) if bias else None
        vars_ = [v for v in (w1, w2, b) if isinstance(v, tl.Var)]
        opt = tl.nn.optim.SGD(vars_, lr=0.1)

        def step(x, y):
            h = tl.nn.linear(x, w1, b).relu()
            loss = tl.nn.loss.cross_entropy(tl.nn.linear(h, w2), y)
            opt.backward_step(loss)
            return loss

        return step, vars_

    rng_w = np.random.default_rng(5)
    eager, eager_vars = model()
    rng_w = np.random.default_rng(5)
    step, vars_ = model()
    compiled = tl.compile(step)
    for x, y in data:
        tx, ty = tl.Tensor(x), tl.Tensor(y.astype(np.int64))
        assert compiled(tx, ty).to_scalar() == eager(tx, ty).to_scalar()
        for a, b in zip(vars_, eager_vars):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert compiled.stats()["replays"] == 2
