"""Shared helpers of the GPU tests: run one function on the CPU and on the GPU
over the same data and layout, and compare (the CPU backend is the reference)."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl
from .differential import assert_close, np_values

VIEWS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.transpose(0, -1),
    "narrowed": lambda t: t.narrow(0, 1, t.shape[0] - 1),
    "stepped": lambda t: t[::2],
    "broadcast": lambda t: t.narrow(0, 0, 1).broadcast_as(t.shape),
}


def on(arr, dtype, device):
    return tl.Tensor(np.ascontiguousarray(arr), device=device).to_dtype(dtype)


def both(f, arrays, dtype, gpu, view="contiguous"):
    """(cpu result, gpu result) of ``f(*tensors)``; tensors get the same view."""
    v = VIEWS[view]
    outs = []
    for dev in (tl.cpu, gpu):
        outs.append(f(*[v(on(a, dtype, dev)) for a in arrays]))
    return outs


def check(f, arrays, dtype, gpu, view="contiguous", loose=False):
    c, g = both(f, arrays, dtype, gpu, view)
    if isinstance(c, tuple):
        for a, b in zip(c, g):
            _same(a, b, dtype, gpu, loose)
    else:
        _same(c, g, dtype, gpu, loose)
    return c, g


def _same(c, g, dtype, gpu, loose):
    assert g.device == gpu and c.device == tl.cpu
    assert g.dtype == c.dtype, (g.dtype, c.dtype)
    assert g.shape == c.shape
    assert_close(g.numpy(), c.numpy(), c.dtype, gpu, loose)


def values(shape, dtype, seed=0, low=-3.0, high=3.0):
    return np_values(shape, dtype, np.random.default_rng(seed), low, high)


def skip_unless(gpu, dtype):
    if not gpu.supports_dtype(dtype):
        pytest.skip(f"{gpu} has no {dtype}")
