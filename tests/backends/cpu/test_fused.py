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
