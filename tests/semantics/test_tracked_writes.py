"""Writes into tensors of a recorded graph (``h = x * w; h[0] += 1``, ``row = h[0];
row += 1``, ``h[ids] = v``) give PyTorch's values and gradients, or raise where
PyTorch raises; plain tensors' ``.grad`` is None."""

import numpy as np
import pytest
import torch

import tallow as tl

W = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def _row_plus_one(w, m):
    h = w * 2
    h[0] += 1
    return h


def _view_written_twice(w, m):
    h = w * 2
    row = h[0]
    row += 1
    row *= 3
    return h


def _paired_ids_set(w, m):
    h = w * 2
    h[m.tensor([0, 1]), m.tensor([2, 0])] = 7.0
    return h


def _column_from_a_tracked_value(w, m):
    h = w * 2
    h[:, 1] = w[:, 0] * 5
    return h


def _index_put_accumulate(w, m):
    h = w * 1.0
    h.index_put_((m.tensor([0, 0, 1]), m.tensor([1, 1, 2])), w[0] * 3, accumulate=True)
    return h


def _view_of_a_view(w, m):
    h = w * 2
    row = h[1]
    tail = row[1:]
    tail += w[0, :2]
    row *= 2
    h[0, 0] = row[2]
    return h


def _view_and_base_used_after(w, m):
    h = w * 2
    row = h[0]
    row += 1
    return row * h


def _transposed_base(w, m):
    h = (w * 2).t()
    h[0] -= w[:, 2]
    return h


def _stepped_slice_set(w, m):
    h = w + 0
    h[:, ::2] = 0.0
    return h


def _chained_index_writes(w, m):
    h = w + 0
    h[0][1] = 9.0
    h[1][m.tensor([0, 2])] = w[0, 1]
    return h


def _mask_set(w, m):
    h = w * 3
    h[h > 10] = -1.0
    return h


def _plain_tensor_takes_a_tracked_value(w, m):
    h = m.zeros((2, 3))
    h[1] = w[0] * 4
    return h


def _view_method_write(w, m):
    h = w * 2
    h[:, 2].mul_(5).add_(w[:, 0])
    return h


def _writes_into_a_var_view(w, m):
    w[0] += 1
    return w


def _view_multiplied_by_itself(w, m):
    h = w * 2
    row = h[:, 1]
    row.mul_(row)
    return h * row.sum()


CASES = [_row_plus_one, _view_written_twice, _paired_ids_set, _column_from_a_tracked_value,
         _index_put_accumulate, _view_of_a_view, _view_and_base_used_after, _transposed_base,
         _stepped_slice_set, _chained_index_writes, _mask_set,
         _plain_tensor_takes_a_tracked_value, _view_method_write, _writes_into_a_var_view,
         _view_multiplied_by_itself]


def _torch_outcome(fn):
    w = torch.tensor(W, requires_grad=True)
    try:
        out = fn(w, torch)
        (out * out).sum().backward()
    except RuntimeError:
        return None
    return out.detach().numpy(), w.grad.numpy()


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__.strip("_"))
def test_write_in_a_recorded_graph_matches_torch(device, fn):
    want = _torch_outcome(fn)
    w = tl.Var(W, device=device)
    if want is None:  # PyTorch raises: so does tallow
        with pytest.raises((tl.InplaceOnTrackedError, tl.StaleGraphError)):
            out = fn(w, tl)
            (out * out).sum().backward()
        return
    out = fn(w, tl)
    grads = (out * out).sum().backward()
    np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-6)
    np.testing.assert_allclose(grads[w].numpy(), want[1], rtol=1e-6)


def test_write_over_a_saved_output_gives_the_out_of_place_gradient(device):
    # h = w.exp(); h[h > 20] = 0: PyTorch raises (exp saved its output); tallow's graph
    # keeps exp's old output (copy-on-write), so the gradient is the out-of-place one.
    with pytest.raises(RuntimeError, match="inplace"):
        tw = torch.tensor(W, requires_grad=True)
        th = tw.exp()
        th[th > 20] = 0.0
        th.sum().backward()
    tw = torch.tensor(W, requires_grad=True)
    e = tw.exp()
    want = torch.where(e > 20, torch.zeros_like(e), e)
    (want * want).sum().backward()
    w = tl.Var(W, device=device)
    h = w.exp()
    h[h > 20] = 0.0
    grads = (h * h).sum().backward()
    np.testing.assert_allclose(h.numpy(), want.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads[w].numpy(), tw.grad.numpy(), rtol=1e-5)


def test_graph_recorded_before_a_view_write_is_stale(device):
    w = tl.Var(W, device=device)
    h = w * 2
    before = h.exp()
    row = h[0]
    row += 1
    with pytest.raises(tl.StaleGraphError):
        before.sum().backward()


def test_no_grad_view_writes_stay_plain(device):
    w = tl.Var(W, device=device)
    h = w * 2
    with tl.no_grad():
        h[0] += 1
    assert h.values() == [[3.0, 5.0, 7.0], [8.0, 10.0, 12.0]]


def test_plain_tensor_grad_is_none_as_torch(device):
    t = tl.tensor([1.0, 2.0], device=device)
    assert torch.tensor([1.0, 2.0]).grad is None
    assert t.grad is None
    w = tl.Var([1.0, 2.0], device=device)
    assert w.grad is None and (w * 2).grad is None
    (w * w).sum().backward()
    assert w.grad.values() == [2.0, 4.0]


def test_a_tracked_value_written_into_a_view_of_a_plain_tensor_raises():
    # PyTorch records the plain base too; tallow cannot reach it from the view, so it
    # refuses rather than lose the gradient through the base.
    h = tl.zeros((3, 2))
    w = tl.Var([1.0, 2.0])
    row = h[0]
    with pytest.raises(tl.InplaceOnTrackedError, match="out of place"):
        row += w
    assert not h.numpy().any()  # nothing written
    whole = tl.zeros((2,))
    whole += w  # the whole tensor joins the graph, as in PyTorch
    assert whole._track
