"""Chains of element-wise ops under ``tl.compile``: random chains, shapes, broadcasts
and layouts (hypothesis), replayed on new values, against eager tallow (bit for bit:
the fused kernel computes each op in the storage dtype, as NumPy does) and against
NumPy itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# (name, tallow, numpy) for each step of a chain; ``o`` is the other operand.
UNARY = [
    ("neg", lambda t: t.neg(), np.negative),
    ("abs", lambda t: t.abs(), np.abs),
    ("sqr", lambda t: t.sqr(), np.square),
    ("sqrt(abs)", lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a))),
    ("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0)),
    ("recip(1+abs)", lambda t: (t.abs() + 1.0).recip(), lambda a: 1 / (np.abs(a) + a.dtype.type(1))),
    ("affine", lambda t: t.affine(0.5, -1.25), lambda a: a * a.dtype.type(0.5) + a.dtype.type(-1.25)),
    ("clamp", lambda t: t.clamp(-0.5, 0.75), lambda a: np.minimum(np.maximum(a, a.dtype.type(-0.5)), a.dtype.type(0.75))),
    ("mask", lambda t: t * t.gt(0.25).to_dtype(t.dtype), lambda a: a * (a > a.dtype.type(0.25)).astype(a.dtype)),
    ("mask le", lambda t: t.le(-0.5).to_dtype(t.dtype) - t, lambda a: (a <= a.dtype.type(-0.5)).astype(a.dtype) - a),
    ("exp(unfused)", lambda t: t.clamp(-5, 5).exp(), lambda a: np.exp(np.minimum(np.maximum(a, a.dtype.type(-5)), a.dtype.type(5)))),
]
BINARY = [
    ("add", lambda t, o: t + o, np.add),
    ("sub", lambda t, o: t - o, np.subtract),
    ("mul", lambda t, o: t * o, np.multiply),
    ("div", lambda t, o: t / (o.abs() + 0.5), lambda a, b: a / (np.abs(b) + b.dtype.type(0.5))),
    ("maximum", lambda t, o: t.broadcast_maximum(o), np.maximum),
    ("minimum", lambda t, o: t.broadcast_minimum(o), np.minimum),
    ("rsub scalar", lambda t, o: 2.0 - t, lambda a, b: a.dtype.type(2.0) - a),
    ("mul scalar", lambda t, o: t * 3.0, lambda a, b: a * a.dtype.type(3.0)),
]


@st.composite
def chains(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    # The other operand broadcasts: some of its dims are 1, some leading dims missing.
    other = tuple(1 if draw(st.booleans()) else n for n in shape)
    other = other[draw(st.integers(0, rank - 1)):]
    steps = draw(st.lists(st.one_of(
        st.tuples(st.just("u"), st.integers(0, len(UNARY) - 1)),
        st.tuples(st.just("b"), st.integers(0, len(BINARY) - 1)),
    ), min_size=1, max_size=12))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    transpose = draw(st.booleans()) and rank >= 2
    return shape, other, steps, dtype, transpose


def _run(t, o, steps):
    for kind, i in steps:
        t = UNARY[i][1](t) if kind == "u" else BINARY[i][1](t, o)
    return t


def _run_np(a, b, steps):
    for kind, i in steps:
        a = UNARY[i][2](a) if kind == "u" else BINARY[i][2](a, b)
    return a


@SETTINGS
@given(chains(), st.integers(0, 2**31 - 1))
def test_chains_replay_bit_identical_to_eager_and_numpy(case, seed):
    shape, other, steps, dtype, transpose = case
    rng = np.random.default_rng(seed)
    compiled = tl.compile(lambda x, y: _run(x, y, steps))

    def make(shape_, view):
        a = rng.standard_normal(shape_).astype(dtype)
        if view:  # a non-contiguous view (a transpose) as the input
            return tl.Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).t()
        return tl.Tensor(a)

    for _ in range(3):  # the first call records, the next two replay on new values
        x, y = make(shape, transpose), make(other, False)
        got = compiled(x, y)
        want = _run(x, y, steps)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        expect = _run_np(x.numpy(), y.numpy(), steps)
        assert got.shape == expect.shape and got.numpy().dtype == expect.dtype
        np.testing.assert_array_equal(got.numpy(), expect)
    assert compiled.stats()["recordings"] == 1


def test_a_long_chain_is_one_fused_kernel_and_exact():
    x, y = tl.rand(1024), tl.rand(1024)

    def chain(a, b):
        z = a
        for _ in range(500):
            z = z + b
        return z

    compiled = tl.compile(chain)
    compiled(x, y)
    x2 = tl.rand(1024)
    np.testing.assert_array_equal(compiled(x2, y).numpy(), chain(x2, y).numpy())
    stats = compiled.stats()
    assert stats["fused_groups"] == 1 and stats["fused_ops"] == 500 and stats["calls"] == 0


def test_fused_values_needed_later_are_stored_and_returned_ones_are_fresh():
    x = tl.Tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))

    @tl.compile
    def f(a):
        h = a * 2.0 + 1.0
        r = h.relu()
        return h, r, r.sum_all()

    first = f(x)
    second = f(x)
    h = x.numpy() * np.float32(2) + np.float32(1)
    for out in (first, second):
        np.testing.assert_array_equal(out[0].numpy(), h)
        np.testing.assert_array_equal(out[1].numpy(), np.maximum(h, 0))
        np.testing.assert_allclose(out[2].to_scalar(), np.maximum(h, 0).sum(), rtol=1e-6)
    # Results handed out are never overwritten by a later replay.
    assert first[1]._storage is not second[1]._storage
    np.testing.assert_array_equal(first[1].numpy(), np.maximum(h, 0))


def test_without_fusion_the_replay_gives_the_same_values():
    rng = np.random.default_rng(0)
    a, b = tl.Tensor(rng.standard_normal((4, 5)).astype(np.float32)), tl.Tensor(rng.standard_normal(5).astype(np.float32))
    f = tl.compile(lambda x, y: ((x + y) * y).relu().exp(), fuse=False)
    g = tl.compile(lambda x, y: ((x + y) * y).relu().exp())
    for _ in range(2):
        np.testing.assert_array_equal(f(a, b).numpy(), g(a, b).numpy())
    assert f.stats()["fused_groups"] == 0 and g.stats()["fused_groups"] == 1


GPU_SETTINGS = settings(max_examples=12, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.gpu
@GPU_SETTINGS
@given(chains(), st.integers(0, 2**31 - 1))
def test_gpu_chains_are_one_wgsl_kernel_matching_eager(gpu, case, seed):
    shape, other, steps, _dtype, transpose = case
    rng = np.random.default_rng(seed)
    compiled = tl.compile(lambda x, y: _run(x, y, steps))

    def make(shape_, view):
        a = rng.standard_normal(shape_).astype(np.float32)
        if view:
            return tl.Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), device=gpu).t()
        return tl.Tensor(a, device=gpu)

    for _ in range(2):
        x, y = make(shape, transpose), make(other, False)
        got = compiled(x, y)
        want = _run(x, y, steps)
        # The shader compiler may contract or simplify across the fused ops (a
        # multiply-add, sqrt(x) * sqrt(x)): within 1e-6 of eager, not always bit-equal.
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
        expect = _run_np(x.numpy(), y.numpy(), steps)
        np.testing.assert_allclose(got.numpy(), expect, rtol=1e-5, atol=1e-6)


def test_gpu_fused_group_source_reads_broadcasts_by_index(gpu):
    x = tl.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=gpu)
    b = tl.Tensor(np.array([1, -1, 2, -2], np.float32), device=gpu)
    f = tl.compile(lambda p, q: ((p + q) * 2.0).relu())
    for _ in range(2):
        np.testing.assert_array_equal(f(x, b).numpy(), np.maximum((x.numpy() + b.numpy()) * 2, 0))
    assert f.stats()["fused_groups"] == 1 and f.stats()["calls"] == 0
