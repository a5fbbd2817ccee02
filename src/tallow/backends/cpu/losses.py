"""Fused losses of ``CpuStorage``: cross entropy of logits over class ids, with its
gradient made in the same pass (PyTorch computes the two in one kernel each)."""

from __future__ import annotations

import numpy as np

from ... import dtype as dt

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
        loss_s = self._wrap(loss.astype(dtype.np) if xf is not x else loss, dtype)
        grad_s = None
        if grad is not None:
            grad_s = self._wrap(grad.astype(dtype.np) if xf is not x else grad, dtype)
        return loss_s, grad_s
