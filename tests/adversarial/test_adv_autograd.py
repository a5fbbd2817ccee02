"""Autograd misuse: stale graphs after Var.set, gradients of integer tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.errors import StaleGraphError, TallowError


def test_var_set_after_recording_makes_backward_refuse(dev):
    w = tl.Var(tl.tensor([1.0, 2.0, 3.0], device=dev))
    x = tl.tensor([4.0, 5.0, 6.0], device=dev)
    loss = (w * w * x).sum_all()
    w.set(tl.tensor([10.0, 20.0, 30.0], device=dev))
    with pytest.raises(StaleGraphError, match=rf"Var with id {w.id} .*shape \(3,\).*'mul'"):
        loss.backward()
    # PyTorch refuses the same program (its version counter).
    tw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tloss = (tw * tw * torch.tensor([4.0, 5.0, 6.0])).sum()
    with torch.no_grad():
        tw.copy_(torch.tensor([10.0, 20.0, 30.0]))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tloss.backward()


def test_forward_again_after_set_gives_pytorch_gradient(dev):
    w = tl.Var(tl.tensor([1.0, 2.0, 3.0], device=dev))
    x = tl.tensor([4.0, 5.0, 6.0], device=dev)
    (w * w * x).sum_all()
    w.set(tl.tensor([10.0, 20.0, 30.0], device=dev))
    grads = (w * w * x).sum_all().backward()
    tw = torch.tensor([10.0, 20.0, 30.0], requires_grad=True)
    (tw * tw * torch.tensor([4.0, 5.0, 6.0])).sum().backward()
    np.testing.assert_allclose(grads[w].numpy(), tw.grad.numpy())


def test_in_place_write_through_a_view_is_caught(dev):
    w = tl.Var(tl.tensor([[1.0, 2.0], [3.0, 4.0]], device=dev))
    loss = (w.t() * w.t()).sum_all()
    w.zero_set()
    with pytest.raises(StaleGraphError):
        loss.backward()


def test_optimizer_loop_still_works():
    w = tl.Var(tl.tensor([1.0, -2.0]))
    opt = tl.nn.SGD([w], 0.1)
    for _ in range(3):
        loss = (w * w).sum_all()
        opt.backward_step(loss)
    np.testing.assert_allclose(w.numpy(), np.array([1.0, -2.0]) * 0.8 ** 3, rtol=1e-6)


def test_u32_var_has_no_gradient_and_says_why():
    w = tl.Var(tl.tensor([1, 2, 3], dtype=tl.u32))
    x = tl.Var(tl.tensor([1.0, 2.0, 3.0]))
    grads = (w.to_dtype(tl.f32) * x).sum_all().backward()
    with pytest.raises(KeyError) as e:
        grads[w]
    assert isinstance(e.value, TallowError)
    assert f"tensor {w.id}" in str(e.value) and "integer tensors carry no gradient" in str(e.value)


def test_graph_cut_by_integer_cast_says_why():
    w = tl.Var(tl.tensor([1.5, 2.5]))
    x = tl.Var(tl.tensor([1.0, 2.0]))
    grads = (w.to_dtype(tl.i64).to_dtype(tl.f32) * x).sum_all().backward()
    with pytest.raises(TallowError, match=rf"tensor {w.id} .*integer dtype"):
        grads[w]
    np.testing.assert_allclose(grads[x].numpy(), [1.0, 2.0])


def test_only_writes_to_an_op_input_after_recording_make_backward_refuse(dev):
    # Ops note the clock of in-place writes; backward refuses an op only for a write
    # to one of its own inputs after that time, as PyTorch's per-tensor versions do:
    # a write to another Var in between, or to this one before the op, is no reason.
    w = tl.Var(tl.tensor([1.0, 2.0, 3.0], device=dev))
    other = tl.Var(tl.tensor([0.0, 0.0], device=dev))
    x = tl.tensor([4.0, 5.0, 6.0], device=dev)
    w.set(tl.tensor([2.0, 3.0, 4.0], device=dev))  # before recording: fine
    loss = (w * w * x).sum_all()
    other.set(tl.tensor([1.0, 1.0], device=dev))  # another buffer: fine
    grads = loss.backward()
    tw = torch.tensor([2.0, 3.0, 4.0], requires_grad=True)
    tother = torch.tensor([0.0, 0.0], requires_grad=True)
    tloss = (tw * tw * torch.tensor([4.0, 5.0, 6.0])).sum()
    with torch.no_grad():
        tother.copy_(torch.tensor([1.0, 1.0]))
    tloss.backward()
    np.testing.assert_allclose(grads[w].numpy(), tw.grad.numpy())
    loss = (w * w * x).sum_all()
    w.set(tl.tensor([5.0, 5.0, 5.0], device=dev))
    other.set(tl.tensor([2.0, 2.0], device=dev))
    with pytest.raises(StaleGraphError, match=rf"Var with id {w.id} .*version 2\)"):
        loss.backward()
