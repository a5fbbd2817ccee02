"""Fused losses of ``CpuStorage``: cross entropy of logits over class ids, with its
gradient made in the same pass (PyTorch computes the two in one kernel each)."""

from __future__ import annotations

import numpy as np

from ... import dtype as dt
from . import numba_kernels

_HALF = (dt.f16, dt.bf16)


class CpuLosses:
    """Loss kernels of ``CpuStorage``."""

    __slots__ = ()

    def cross_entropy_ids(self, layout, ids, ids_layout, ignore_index: int, mean: bool,
                          with_grad: bool):
        x = self.view(layout)
        t = ids.view(ids_layout)
        n, c = x.shape
        if n == 0 or c == 0:
            raise NotImplementedError  # empty: the composed path gives PyTorch's answers
        dtype = self.dtype
        xf = x.astype(np.float32) if dtype in _HALF else x
        if not 0 <= ignore_index < c and t.dtype.kind in "iu":
            # No id can be ignored (``ignore_index`` is not a class; PyTorch's -100 by
            # default): when every id is in range, the weights are all one.
            done = _all_counted(xf, t, n, mean, with_grad)
            if done is not None:
                return _finish(self, done[0], done[1], xf is not x, dtype)
        keep = t != ignore_index
        t64 = t.astype(np.int64)
        if ((t64 < 0) | (t64 >= c))[keep].any():
            # Out-of-range ids (and the id dtype's "select nothing" sentinel): the
            # composed path raises or handles them as gather does.
            raise NotImplementedError
        safe = np.where(keep, t64, 0)
        rows = np.arange(n)
        shifted = xf - xf.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=1, keepdims=True)
        w = keep.astype(xf.dtype)
        # loss = sum_i coef_i * log p[i, t_i], coef = -w / sum(w) (mean) or -w (sum);
        # an all-ignored mean is 0/0 = nan, as PyTorch's.
        with np.errstate(invalid="ignore", divide="ignore"):
            coef = -w / w.sum() if mean else -w
            picked = shifted[rows, safe] - np.log(total[:, 0])
            loss = np.asarray(np.dot(picked, coef), dtype=xf.dtype).reshape(())
            grad = None
            if with_grad:
                # d loss / d x = coef_i * (onehot(t_i) - softmax(x_i))
                grad = e / total
                grad *= -coef[:, None]
                grad[rows, safe] += coef
        return _finish(self, loss, grad, xf is not x, dtype)


def _all_counted(xf, t, n, mean, with_grad):
    """``(loss, grad)`` when every id counts (``coef`` all ``-1/n`` for the mean, ``-1``
    for the sum) in one compiled pass over the rows (``loss_kernels``); None when an
    id is out of range or numba is not available (the general path answers)."""
    kernels = _compiled()
    if kernels is None or xf.dtype.kind != "f":
        return None
    npd = xf.dtype.type
    coef = npd(-1.0) / npd(n) if mean else npd(-1.0)
    grad = np.empty(xf.shape, xf.dtype) if with_grad else _NO_GRAD
    ok, loss = kernels.cross_entropy_rows(xf, t, coef, grad, with_grad)
    if not ok:
        return None
    return np.asarray(loss, dtype=xf.dtype).reshape(()), (grad if with_grad else None)


_NO_GRAD = np.empty((1, 1), np.float32)


def _compiled():
    """The numba kernel module, or None (numba missing, broken or disabled)."""
    return numba_kernels.load("loss_kernels")


def _finish(s, loss, grad, widened, dtype):
    loss_s = s._wrap(loss.astype(dtype.np) if widened else loss, dtype)
    grad_s = None
    if grad is not None:
        grad_s = s._wrap(grad.astype(dtype.np) if widened else grad, dtype)
    return loss_s, grad_s
