"""ReLU's backward pass through the backend's ``relu_backward`` kernel: the same
values as the composed rule (``grad * (x > 0)``) bit for bit, and PyTorch's, for any
shape and layout, with NaN, signed zeros, f32 and f64 (at NaN tallow passes no gradient, PyTorch passes
it; the composed rule always did the same as the kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tallow as tl
from tallow.backends.cpu import parallel

torch = pytest.importorskip("torch")

_special = st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 1e-30])


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float64]),
                    hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
                    elements=st.one_of(_special, st.floats(-4, 4, width=32))),
       transpose=st.booleans(), seed=st.integers(0, 2**16))
def test_kernel_equals_the_composed_rule_and_torch(x, transpose, seed):
    g = np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype)
    v = tl.Var(x)
    inp = v.t() if transpose and x.ndim == 2 else v
    gt = tl.Tensor(g.T.copy() if transpose and x.ndim == 2 else g)
    out = inp.relu()
    got = (out * gt).sum_all().backward()[v].numpy()
    # the composed rule, written out
    xv = inp.detach()
    want = (gt * (xv > 0).to_dtype(gt.dtype))
    want = want.t() if transpose and x.ndim == 2 else want
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8),
                                  np.ascontiguousarray(want.numpy()).view(np.uint8))
    tx = torch.tensor(x, requires_grad=True)
    tin = tx.t() if transpose and x.ndim == 2 else tx
    (tin.relu() * torch.from_numpy(gt.numpy())).sum().backward()
    # At NaN tallow's rule passes no gradient (x > 0 is false) where PyTorch's passes
    # it (x <= 0 is false too): compared elsewhere.
    keep = ~np.isnan(x)
    np.testing.assert_array_equal(got[keep], tx.grad.numpy()[keep])


def test_large_inputs_take_the_composed_rule():
    n = parallel.MIN_ELEMENTS
    x = np.linspace(-1, 1, n, dtype=np.float32)
    v = tl.Var(x)
    with pytest.raises(NotImplementedError):
        v._storage.relu_backward(v._layout, v._storage, v._layout)
    g = v.relu().sum_all().backward()[v].numpy()
    np.testing.assert_array_equal(g, (x > 0).astype(np.float32))
