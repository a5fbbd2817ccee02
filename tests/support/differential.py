"""Helpers for differential tests: tolerances, NumPy twins of strided tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import tallow as tl

FLOAT_DTYPES = [tl.f16, tl.bf16, tl.f32, tl.f64]
INT_DTYPES = [tl.u8, tl.u32, tl.i64]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES

TOL = {
    "f16": dict(rtol=2e-3, atol=2e-3),
    "bf16": dict(rtol=1.6e-2, atol=1.6e-2),
    "f32": dict(rtol=2e-5, atol=2e-6),
    "f64": dict(rtol=1e-12, atol=1e-12),
    "bool": dict(rtol=0, atol=0),
    "u8": dict(rtol=0, atol=0),
    "u32": dict(rtol=0, atol=0),
    "i8": dict(rtol=0, atol=0),
    "i16": dict(rtol=0, atol=0),
    "i32": dict(rtol=0, atol=0),
    "i64": dict(rtol=0, atol=0),
}


def tol(dtype, device=None, loose=False):
    t = dict(TOL[str(dtype)])
    if device is not None and device.kind == "gpu" and str(dtype) == "f32":
        t = dict(rtol=2e-4, atol=2e-5)
    if loose:
        t = {k: max(v * 10, 1e-6) if v else v for k, v in t.items()}
    return t


def assert_close(actual, expected, dtype, device=None, loose=False):
    a = np.asarray(actual.numpy() if isinstance(actual, tl.Tensor) else actual)
    e = np.asarray(expected)
    if a.dtype == ml_dtypes.bfloat16 or a.dtype == np.float16:
        a = a.astype(np.float32)
    if e.dtype == ml_dtypes.bfloat16 or e.dtype == np.float16:
        e = e.astype(np.float32)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    if np.issubdtype(a.dtype, np.integer):
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(a, e, equal_nan=True, **tol(dtype, device, loose))


def np_values(shape, dtype, rng, low=-3.0, high=3.0):
    """Random values of a tallow dtype as a NumPy array of its NumPy type."""
    if dtype.is_int:
        hi = {"u8": 200, "u32": 1000, "i64": 1000}[str(dtype)]
        lo = 0 if str(dtype) != "i64" else -1000
        return rng.integers(lo, hi, size=shape).astype(dtype.np)
    return rng.uniform(low, high, size=shape).astype(np.float64).astype(dtype.np)


# -- strided views: the same view applied to a tallow tensor and a NumPy array ----------

VIEWS = ("contiguous", "transpose", "narrow", "step", "broadcast", "permute")


@st.composite
def shapes(draw, min_rank=1, max_rank=4, max_side=6):
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.integers(1, max_side)) for _ in range(rank))


def make_view(base_t, base_np, view, draw):
    """Apply one kind of view to both; returns (tensor, array)."""
    shape = base_np.shape
    rank = len(shape)
    if view == "transpose" and rank >= 2:
        return base_t.t(), np.swapaxes(base_np, -1, -2)
    if view == "permute" and rank >= 2:
        perm = draw(st.permutations(list(range(rank))))
        return base_t.permute(tuple(perm)), np.transpose(base_np, perm)
    if view == "narrow":
        d = draw(st.integers(0, rank - 1))
        if shape[d] > 1:
            start = draw(st.integers(0, shape[d] - 1))
            n = draw(st.integers(1, shape[d] - start))
            sl = [slice(None)] * rank
            sl[d] = slice(start, start + n)
            return base_t.narrow(d, start, n), base_np[tuple(sl)]
    if view == "step":
        d = draw(st.integers(0, rank - 1))
        if shape[d] > 2:
            sl = [slice(None)] * rank
            sl[d] = slice(None, None, 2)
            return base_t[tuple(sl)], base_np[tuple(sl)]
    if view == "broadcast":
        ones = [i for i, n in enumerate(shape) if n == 1]
        new = list(shape)
        for i in ones:
            new[i] = draw(st.integers(1, 4))
        new = [draw(st.integers(1, 3))] + new
        return base_t.broadcast_as(tuple(new)), np.broadcast_to(base_np, new)
    return base_t, base_np


@st.composite
def strided(draw, dtype, device, shape=None, rng_seed=None, low=-3.0, high=3.0):
    """(tallow tensor, NumPy twin) with a random layout over a random buffer."""
    shape = shape or draw(shapes())
    seed = draw(st.integers(0, 2**31 - 1))
    arr = np_values(shape, dtype, np.random.default_rng(seed), low, high)
    t = tl.Tensor(arr, device=device)
    view = draw(st.sampled_from(VIEWS))
    return make_view(t, arr, view, draw)
