"""Scale searches of the K-quant quantizers, for many sub-blocks at once.

These are ggml's ``make_qkx2_quants``, ``make_qx_quants`` (``rmse_type`` 1,
no importance weights) and ``make_q3_quants`` (``ggml-quants.c``), which
``quantize_row_q{2..6}_K_ref`` — what llama.cpp's quantizer runs without an
importance matrix — call once per sub-block of 16 or 32 values.  Here each
function takes all sub-blocks as the rows of one ``(N, n)`` float32 array
and runs the per-element steps as array operations across rows, so the cost
is a few dozen NumPy calls, not N Python iterations.

To produce ggml's bytes the float work keeps ggml's order: sums accumulate
left to right (``seq_sum``, ``column_sums``), products associate as written (``w*l*x`` is
``(w*l)*x``), rounding is ggml's ``nearest_int`` (round half to even, by the
``+ 1.5 * 2**23`` trick, reproduced bit for bit with its wrap-around for
out-of-range values), and the candidate scales, their order and the strict
``<`` / ``>`` comparisons that pick among them are the same.
"""

from __future__ import annotations

import numpy as np

from .blocks import F32, first_absmax, seq_sum

# ggml's GROUP_MAX_EPS: a sub-block whose largest magnitude is below this is all zero.
GROUP_MAX_EPS = F32(1e-15)
_MAGIC = F32(12582912.0)  # 1.5 * 2**23


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: ``v + 1.5 * 2**23`` in f32, the low mantissa bits as an int.

    For ``|v| <= 4194303`` this is round-half-to-even; beyond (and for
    NaN/inf) it returns what ggml's release builds return.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        bits = (np.asarray(v, dtype=F32) + _MAGIC).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def clamp(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``MAX(lo, MIN(hi, v))`` on int32."""
    return np.minimum(np.maximum(v, lo), hi).astype(np.int32)


def column_sums(a: np.ndarray) -> np.ndarray:
    """Left-to-right float32 sums down the columns of an ``(n, N)`` array.

    Reducing over the outer axis of a C-contiguous array, NumPy adds whole rows
    one after the other (pairwise summation is only used along the
    contiguous axis), which is the reference's sequential loop for every
    column at once, and much faster than ``seq_sum`` over short rows.
    """
    return np.add.reduce(np.asarray(a, dtype=F32), axis=0)


