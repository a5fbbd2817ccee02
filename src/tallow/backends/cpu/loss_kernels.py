"""The numba kernel of :mod:`tallow.backends.cpu.losses` (imported only when used).

Cross entropy over class ids is a handful of tiny NumPy calls per batch (a row max,
a subtraction, ``exp``, a row sum, a gather, a log, a dot, the gradient), each of
which costs more in NumPy's per-call overhead than in arithmetic for a classifier's
(batch, classes) logits. One compiled pass over the rows does the loss and its
gradient together. Module-level, so numba's on-disk cache (``cache=True``) finds it.
"""

from __future__ import annotations

import math

import numba


@numba.njit(cache=True, nogil=True, boundscheck=False)
def cross_entropy_rows(x, ids, coef, grad, with_grad):
    """``(True, sum_i coef * log_softmax(x_i)[ids_i])`` for x (n, c), and, when
    ``with_grad``, its gradient ``coef * (onehot(ids_i) - softmax(x_i))`` written into
    ``grad`` (n, c); ``(False, 0)`` with nothing computed when an id is out of
    ``[0, c)``. Each row is shifted by its max first, as ``log_softmax`` is; a NaN
    anywhere in a row makes that row's terms NaN."""
    n, c = x.shape
    zero = coef * 0  # the storage dtype's zero (coef is a finite scalar of it)
    for i in range(n):
        if ids[i] < 0 or ids[i] >= c:
            return False, zero
    loss = zero
    for i in range(n):
        row = x[i]
        m = row[0]
        for j in range(1, c):
            v = row[j]
            if v > m or v != v:
                m = v
        total = zero
        if with_grad:
            g = grad[i]
            for j in range(c):
                e = math.exp(row[j] - m)
                g[j] = e
                total += e
        else:
            for j in range(c):
                total += math.exp(row[j] - m)
        loss += (row[ids[i]] - m - math.log(total)) * coef
        if with_grad:
            scale = -coef / total
            for j in range(c):
                g[j] *= scale
            g[ids[i]] += coef
    return True, loss
