"""Fused CPU kernels for the backend's optional ops (softmax, norms, GELU, RoPE, linear).

Each one replaces a chain of Tensor ops (and their intermediate arrays) by a
single pass over the data. Rows are processed in chunks of about
``CHUNK`` elements, so the few temporaries a kernel needs stay in the CPU cache
instead of streaming through memory once per NumPy call. f16/bf16 compute in
f32 and round once at the end. None of these is differentiated directly: the
Tensor layer composes the op from primitives whenever an input is tracked.
"""

from __future__ import annotations

import threading

import numpy as np

from ... import config
from ... import dtype as dt
from ..base import BackendStorage
from . import gemm, onepass, parallel
from .matmul import float_operands
from .native.pool import run_pieces
from .threads import CONFIG


# Elements per chunk: temporaries of this size stay in L2, and each NumPy call is
# long enough that two threads rarely wait on each other for the GIL.
CHUNK = 1 << 17
_HALF = (dt.f16, dt.bf16)
_FLOAT = (dt.f32, dt.f64)


def _compute_dtype(dtype):
    return np.float64 if dtype is dt.f64 else np.float32


def _rows(s, layout):
    """(2-D array of rows over the last dim, compute dtype)."""
    x = s.view(layout)
    n = x.shape[-1] if x.ndim else 1
    # Not reshape(-1, n): with n == 0 the row count would be ambiguous.
    rows = x.reshape(int(np.prod(x.shape[:-1], dtype=np.int64)) if x.ndim else 1, n)
    cd = _compute_dtype(s.dtype)
    if rows.dtype != cd:
        rows = rows.astype(cd)
    return rows, cd


def _finish(s, out, shape, dtype):
    out = out.reshape(shape)
    if out.dtype != dtype.np:
        out = out.astype(dtype.np)
    return s._wrap(out, dtype)


