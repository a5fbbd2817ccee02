"""Every family of ops replays under ``tl.compile`` with eager's exact values, on new
argument values, on the CPU and the GPU: views, reductions, matmul, indexing,
concatenation, casts, convolutions and pooling, the fused nn kernels."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl

CASES = {
    "views and reductions": lambda x, y: (x.t().contiguous().sum_keepdim(0), x.narrow(1, 1, 2).max_keepdim(1),
                                          x.reshape((4, 3)).mean_all()),
    "matmul and broadcast": lambda x, y: x.matmul(y.t()).broadcast_add(y.sum_keepdim(1).t()),
    "softmax and log": lambda x, y: tl.nn.ops.softmax_last_dim(x).log(),
    "cat and stack": lambda x, y: (tl.cat([x, y], 0), tl.stack([x, y], 0).sum_keepdim(0)),
    "index_select and gather": lambda x, y: (
        x.index_select(tl.Tensor(np.array([2, 0], np.uint32), device=x.device), 1),
        x.gather(tl.Tensor(np.array([[0], [3], [1]], np.uint32), device=x.device), 1)),
    "where and comparisons": lambda x, y: x.gt(0).where_cond(x, y * 2.0),
    "casts": lambda x, y: (x * 100.0).to_dtype(tl.u32).to_dtype(tl.f32) + y,
    "conv and pool": lambda x, y: x.reshape((1, 1, 3, 4)).conv2d(y.reshape((1, 1, 3, 4)).narrow(2, 0, 2).narrow(3, 0, 2))
                                  .relu().max_pool2d(1),
    "layer norm": lambda x, y: tl.nn.ops.layer_norm(x, y.sum_keepdim(0).squeeze(0), y.mean_keepdim(0).squeeze(0), 1e-5),
    "in-place slice write": lambda x, y: _slice_set(x, y),
}


def _slice_set(x, y):
    z = tl.zeros((5, 4), device=x.device)
    z.slice_set(x, 0, 1)
    return z + y.sum_all()


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_family_replays_exactly(name, device):
    fn = CASES[name]
    rng = np.random.default_rng(5)
    compiled = tl.compile(fn)
    for _ in range(3):
        x = tl.Tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device)
        y = tl.Tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device)
        got, want = _flat(compiled(x, y)), _flat(fn(x, y))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            if device.is_gpu:  # fused GPU chains may be contracted by the shader compiler
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert compiled.stats()["recordings"] == 1