def make_qkx2_quants(x: np.ndarray, weights: np.ndarray, nmax: int, rmin: float, rdelta: float,
                     nstep: int, use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: ``(scale, the_min, L)`` with ``x ~ scale * L - the_min``, ``L`` in ``0..=nmax``.

    Starts from the range ``[min(x, 0), max(x)]``, then tries ``nstep + 1``
    scales ``(nmax + rmin + rdelta * is) / range``, each with the weighted
    least-squares scale and offset of its levels, keeping the one of lowest
    weighted error (squared, or absolute with ``use_mad``).
    """
    # Work on the transposed (n, N) arrays: one sub-block per column.
    x = np.ascontiguousarray(np.asarray(x, dtype=F32).T)
    w = np.ascontiguousarray(np.asarray(weights, dtype=F32).T)
    lo = x.min(axis=0)
    hi = x.max(axis=0)
    sum_w = column_sums(w)
    sum_x = column_sums(w * x)
    lo = np.where(lo > 0, F32(0), lo).astype(F32)
    flat = hi == lo
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(nmax) / (hi - lo)).astype(F32)
        scale = (F32(1) / iscale).astype(F32)
        levels = clamp(nearest_int(iscale * (x - lo)), 0, nmax)

        def error(sc, mn, lv):
            diff = (sc * lv.astype(F32) + mn) - x
            diff = np.abs(diff) if use_mad else diff * diff
            return column_sums(w * diff)

        best = error(scale, lo, levels)
        for step in range(nstep + 1):
            iscale = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (hi - lo)).astype(F32)
            aux = clamp(nearest_int(iscale * (x - lo)), 0, nmax)
            lf = aux.astype(F32)
            wl = w * lf
            sum_l = column_sums(wl)
            sum_l2 = column_sums(wl * lf)
            sum_xl = column_sums(wl * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = ((sum_w * sum_xl - sum_x * sum_l) / det).astype(F32)
            this_min = ((sum_l2 * sum_x - sum_l * sum_xl) / det).astype(F32)
            positive = this_min > 0
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale).astype(F32)
            this_min = np.where(positive, F32(0), this_min).astype(F32)
            cur = error(this_scale, this_min, aux)
            take = (det > 0) & (cur < best) & ~flat
            levels = np.where(take, aux, levels)
            best = np.where(take, cur, best)
            scale = np.where(take, this_scale, scale)
            lo = np.where(take, this_min, lo)
    scale = np.where(flat, F32(0), scale).astype(F32)
    levels = np.where(flat, 0, levels).astype(np.int32)
    return scale, (-lo).astype(F32), np.ascontiguousarray(levels.T)


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``(scale, L)`` of a symmetric quantization with x**2 weights (``rmse_type`` 1).

    ``L`` holds ``l + nmax`` in ``0..2*nmax-1`` (int32).  The scale is the
    weighted least-squares fit for the levels of ``-nmax / max``, improved by
    trying ``-(nmax + 0.1 * is) / max`` for ``is`` in -9..9.  Rows whose
    largest magnitude is below ``GROUP_MAX_EPS`` give scale 0 and L 0.
    """
    mx = first_absmax(np.asarray(x, dtype=F32))
    x = np.ascontiguousarray(np.asarray(x, dtype=F32).T)  # (n, N): one sub-block per column
    zero = np.abs(mx) < GROUP_MAX_EPS
    w = x * x
    wx = w * x

    def fit(iscale):
        lv = clamp(nearest_int(iscale * x), -nmax, nmax - 1)
        lf = lv.astype(F32)
        return lv, column_sums(wx * lf), column_sums(w * lf * lf)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        levels, sumlx, suml2 = fit((F32(-nmax) / mx).astype(F32))
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(F32)
        best = (scale * sumlx).astype(F32)
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = (-(F32(nmax) + F32(0.1) * F32(step)) / mx).astype(F32)
            lv, slx, sl2 = fit(iscale)
            take = (sl2 > 0) & (slx * slx > best * sl2)
            levels = np.where(take, lv, levels)
            scale = np.where(take, slx / sl2, scale).astype(F32)
            best = np.where(take, scale * slx, best).astype(F32)
    scale = np.where(zero, F32(0), scale).astype(F32)
    out = np.where(zero, 0, levels + nmax).astype(np.int32)
    return scale, np.ascontiguousarray(out.T)


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``(scale, L)`` of a symmetric ``-nmax..nmax-1`` quantization (``do_rmse`` = true).

    Starts from ``-nmax / max`` and improves the x**2-weighted fit one level
    at a time (up to 5 passes).  ``L`` holds ``l + nmax``; rows below
    ``GROUP_MAX_EPS`` give scale 0 and L 0.
    """
    x = np.asarray(x, dtype=F32)
    mx = first_absmax(x)
    zero = np.abs(mx) < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = (F32(-nmax) / mx).astype(F32)
        levels = clamp(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
    lf = levels.astype(F32)
    w = x * x
    sumlx = seq_sum(w * x * lf)
    suml2 = seq_sum(w * lf * lf)

    def step(i, rows, sumlx_r, suml2_r, lv):
        xi, wi = x[rows, i], w[rows, i]
        lif = lv[:, i].astype(F32)
        slx = sumlx_r - wi * xi * lif
        sl2 = suml2_r - wi * lif * lif
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            new = clamp(nearest_int(xi * sl2 / slx), -nmax, nmax - 1)
        nf = new.astype(F32)
        slx2 = slx + wi * xi * nf
        sl2b = sl2 + wi * nf * nf
        with np.errstate(invalid="ignore", over="ignore"):
            take = (slx > 0) & (new != lv[:, i]) & (sl2b > 0) & (slx2 * slx2 * suml2_r > sumlx_r * sumlx_r * sl2b)
        return take, new, slx2, sl2b

    _coordinate_descent(step, ~zero, levels, sumlx, suml2, passes=5)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0)).astype(F32)
    scale = np.where(zero, F32(0), scale).astype(F32)
    out = np.where(zero[:, None], 0, levels + nmax).astype(np.int32)
    return scale, out


def _coordinate_descent(step, active, levels, sumlx, suml2, passes):
    """Run ggml's "try one new level per element" passes, in place.

    ``step(i, rows, sumlx, suml2, levels)`` decides, for element ``i`` of the
    given rows, whether the new level is taken; the running sums then carry
    the change to the next element, exactly as the sequential loop does.  A
    row that changed nothing in a pass is finished (ggml's ``break``).
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
