"""Scale searches of the K-quant quantizers, for many sub-blocks at once.

These are candle's ``make_qkx1_quants``, ``make_q3_quants`` and
``make_qx_quants`` (``candle-core/src/quantized/utils.rs``, after
llama.cpp's k_quants.c), which quantize_row_q{2..6}_K call once per
sub-block of 16 or 32 values.  Here each function takes all sub-blocks as
the rows of one ``(N, n)`` float32 array and walks the per-element steps
with array operations across rows, so the cost is a few dozen NumPy calls,
not N Python iterations.

To encode exactly as candle does, the float work keeps candle's order:
sums accumulate left to right (``seq_sum``), products associate as written
(``w * x * l`` is ``(w * x) * l``), rounding is ``nearest_int``, and the
iteration counts and early exits are the same.  The coordinate-descent
passes update one element at a time and reuse the running sums, so they loop
over the (16 or 32) element positions; rows that stopped changing are fixed
points and are dropped from later passes, which is what candle's ``break``
amounts to.
"""

from __future__ import annotations

import numpy as np

from .blocks import F32, first_absmax, nearest_int, seq_sum


def make_qkx1_quants(nmax: int, ntry: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``(scale, min)`` with ``x ~ scale * l - min``, ``l`` in ``0..=nmax``.

    Alternates rounding with a least-squares refit of the scale and of the
    (non-positive) offset, at most ``ntry`` times, stopping per row once the
    levels no longer change.
    """
    x = np.asarray(x, dtype=F32)
    n_rows, n = x.shape
    lo = x.min(axis=1)
    hi = x.max(axis=1)
    flat = hi == lo  # all values equal: candle returns (0, 0)
    lo = np.minimum(lo, F32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = (F32(nmax) / (hi - lo)).astype(F32)
        scale = (F32(1) / iscale).astype(F32)
    levels = np.zeros((n_rows, n), dtype=np.int32)
    active = ~flat
    for _ in range(ntry):
        if not active.any():
            break
        rows = np.flatnonzero(active)
        xr, lr, ir = x[rows], lo[rows], iscale[rows]
        shifted = xr - lr[:, None]
        with np.errstate(invalid="ignore", over="ignore"):
            new = nearest_int(ir[:, None] * shifted, 0, nmax)
        changed = (new != levels[rows]).any(axis=1)
        levels[rows] = new
        sumlx = seq_sum(shifted * new.astype(F32))
        suml2 = (new * new).sum(axis=1).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = (sumlx / suml2).astype(F32)
            resid = seq_sum(xr - sc[:, None] * new.astype(F32))
            mn = (resid / F32(n)).astype(F32)
            mn = np.where(mn > 0, F32(0), mn)
            scale[rows] = sc
            lo[rows] = mn
            iscale[rows] = (F32(1) / sc).astype(F32)
        active[rows] = changed
    scale = np.where(flat, F32(0), scale)
    the_min = np.where(flat, F32(0), -lo)
    return scale.astype(F32), the_min.astype(F32)


def make_q3_quants(x: np.ndarray, nmax: int) -> np.ndarray:
    """Per row: the scale of a symmetric ``-nmax..nmax-1`` quantization (``do_rmse`` = true).

    Starts from ``-nmax / max`` and improves the x**2-weighted fit one level
    at a time (up to 5 passes).  Only the scale is kept, as in candle.
    """
    x = np.asarray(x, dtype=F32)
    n_rows, n = x.shape
    mx = first_absmax(x)
    zero = mx == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / mx).astype(F32)
        levels = nearest_int(iscale[:, None] * x, -nmax, nmax - 1)
    lf = levels.astype(F32)
    w = x * x
    sumlx = seq_sum(w * x * lf)
    suml2 = seq_sum(w * (levels * levels).astype(F32))

    def step(i, rows, sumlx_r, suml2_r, lv):
        xi, wi = x[rows, i], w[rows, i]
        li = lv[:, i]
        slx = sumlx_r - wi * xi * li.astype(F32)
        sl2 = suml2_r - wi * (li * li).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            new = nearest_int(xi * sl2 / slx, -nmax, nmax - 1)
        slx2 = slx + wi * xi * new.astype(F32)
        sl2b = sl2 + wi * (new * new).astype(F32)
        with np.errstate(invalid="ignore", over="ignore"):
            take = (slx > 0) & (new != li) & (sl2b > 0) & (slx2 * slx2 * suml2_r > sumlx_r * sumlx_r * sl2b)
        return take, new, slx2, sl2b

    _coordinate_descent(step, ~zero, levels, sumlx, suml2, passes=5)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (sumlx / suml2).astype(F32)
    return np.where(zero, F32(0), scale)


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``(scale, L)`` of a symmetric quantization with x**2 weights (``rmse_type`` 1).

    ``L`` holds ``l + nmax`` in ``0..2*nmax-1`` (int32); all-zero rows give
    scale 0 and L 0.  Three refits of the whole row, then up to five passes
    of single-level improvements.
    """
    x = np.asarray(x, dtype=F32)
    n_rows, n = x.shape
    mx = first_absmax(x)
    zero = mx == 0
    w = x * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / mx).astype(F32)
        levels = nearest_int(iscale[:, None] * x, -nmax, nmax - 1)
    lf = levels.astype(F32)
    sumlx = seq_sum(w * x * lf)
    suml2 = seq_sum(w * lf * lf)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (sumlx / suml2).astype(F32)
    best = scale * sumlx

    # Refit: requantize the whole row with the fitted scale while that helps.
    active = ~zero
    for _ in range(3):
        if not active.any():
            break
        rows = np.flatnonzero(active)
        xr, wr = x[rows], w[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv = (F32(1) / scale[rows]).astype(F32)
            new = nearest_int(inv[:, None] * xr, -nmax, nmax - 1)
        changed = (new != levels[rows]).any(axis=1)
        nf = new.astype(F32)
        slx = seq_sum(wr * xr * nf)
        sl2 = seq_sum(wr * nf * nf)
        with np.errstate(invalid="ignore", over="ignore"):
            stop = ~changed | (sl2 == 0) | (slx * slx <= best[rows] * sl2)
        go = rows[~stop]
        levels[go] = new[~stop]
        sumlx[go] = slx[~stop]
        suml2[go] = sl2[~stop]
        with np.errstate(divide="ignore", invalid="ignore"):
            scale[go] = (sumlx[go] / suml2[go]).astype(F32)
        best[go] = scale[go] * sumlx[go]
        active[rows[stop]] = False

    def step(i, rows, sumlx_r, suml2_r, lv):
        xi, wi = x[rows, i], w[rows, i]
        li = lv[:, i]
        lif = li.astype(F32)
        slx = sumlx_r - wi * xi * lif
        sl2 = suml2_r - wi * lif * lif
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            new = nearest_int(xi * sl2 / slx, -nmax, nmax - 1)
        nf = new.astype(F32)
        slx2 = slx + wi * xi * nf
        sl2b = sl2 + wi * nf * nf
        with np.errstate(invalid="ignore", over="ignore"):
            take = (slx > 0) & (new != li) & (sl2b > 0) & (slx2 * slx2 * suml2_r > sumlx_r * sumlx_r * sl2b)
        return take, new, slx2, sl2b

    _coordinate_descent(step, ~zero, levels, sumlx, suml2, passes=5)
    with np.errstate(divide="ignore", invalid="ignore"):
        fitted = (sumlx / suml2).astype(F32)
    # candle recomputes the scale only when a level moved; otherwise it keeps
    # the refit's value, which is the same quotient of the same sums.
    scale = np.where(zero, F32(0), fitted)
    out = np.where(zero[:, None], 0, levels + nmax).astype(np.int32)
    return scale.astype(F32), out


def _coordinate_descent(step, active, levels, sumlx, suml2, passes):
    """Run candle's "try one new level per element" passes, in place.

    ``step(i, rows, sumlx, suml2, levels)`` decides, for element ``i`` of the
    given rows, whether the new level is taken; the running sums then carry
    the change to the next element, exactly as the sequential loop does.
    """
    n = levels.shape[1]
    for _ in range(passes):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            return
        sx, s2, lv = sumlx[rows], suml2[rows], levels[rows]
        moved = np.zeros(rows.size, dtype=bool)
        for i in range(n):
            take, new, slx2, sl2b = step(i, rows, sx, s2, lv)
            lv[:, i] = np.where(take, new, lv[:, i])
            sx = np.where(take, slx2, sx)
            s2 = np.where(take, sl2b, s2)
            moved |= take
        levels[rows], sumlx[rows], suml2[rows] = lv, sx, s2
        active[rows] = moved
