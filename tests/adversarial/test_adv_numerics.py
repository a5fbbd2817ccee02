"""Statistics over long rows with a large mean: no worse than PyTorch in f32.

Each op runs on rows of 16384 values around 1000 (constant, with a small and a
large spread) and around 1e4; the error against PyTorch in f64 must stay within
twice PyTorch's own f32 error, plus a few f32 ulps of the result's magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tallow as tl
from tallow.nn import ops as F

N = 16384
EPS32 = float(np.finfo(np.float32).eps)


def rows(kind):
    rng = np.random.default_rng(7)
    if kind == "constant":
        return np.full((3, N), 1000.1, np.float32)
    if kind == "small-spread":
        return (1000 + rng.standard_normal((3, N)) * 0.01).astype(np.float32)
    if kind == "unit-spread":
        return (1000 + rng.standard_normal((3, N))).astype(np.float32)
    return (1e4 + rng.standard_normal((3, N)) * 10).astype(np.float32)


OPS = {
    "layer_norm": (lambda t, w, b: F.layer_norm(t, w, b, 1e-5),
                   lambda x: TF.layer_norm(x, (N,), eps=1e-5)),
    "layer_norm_tracked": (lambda t, w, b: F.layer_norm(t, tl.Var(w), b, 1e-5),
                           lambda x: TF.layer_norm(x, (N,), eps=1e-5)),
    "rms_norm": (lambda t, w, b: F.rms_norm(t, w, 1e-5), lambda x: TF.rms_norm(x, (N,), eps=1e-5)),
    "softmax": (lambda t, w, b: F.softmax(t, -1), lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda t, w, b: F.log_softmax(t, -1), lambda x: torch.log_softmax(x, -1)),
    "mean": (lambda t, w, b: t.mean((1,)), lambda x: x.mean(-1)),
    "var": (lambda t, w, b: t.var(1), lambda x: x.var(-1)),
}


@pytest.mark.parametrize("kind", ["constant", "small-spread", "unit-spread", "large-mean"])
@pytest.mark.parametrize("op", list(OPS))
def test_long_row_statistics_as_accurate_as_torch_f32(dev, op, kind):
    x = rows(kind)
    ours, theirs = OPS[op]
    ref = theirs(torch.tensor(x, dtype=torch.float64)).numpy()
    torch_err = np.max(np.abs(theirs(torch.tensor(x)).numpy().astype(np.float64) - ref))
    t = tl.tensor(x, device=dev)
    w = tl.ones(N, device=dev)
    b = tl.zeros(N, device=dev)
    got = ours(t, w, b).detach().numpy().astype(np.float64)
    err = np.max(np.abs(got - ref))
    floor = 4 * EPS32 * max(np.max(np.abs(ref)), 1e-30)
    assert err <= 2 * torch_err + floor, f"{op} on {kind}: error {err:.3g}, torch f32 {torch_err:.3g}"


def test_layer_norm_of_a_constant_row_is_exactly_zero(dev):
    t = tl.full((2, 4096), 1000.1, device=dev) if hasattr(tl, "full") else \
        tl.tensor(np.full((2, 4096), 1000.1, np.float32), device=dev)
    y = F.layer_norm(t, tl.ones(4096, device=dev), tl.zeros(4096, device=dev), 1e-5)
    assert np.all(y.numpy() == 0)
