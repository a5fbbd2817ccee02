"""Cross entropy over class ids in one compiled pass (``backends/cpu/loss_kernels``)
against PyTorch: values and gradients for any batch and class count, both
reductions, f32 and f64, extreme logits; ids out of range and ignored ids still
take the general path; a backward pass rooted at the loss hands the kernel's
gradient on as it is."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import losses

torch = pytest.importorskip("torch")


def _both(x, y, reduction, ignore_index=-100):
    v = tl.Var(x)
    loss = tl.nn.loss.cross_entropy(v, tl.Tensor(y), reduction=reduction, ignore_index=ignore_index)
    g = loss.backward()[v].numpy()
    tx = torch.tensor(x, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tx, torch.from_numpy(y.astype(np.int64)),
                                              reduction=reduction, ignore_index=ignore_index)
    tloss.backward()
    return loss.to_scalar(), g, tloss.item(), tx.grad.numpy()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 70), c=st.integers(1, 40), f64=st.booleans(),
       reduction=st.sampled_from(["mean", "sum"]), scale=st.sampled_from([0.1, 3.0, 80.0]),
       id_dtype=st.sampled_from([np.int64, np.int32, np.uint8, np.uint32]),
       seed=st.integers(0, 2**16))
def test_values_and_gradients_match_torch(n, c, f64, reduction, scale, id_dtype, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    x = (rng.standard_normal((n, c)) * scale).astype(dtype)
    y = rng.integers(0, c, n).astype(id_dtype)
    loss, g, tloss, tg = _both(x, y, reduction)
    tol = 1e-9 if f64 else 2e-5
    np.testing.assert_allclose(loss, tloss, rtol=tol, atol=tol)
    np.testing.assert_allclose(g, tg, rtol=tol, atol=tol)


def test_the_compiled_pass_serves_ids_in_range():
    if losses._compiled() is None:
        pytest.skip("numba not available")
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    done = losses._all_counted(x, np.array([0, 1, 2, 3, 0, 1]), 6, True, True)
    assert done is not None
    assert losses._all_counted(x, np.array([0, 1, 2, 4, 0, 1]), 6, True, True) is None
    assert losses._all_counted(x, np.array([0, 1, 2, -1, 0, 1]), 6, True, True) is None


@pytest.mark.parametrize("ignore_index", [-1, 2])
def test_ignored_ids_take_the_general_path(ignore_index):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = np.array([0, ignore_index, 3, 4, ignore_index, 1, 2, 0], np.int64)
    loss, g, tloss, tg = _both(x, y, "mean", ignore_index)
    np.testing.assert_allclose(loss, tloss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g, tg, rtol=1e-5, atol=1e-6)


def test_out_of_range_id_still_raises():
    x = tl.Var(np.zeros((2, 3), np.float32))
    with pytest.raises(tl.errors.TallowError):
        tl.nn.loss.cross_entropy(x, tl.Tensor(np.array([0, 3], np.int64)))


def test_nan_and_infinite_logits_as_torch():
    x = np.array([[np.nan, 0.0, 1.0], [np.inf, 0.0, 1.0], [-np.inf, 0.0, 1.0]], np.float32)
    y = np.array([1, 2, 0], np.int64)
    for rows in ([0], [2], [0, 1, 2]):
        loss, g, tloss, tg = _both(x[rows], y[rows], "sum")
        np.testing.assert_allclose(loss, tloss, rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(g, tg, rtol=1e-6, equal_nan=True)


def test_loss_at_the_root_and_inside_a_sum_give_the_same_gradient():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = tl.Tensor(rng.integers(0, 4, 5))
    v = tl.Var(x)
    root = tl.nn.loss.cross_entropy(v, y).backward()[v].numpy()
    scaled = (tl.nn.loss.cross_entropy(v, y) * 1.0).backward()[v].numpy()
    np.testing.assert_array_equal(root, scaled)
    doubled = (tl.nn.loss.cross_entropy(v, y) * 2.0).backward()[v].numpy()
    np.testing.assert_allclose(doubled, 2 * root, rtol=1e-6)