def _step(n):
    return max(1, CHUNK // max(n, 1))


def _run(kernel, out, rows, *extra):
    """``kernel(o, r, *extra)`` over row chunks of ``rows`` into ``out`` (both 2-D),
    with the rows split over the CPU threads when the op is large."""
    if out.size == 0:  # no rows, or empty rows: nothing to compute (as on the GPU)
        return out
    step = _step(rows.shape[1])

    def chunks(o, r):
        for i in range(0, r.shape[0], step):
            kernel(o[i:i + step], r[i:i + step], *extra)

    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if parallel.worth_splitting(out.shape):
            parallel.run_rows(chunks, out, rows)
        else:
            chunks(out, rows)
    return out


def _vec(s, layout, cd):
    v = s.view(layout)
    return v.astype(cd) if v.dtype != cd else v


# -- softmax ----------------------------------------------------------------------------------

def _row_sums(x):
    """Sums of the rows of a 2-D array: a BLAS matrix-vector product (NumPy's own
    reduction along a short contiguous axis is several times slower)."""
    if not x.flags.c_contiguous:
        return x.sum(axis=1)
    return x @ np.ones(x.shape[1], x.dtype)


def _softmax_chunk(o, r):
    np.subtract(r, r.max(axis=1, keepdims=True), out=o)
    np.exp(o, out=o)
    o /= _row_sums(o)[:, None]


# -- normalisations ---------------------------------------------------------------------------

def _rms_chunk(o, r, w, eps):
    # Squares summed in f64: an f32 sum of 4096 squares near 1e6 loses ~1e-5 relative.
    ms = np.einsum("ij,ij->i", r, r, dtype=np.float64)
    ms *= 1.0 / r.shape[1]
    ms += eps
    np.sqrt(ms, out=ms)
    np.reciprocal(ms, out=ms)
    np.multiply(r, ms.astype(r.dtype)[:, None], out=o)
    o *= w


def _ln_chunk(o, r, w, b, eps):
    # Corrected two-pass statistics: the mean summed in f64, the rows centred on
    # it, then centred again on the mean of what remains (the rounding of the first
    # mean), so a row of 4096 x 1000.1 gives exactly 0 and a row with a large mean
    # keeps its small spread. The variance is summed in f64.
    inv_n = 1.0 / r.shape[1]
    mean = r.sum(axis=1, dtype=np.float64)
    mean *= inv_n
    np.subtract(r, mean.astype(r.dtype)[:, None], out=o)
    rest = o.sum(axis=1, dtype=np.float64)
    rest *= inv_n
    o -= rest.astype(r.dtype)[:, None]
    var = np.einsum("ij,ij->i", o, o, dtype=np.float64)
    var *= inv_n
    var += eps
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    o *= var.astype(r.dtype)[:, None]
    o *= w
    if b is not None:
        o += b


# -- GELU (erf) ---------------------------------------------------------------------------------

# GELU(x) = x Phi(x) = relu(x) - |x| Phi(-|x|), and Phi(-a) = erfc(a / sqrt 2) / 2 with
# erfc(z) = poly(t) exp(-z^2), t = 1 / (1 + p z) (Abramowitz & Stegun 7.1.26,
# |error| <= 1.5e-7). The 1/2 and 1/sqrt 2 are folded into the constants; no sign
# handling is needed (the cheapest form found: ~18 NumPy passes per chunk).
_P = 0.3275911 * 0.7071067811865476
_A = tuple(0.5 * a for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def _gelu_chunk(o, x):
    cd = x.dtype.type
    a = np.abs(x)
    np.minimum(a, cd(1e30), out=a)  # |x| Phi(-|x|) is 0 * inf at x = +-inf otherwise
    t = np.multiply(a, cd(_P))
    t += 1
    np.divide(1, t, out=t)
    np.multiply(t, cd(_A[4]), out=o)
    for c in (_A[3], _A[2], _A[1], _A[0]):
        o += cd(c)
        o *= t
    e = np.square(a, out=t)     # t is free again
    e *= cd(-0.5)
    np.exp(e, out=e)
    o *= e                      # Phi(-|x|)
    o *= a
    np.maximum(x, cd(0), out=a)
    np.subtract(a, o, out=o)


# -- compiled kernels (numba) -------------------------------------------------------------------

_NUMBA = {"checked": False, "module": None, "error": None}
_NUMBA_LOCK = threading.Lock()


def compiled():
    """:mod:`fused_kernels` (numba) when it can be used, else None (numba missing or
    broken, or ``TALLOW_NO_NUMBA`` set): the NumPy chunk kernels serve then."""
    if config.settings.no_numba:
        return None
    if not _NUMBA["checked"]:
        with _NUMBA_LOCK:
            if not _NUMBA["checked"]:
                try:
                    from . import fused_kernels
                    _NUMBA["module"] = fused_kernels
                except Exception as e:  # an optional speed-up: report why, go on without
                    _NUMBA["error"] = f"{type(e).__name__}: {e}"
                _NUMBA["checked"] = True
    return _NUMBA["module"]


def _row_split(kernel, out, *row_arrays):
    """``kernel(out[a:b], *[x[a:b] ...])``: rows split over the CPU threads when the op is
    large (the compiled kernels release the GIL), else one call."""
    if out.size == 0:
        return out
    if parallel.worth_splitting(out.shape):
        parallel.run_rows(kernel, out, *row_arrays)
    else:
        kernel(out, *row_arrays)
    return out


_NO_VEC = {np.float32: np.zeros(0, np.float32), np.float64: np.zeros(0, np.float64)}


# -- rotary embeddings ----------------------------------------------------------------------------


# -- linear ---------------------------------------------------------------------------------------


# -- attention ------------------------------------------------------------------------------------

_SCRATCH = threading.local()


def _scratch(shape, dtype) -> np.ndarray:
    """A per-thread reusable buffer (grown as needed): score matrices are large and
    short-lived, and a fresh allocation each time costs page faults."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.nbytes < n:
        buf = _SCRATCH.buf = np.empty(max(n, 1), np.uint8)
    return buf[:n].view(dtype).reshape(shape)


_TINY_SUM = 1e-26  # a row whose exp-sum falls below this is redone with its exact max


def _attention_rows(o, q, k, v, mask, scale, groups, keys=None):
    """A block of batch rows: o[b] = softmax(q[b] k[b]^T * scale + mask[b]) v[b].

    ``keys`` (one count per batch row, or None): the keys after the first ``keys[b]``
    are masked out for every query of row ``b`` (padding), so they are left out of
    the products: their terms would be exactly zero.

    Batch elements go in groups whose score matrices together hold about ``CHUNK``
    elements (one element at a time for long sequences, many for short ones), so
    the scores stay in cache and short sequences do not pay per-element overhead.
    The softmax shift is an upper bound of each row's maximum, |q_i| max_j |k_j|
    (Cauchy-Schwarz), cheaper than the row maximum itself: softmax does not
    depend on the shift, and a bound never lets exp overflow. Should a bound be so
    loose that a row's terms underflow (its sum below ``_TINY_SUM``), or a mask add
    positive terms, the group is redone with the exact maximum. The scale goes on
    q (seq x dim) rather than the scores (seq x seq), the division on the output.
    """
    nb, h, sq = q.shape[:3]
    sk = k.shape[2]
    cd = q.dtype.type
    g = max(1, min(nb, 2 * CHUNK // max(h * sq * sk, 1)))
    kernels = compiled() if q.dtype == np.float32 else None
    if kernels is not None and (mask is None or (mask.shape[1] == 1 and mask.shape[2] == 1)):
        _attention_rows_compiled(kernels, o, q, k, v, mask, scale, groups, keys, g)
        return
    ones_all = np.ones(sk, q.dtype)
    scratch = _scratch((g, h, sq, sk), q.dtype)
    for b0 in range(0, nb, g):
        b1 = min(nb, b0 + g)
        n = sk if keys is None else int(keys[b0:b1].max())
        kb, vb = k[b0:b1, :, :n], v[b0:b1, :, :n]
        ones = ones_all[:n]
        scores = scratch.reshape(-1)[:g * h * sq * n].reshape(g, h, sq, n)
        if groups > 1:
            kb = np.repeat(kb, groups, axis=1)
            vb = np.repeat(vb, groups, axis=1)
        qb = q[b0:b1] * cd(scale)
        buf = scores[:b1 - b0]
        np.matmul(qb, kb.transpose(0, 1, 3, 2), out=buf)
        mb = None
        if mask is not None:
            mb = mask[b0:b1, ..., :n] if mask.shape[-1] == sk else mask[b0:b1]
            if not mb.any():  # rows without padding need no mask
                mb = None
        exact = mb is not None and mb.max() > 0
        if not exact:
            shift = np.sqrt(np.einsum("bhsd,bhsd->bhs", qb, qb))
            shift *= np.sqrt(np.einsum("bhsd,bhsd->bhs", kb, kb).max(axis=2))[..., None]
        if mb is not None:
            buf += mb
        if exact:
            shift = buf.max(axis=-1)
        buf -= shift[..., None]
        np.exp(buf, out=buf)
        total = (buf.reshape(-1, n) @ ones).reshape(buf.shape[:3] + (1,))
        if not exact and not (total >= _TINY_SUM).all():
            np.matmul(qb, kb.transpose(0, 1, 3, 2), out=buf)
            if mb is not None:
                buf += mb
            buf -= buf.max(axis=-1, keepdims=True)
            np.exp(buf, out=buf)
            total = (buf.reshape(-1, n) @ ones).reshape(buf.shape[:3] + (1,))
        ob = o[b0:b1]
        np.matmul(buf, vb, out=ob)
        ob /= total


def _attention_rows_compiled(kernels, o, q, k, v, mask, scale, groups, keys, g):
    """``_attention_rows`` with the softmax as one compiled pass per score row (scale,
    key-padding mask, exact row maximum, exp, normalisation): ``mask`` None or
    (b, 1, 1, sk), f32."""
    nb, h, sq = q.shape[:3]
    sk = k.shape[2]
    scratch = _scratch((g, h, sq, sk), q.dtype)
    bits = np.empty(sk, np.int32)
    for b0 in range(0, nb, g):
        b1 = min(nb, b0 + g)
        n = sk if keys is None else int(keys[b0:b1].max())
        kb, vb = k[b0:b1, :, :n], v[b0:b1, :, :n]
        if groups > 1:
            kb = np.repeat(kb, groups, axis=1)
            vb = np.repeat(vb, groups, axis=1)
        buf = scratch.reshape(-1)[:(b1 - b0) * h * sq * n].reshape(b1 - b0, h, sq, n)
        np.matmul(q[b0:b1], kb.transpose(0, 1, 3, 2), out=buf)
        if mask is None:
            kernels.softmax_rows(buf.reshape(-1, n), scale, _NO_ROWS, h * sq, False, bits)
        else:
            mb = np.ascontiguousarray(mask[b0:b1, 0, 0, :n])
            kernels.softmax_rows(buf.reshape(-1, n), scale, mb, h * sq, True, bits)
        np.matmul(buf, vb, out=o[b0:b1])


_NO_ROWS = np.zeros((1, 0), np.float32)


def _packed_sequences(out, q, k, v, starts, scale, first, last):
    """Sequences ``first..last-1`` of packed self-attention: for each, all heads at once
    (q k^T, softmax, p v), the result written straight into its rows of ``out``."""
    h = q.shape[1]
    kernels = compiled() if q.dtype == np.float32 else None
    longest = int(np.max(np.diff(starts[first:last + 1]))) if last > first else 0
    scratch = _scratch((h, longest, longest), q.dtype)
    bits = np.empty(longest, np.int32)
    cd = q.dtype.type
    for i in range(first, last):
        s, e = int(starts[i]), int(starts[i + 1])
        n = e - s
        if n == 0:
            continue
        buf = scratch.reshape(-1)[:h * n * n].reshape(h, n, n)
        np.matmul(q[s:e].transpose(1, 0, 2), k[s:e].transpose(1, 2, 0), out=buf)
        if kernels is not None:
            kernels.softmax_rows(buf.reshape(-1, n), scale, _NO_ROWS, 1, False, bits)
        else:
            buf *= cd(scale)
            buf -= buf.max(axis=-1, keepdims=True)
            np.exp(buf, out=buf)
            buf /= buf.sum(axis=-1, keepdims=True)
        np.matmul(buf, v[s:e].transpose(1, 0, 2), out=out[s:e].transpose(1, 0, 2))


def _kept_keys(m, sk):
    """Per batch row, how many leading keys remain once the trailing keys that a
    key-padding mask (b, 1, 1, sk) hides with the dtype's lowest values are left out;
    None when that saves nothing (no such mask, or no such keys)."""
    if m is None or m.shape[1] != 1 or m.shape[2] != 1 or m.shape[3] != sk or sk == 0:
        return None
    dead = m[:, 0, 0, :] <= np.finfo(m.dtype).min / 2  # -inf, or extended_mask's min
    # Trailing dead keys: the first live key from the end; keep at least one key (a
    # fully masked row keeps its uniform softmax over all keys).
    live_from_end = np.argmax(~dead[:, ::-1], axis=1)
    keys = np.where(dead.all(axis=1), sk, sk - live_from_end)
    return None if (keys == sk).all() else keys


class CpuFused:
    """Fused ops of ``CpuStorage`` (softmax, norms, GELU, rope, linear, attention)."""

    __slots__ = ()

    def softmax_last_dim(self, layout):
        rows, cd = _rows(self, layout)
        out = _run(_softmax_chunk, np.empty(rows.shape, cd), rows)
        return _finish(self, out, layout.shape, self.dtype)

    def rms_norm(self, layout, alpha, alpha_layout, eps):
        rows, cd = _rows(self, layout)
        w = _vec(alpha, alpha_layout, cd)
        out = _run(_rms_chunk, np.empty(rows.shape, cd), rows, w, eps)
        return _finish(self, out, layout.shape, self.dtype)

    def layer_norm(self, layout, alpha, alpha_layout, beta, beta_layout, eps):
        rows, cd = _rows(self, layout)
        w = _vec(alpha, alpha_layout, cd)
        b = None if beta is None else _vec(beta, beta_layout, cd)
        out = _run(_ln_chunk, np.empty(rows.shape, cd), rows, w, b, eps)
        return _finish(self, out, layout.shape, self.dtype)

    def gelu_erf_fast(self, layout):
        """Exact-form GELU in the tensor's own precision (no f64 detour); |error| < 1e-6."""
        return self.bias_gelu_erf(layout, None, None)

    def bias_gelu_erf(self, layout, bias, bias_layout):
        """``GELU(x + bias)`` (exact erf form) in one pass; ``bias`` (n,) or None."""
        rows, cd = _rows(self, layout)
        b = None if bias is None else _vec(bias, bias_layout, cd)
        k = compiled()
        if k is None:
            if b is not None:
                rows = rows + b
            out = _run(_gelu_chunk, np.empty(rows.shape, cd), rows)
        else:
            has = b is not None
            b = _NO_VEC[cd] if b is None else np.ascontiguousarray(b)
            out = _row_split(lambda o, r: k.bias_gelu_rows(o, r, b, has),
                             np.empty(rows.shape, cd), np.ascontiguousarray(rows))
        return _finish(self, out, layout.shape, self.dtype)

    def add_layer_norm(self, layout, residual, residual_layout, bias, bias_layout,
                       alpha, alpha_layout, beta, beta_layout, eps):
        """``layer_norm(x + bias + residual) * alpha + beta`` over the last dim, one pass
        per row; ``bias`` and ``beta`` (n,) or None, ``residual`` x's shape."""
        rows, cd = _rows(self, layout)
        res, _ = _rows(residual, residual_layout)
        b = None if bias is None else _vec(bias, bias_layout, cd)
        w = _vec(alpha, alpha_layout, cd)
        be = None if beta is None else _vec(beta, beta_layout, cd)
        k = compiled()
        if k is None:
            x = rows + res
            if b is not None:
                x += b
            out = _run(_ln_chunk, np.empty(rows.shape, cd), x, w, be, eps)
        else:
            hb, hbe = b is not None, be is not None
            b = _NO_VEC[cd] if b is None else np.ascontiguousarray(b)
            be = _NO_VEC[cd] if be is None else np.ascontiguousarray(be)
            w = np.ascontiguousarray(w)
            out = _row_split(lambda o, r, rr: k.add_layer_norm_rows(o, r, rr, b, hb, w, be, hbe, eps),
                             np.empty(rows.shape, cd), np.ascontiguousarray(rows),
                             np.ascontiguousarray(res.astype(cd, copy=False)))
        return _finish(self, out, layout.shape, self.dtype)

    def rope(self, layout, cos, cos_layout, sin, sin_layout, interleaved):
        """x (b, h, t, d); cos/sin (t, d/2) or (b, t, d/2)."""
        x = self.view(layout)
        cd = _compute_dtype(self.dtype)
        if x.dtype != cd:
            x = x.astype(cd)
        c = _vec(cos, cos_layout, cd)
        sn = _vec(sin, sin_layout, cd)
        b, _h, t, d = x.shape
        half = d // 2
        if c.ndim == 3:
            c, sn = c[:, None], sn[:, None]
        out = np.empty(x.shape, cd)
        if interleaved:
            x0, x1 = x[..., 0::2], x[..., 1::2]
            o0, o1 = out[..., 0::2], out[..., 1::2]
        else:
            x0, x1 = x[..., :half], x[..., half:]
            o0, o1 = out[..., :half], out[..., half:]
        np.multiply(x0, c, out=o0)
        o0 -= x1 * sn
        np.multiply(x1, c, out=o1)
        o1 += x0 * sn
        return _finish(self, out, layout.shape, self.dtype)

    def relu_backward(self, layout, grad, grad_layout):
        """``grad * (x > 0)`` in one multiply by the boolean mask (NumPy casts it to
        1.0/0.0, so the products are the composed rule's); large inputs are left to the
        composed ops, which split across threads."""
        dtype = self.dtype
        if (dtype is not dt.f32 and dtype is not dt.f64) or grad.dtype is not dtype \
                or layout.count >= parallel.MIN_ELEMENTS:
            raise NotImplementedError
        x = self.view(layout)
        g = grad.view(grad_layout)
        out = np.empty(x.shape, x.dtype)
        kernels = onepass.module()
        if kernels is not None and onepass.takes(x, g):
            kernels.relu_grad(x, g, out)  # one pass, the same products
        else:
            np.multiply(g, x > 0, out=out)
        return self._wrap(out, dtype)

    def linear_backward(self, layout, weight, weight_layout, grad, grad_layout, wanted):
        """The protocol default's two products and column sum, by the same NumPy and
        kernel calls on the same operands (so the same bits), for f32/f64 without its
        storage round trips: one backend call per Linear layer of a backward pass."""
        dtype = self.dtype
        g = grad.view(grad_layout)
        if dtype not in _FLOAT or grad.dtype is not dtype or weight.dtype is not dtype \
                or (g.strides[0] == 0 and g.shape[0] > 1):  # a broadcast grad: the sum's copies path
            return BackendStorage.linear_backward(self, layout, weight, weight_layout, grad,
                                                  grad_layout, wanted)
        if CONFIG._applied is None:
            CONFIG.apply()
        want_x, want_w, want_b = wanted
        wrap = self._wrap
        gx = gw = gb = None
        if want_x:
            gx = wrap(gemm.matmul(*float_operands(g, weight, weight_layout, weight.view(weight_layout))), dtype)
        if want_w:
            gw = wrap(gemm.matmul(*float_operands(g.T, self, layout, self.view(layout))), dtype)
        if want_b:
            # np.sum's own call (the reduce kernel's), without its Python wrapper.
            gb = wrap(np.add.reduce(g, axis=(0,), dtype=dtype.np, keepdims=True), dtype)
        return gx, gw, gb

    def linear(self, layout, weight, weight_layout, bias, bias_layout):
        """``x @ w.T + b`` for x (..., k), w (n, k), b (n,) or None: one GEMM, bias added in place."""
        CONFIG.apply()
        x = self.view(layout)
        w = weight.view(weight_layout)
        dtype = self.dtype
        k = x.shape[-1]
        x2 = x.reshape(-1, k)
        if dtype in _HALF:
            y = gemm.matmul(x2.astype(np.float32), w.T.astype(np.float32))
        else:
            if x2.strides[-1] != x2.itemsize and x2.strides[0] != x2.itemsize:
                x2 = np.ascontiguousarray(x2)
            if w.strides[-1] != w.itemsize and w.strides[0] != w.itemsize:
                w = np.ascontiguousarray(w)
            bv = bias.view(bias_layout) if bias is not None else None
            if bv is not None and bv.dtype == x2.dtype == w.dtype:  # added in the product's epilogue
                y = gemm.matmul(x2, w.T, bias=bv)
                return _finish(self, y, layout.shape[:-1] + (w.shape[0],), dtype)
            y = gemm.matmul(x2, w.T)
        if bias is not None:
            bv = bias.view(bias_layout)
            y += bv.astype(y.dtype) if bv.dtype != y.dtype else bv
        return _finish(self, y, layout.shape[:-1] + (w.shape[0],), dtype)

    def attention_packed(self, layout, k, k_layout, v, v_layout, lengths, scale):
        """Self-attention over sequences packed one after another: q, k, v (tokens,
        heads, dim), ``lengths`` the tokens of each sequence; every token attends to its
        own sequence only. No padding, no mask; each sequence's heads are one batched
        product, and its context goes straight into the packed (tokens, heads, dim)
        result (no transposed copy)."""
        CONFIG.apply()
        dtype = self.dtype
        cd = _compute_dtype(dtype)
        q, kk, vv = self.view(layout), k.view(k_layout), v.view(v_layout)
        if q.dtype != cd:
            q, kk, vv = q.astype(cd), kk.astype(cd), vv.astype(cd)
        starts = np.concatenate(([0], np.cumsum(np.asarray(lengths, np.int64))))
        out = np.empty(q.shape[:2] + (vv.shape[-1],), cd)
        count = len(lengths)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            longest = int(max(lengths)) if count else 0
            parts = min(CONFIG.get(), count)
            if parts > 1 and parallel.worth_splitting((q.shape[0], q.shape[1], longest)):
                # Split the sequences where the quadratic work is halved.
                work = np.cumsum(np.diff(starts) ** 2)
                cuts = [0] + [int(np.searchsorted(work, work[-1] * j / parts)) + 1
                              for j in range(1, parts)] + [count]
                cuts = sorted(set(min(c, count) for c in cuts))
                run_pieces(lambda a, b: _packed_sequences(out, q, kk, vv, starts, scale, a, b),
                           list(zip(cuts[:-1], cuts[1:])), parts)
            else:
                _packed_sequences(out, q, kk, vv, starts, scale, 0, count)
        return _finish(self, out, out.shape, dtype)

    def attention(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale):
        """Scaled dot-product attention, one batch element at a time (the score matrix of
        one element stays in cache; the full (b, h, q, k) scores never exist).

        q (b, h, sq, d); k, v (b, hk, sk, d) with h a multiple of hk (grouped-query
        attention); mask None or additive, broadcastable to (b, h, sq, sk).
        """
        CONFIG.apply()
        dtype = self.dtype
        cd = _compute_dtype(dtype)
        q = self.view(layout)
        kk = k.view(k_layout)
        vv = v.view(v_layout)
        if q.dtype != cd:
            q, kk, vv = q.astype(cd), kk.astype(cd), vv.astype(cd)
        b, h, sq, d = q.shape
        groups = h // kk.shape[1]
        m = None
        if mask is not None:
            m = mask.view(mask_layout)
            if m.dtype != cd:
                m = m.astype(cd)
            # Keep the mask compact (a key-padding mask is (b, 1, 1, sk)): NumPy broadcasts
            # it when it is added, and the checks on it stay cheap. Only the batch dim is
            # made explicit, so the mask can be sliced like q.
            while m.ndim < 4:
                m = m[None]
            m = np.broadcast_to(m, (b,) + m.shape[1:])
        keys = _kept_keys(m, kk.shape[2])
        out = np.empty((b, h, sq, vv.shape[-1]), cd)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            if parallel.worth_splitting((b, h, sq, kk.shape[2])):
                extra = tuple(a for a in (m, keys) if a is not None)
                parallel.run_rows(lambda o, q_, k_, v_, *e: _attention_rows(
                    o, q_, k_, v_, e[0] if m is not None else None, scale, groups,
                    e[-1] if keys is not None else None),
                    out, q, kk, vv, *extra)
            else:
                _attention_rows(out, q, kk, vv, m, scale, groups, keys)
        return _finish(self, out, out.shape, dtype)
