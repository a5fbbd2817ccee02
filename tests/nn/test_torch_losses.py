"""Losses against torch.nn.functional: values and gradients for every reduction,
class weights, ignore_index, label smoothing, probability targets, pos_weight."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tallow as tl

L = tl.nn.loss


def _run(ours_fn, theirs_fn, x_np, device, atol=1e-5):
    tx = torch.tensor(x_np, requires_grad=True)
    x = tl.Var(x_np, device=device)
    ty = theirs_fn(tx)
    y = ours_fn(x)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=atol, rtol=1e-5)
    r = np.random.default_rng(5).standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(r)).sum().backward()
    g = (y * tl.Tensor(r, device=device)).sum_all().backward()[x]
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), atol=atol, rtol=1e-5)


rng = np.random.default_rng(0)
LOGITS = rng.standard_normal((6, 5)).astype(np.float32) * 2
TARGET = np.array([0, 4, 2, 2, 1, 3], np.int64)
TARGET_IGN = np.array([0, -100, 2, 2, -100, 3], np.int64)
WEIGHT = np.array([0.5, 1.0, 2.0, 1.5, 0.25], np.float32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target", ["plain", "ignored"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(reduction, target, weighted, smoothing, device):
    t = TARGET if target == "plain" else TARGET_IGN
    w = WEIGHT if weighted else None
    _run(lambda x: L.cross_entropy(x, tl.Tensor(t, device=device),
                                   None if w is None else tl.Tensor(w, device=device),
                                   reduction=reduction, label_smoothing=smoothing),
         lambda x: TF.cross_entropy(x, torch.from_numpy(t),
                                    None if w is None else torch.from_numpy(w),
                                    reduction=reduction, label_smoothing=smoothing),
         LOGITS, device)


def test_cross_entropy_custom_ignore_index_and_spatial_targets(device):
    x = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    t = rng.integers(0, 4, (2, 3, 5)).astype(np.int64)
    t[0, 1, 2] = 3
    for reduction in ("mean", "none"):
        _run(lambda v: L.cross_entropy(v, tl.Tensor(t, device=device), ignore_index=3,
                                       reduction=reduction, label_smoothing=0.2),
             lambda v: TF.cross_entropy(v, torch.from_numpy(t), ignore_index=3,
                                        reduction=reduction, label_smoothing=0.2),
             x, device)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_with_probability_targets(smoothing, device):
    p = rng.random((6, 5)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    _run(lambda x: L.cross_entropy(x, tl.Tensor(p, device=device),
                                   tl.Tensor(WEIGHT, device=device), label_smoothing=smoothing),
         lambda x: TF.cross_entropy(x, torch.from_numpy(p), torch.from_numpy(WEIGHT),
                                    label_smoothing=smoothing),
         LOGITS, device)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll(reduction, device):
    lp = torch.log_softmax(torch.from_numpy(LOGITS), 1).numpy()
    _run(lambda x: L.nll(x, tl.Tensor(TARGET_IGN, device=device),
                         tl.Tensor(WEIGHT, device=device), reduction=reduction),
         lambda x: TF.nll_loss(x, torch.from_numpy(TARGET_IGN), torch.from_numpy(WEIGHT),
                               reduction=reduction),
         lp, device)


def test_u32_targets_and_candle_signature_still_work():
    y = TARGET.astype(np.uint32)
    ours = L.cross_entropy(tl.Tensor(LOGITS), tl.Tensor(y, dtype=tl.u32))
    theirs = TF.cross_entropy(torch.from_numpy(LOGITS), torch.from_numpy(TARGET))
    assert abs(float(ours.item()) - float(theirs)) < 1e-5


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_l1(reduction, device):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = rng.standard_normal((3, 4)).astype(np.float32)
    tt = torch.from_numpy(t)
    _run(lambda v: L.mse(v, tl.Tensor(t, device=device), reduction),
         lambda v: TF.mse_loss(v, tt, reduction=reduction), x, device)
    _run(lambda v: L.l1(v, tl.Tensor(t, device=device), reduction),
         lambda v: TF.l1_loss(v, tt, reduction=reduction), x, device)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits(reduction, device):
    x = (rng.standard_normal((4, 3)) * 5).astype(np.float32)  # large logits: stability
    t = rng.random((4, 3)).astype(np.float32)
    w = rng.random((4, 3)).astype(np.float32)
    pw = np.array([0.5, 2.0, 3.0], np.float32)
    _run(lambda v: L.binary_cross_entropy_with_logits(
            v, tl.Tensor(t, device=device), tl.Tensor(w, device=device), reduction,
            tl.Tensor(pw, device=device)),
         lambda v: TF.binary_cross_entropy_with_logits(
            v, torch.from_numpy(t), torch.from_numpy(w), reduction=reduction,
            pos_weight=torch.from_numpy(pw)), x, device)
    _run(lambda v: L.binary_cross_entropy_with_logits(v, tl.Tensor(t, device=device),
                                                      reduction=reduction),
         lambda v: TF.binary_cross_entropy_with_logits(v, torch.from_numpy(t),
                                                       reduction=reduction), x, device)


def test_loss_modules_match_functions():
    x, t = tl.Tensor(LOGITS), tl.Tensor(TARGET_IGN)
    m = tl.nn.CrossEntropyLoss(weight=tl.Tensor(WEIGHT), label_smoothing=0.1)
    expected = TF.cross_entropy(torch.from_numpy(LOGITS), torch.from_numpy(TARGET_IGN),
                                torch.from_numpy(WEIGHT), label_smoothing=0.1)
    assert abs(float(m(x, t).item()) - float(expected)) < 1e-5
    assert list(m.parameters()) == [] and "weight" in m.state_dict()
    a, b = tl.randn((3, 2)), tl.randn((3, 2))
    assert tl.nn.MSELoss(reduction="sum")(a, b).item() == L.mse(a, b, "sum").item()
    assert tl.nn.L1Loss()(a, b).item() == L.l1(a, b).item()
    lp = tl.nn.ops.log_softmax(x, 1)
    assert tl.nn.NLLLoss()(lp, t).item() == L.nll(lp, t).item()
    assert tl.nn.BCEWithLogitsLoss()(a, b.sigmoid()).item() == \
        L.binary_cross_entropy_with_logits(a, b.sigmoid()).item()


def test_bad_arguments_are_named():
    with pytest.raises(tl.nn.UnsupportedOptionError, match="reduction"):
        L.mse(tl.randn((2,)), tl.randn((2,)), reduction="avg")
    with pytest.raises(tl.ShapeMismatchError):
        L.cross_entropy(tl.Tensor(LOGITS), tl.Tensor(TARGET[:3]))
    with pytest.raises(tl.ShapeMismatchError):
        L.l1(tl.randn((2,)), tl.randn((3,)))
