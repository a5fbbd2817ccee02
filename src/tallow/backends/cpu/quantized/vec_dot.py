"""Quantized matrix products with ggml's semantics: ``x @ W.T`` for a block-quantized ``W``.

What ``QMatMul`` computes in candle and llama.cpp (``ggml_vec_dot_*``, the
generic routines): each activation row is first quantized to the weight
format's *dot type* (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8K for the
K-quants), then every block pair contributes ``d_w * d_x * (integer sum of
q_w * q_x)``.  That is not ``x @ dequantize(W).T``: the activation rounding
is part of the result (about 1e-3 relative for 8-bit activations).

How it is made fast without changing that: the integer sums of one 32-wide
group are exact in float32 (see :mod:`planes` for the bound), so all of them
are computed by BLAS on small integers held in float32, group by group
(``(G, n, 32) @ (G, 32, m)``), and the float scales are applied afterwards.
Only the order in which the scaled group terms are added differs from
candle's loop; that is rounding at the 1e-7 level, not a change of method.

The weight is unpacked once into a :class:`PreparedWeight` (the
Tensor-level ``QTensor`` keeps one per weight).  Its ``layout`` is the
memory/speed trade-off:

* ``"int"`` (default): the integers stay int8 (int16 for Q3K/Q6K), 1.1-2.3
  bytes per weight; each product casts a few groups at a time to float32.
* ``"f32"``: the same integers cached as float32 (4.1-4.6 bytes per weight),
  no cast per product.
* ``"dequantized"``: the dequantized float32 matrix (4 bytes per weight).  The
  activations are still quantized to the dot type, so the products are
  ggml's, but each one is a single float32 GEMM: the block sums are rounded
  float sums instead of exact integer sums (differences ~1e-7 relative, the
  size of candle's own float accumulation error), at f32-GEMM speed.

``matmul_t_dequantized`` is the other path (candle's ``DequantizeAll``):
dequantize the whole matrix and use a float32 GEMM, with no activation rounding.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from ....ggml.blocks import byte_blocks
from ....ggml.planes import GROUP
from ....ggml.types import GgmlType, ggml_type
from ..native.pool import run_pieces, split as _split
from ..pieces import activation_rows
from ..threads import CONFIG

F32 = np.float32
# Elements of float32 scratch per work item (the cast group chunk, or the
# (groups, rows, n) sums): 4 MiB, few enough calls that their overhead vanishes.
_CHUNK = 1 << 20
# Activation rows handled together: bounds the (groups, rows, n) scratch.
_ROWS = 64
# Groups added to the output per step; fixed so results do not depend on batch size.
_ACC = 8

_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter = None
_blas_controller = None


@contextmanager
def single_threaded_blas():
    """Run BLAS on one thread while the integer path parallelises by itself.

    Its BLAS calls are many small products; BLAS's own threads add nothing
    there and, on busy cores, their spin-waiting costs 10-20x.  The BLAS
    thread count is process-wide, so overlapping callers share one limit and
    the last one out restores the original setting.
    """
    global _blas_users, _blas_limiter, _blas_controller
    with _blas_lock:
        if _blas_users == 0:
            if _blas_controller is None:
                from threadpoolctl import ThreadpoolController

                _blas_controller = ThreadpoolController()  # scans the loaded libraries once
            _blas_limiter = _blas_controller.limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0 and _blas_limiter is not None:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


class PreparedWeight:
    """A ``(n, k)`` weight of one GGML type in the integer form quantized matmul uses.

    ``raw`` is the weight's GGML blocks, row-major (row ``j`` is ``W[j, :]``),
    as ``QTensor.to_bytes()`` or a GGUF tensor holds them.  Float types (F32,
    F16, BF16) are kept as a float32 matrix, as candle's QMatMul does.
    """

    LAYOUTS = ("int", "f32", "dequantized")

    def __init__(self, raw, w_type, n: int, k: int, layout: str = "int"):
        t = ggml_type(w_type)
        if layout not in self.LAYOUTS:
            raise ValueError(f"layout must be one of {self.LAYOUTS}, not {layout!r}")
        if n < 0 or k <= 0 or k % t.block_size:
            raise ValueError(f"{t.name} weight: k={k} must be a positive multiple of the block size {t.block_size}")
        self.type, self.n, self.k, self.layout = t, n, k, layout
        blocks = byte_blocks(raw, n * k, t.block_size, t.type_size, t.name)
        self.dense: np.ndarray | None = None
        self.mins_width = 0
        p = None if t.is_float else t.planes(blocks)
        self.offset = None if p is None or p.offset is None else np.ascontiguousarray(p.offset.reshape(n, -1), F32)
        if t.is_float or layout == "dequantized":
            self.dense = t.dequantize(blocks, n * k).reshape(n, k)
            return
        g = k // GROUP
        per_row = k // t.block_size
        # (G, n, 32): one contiguous (n, 32) matrix per group, so each group's
        # integer sums are one BLAS call on contiguous memory.
        parts = [p.q.reshape(n, g, GROUP).transpose(1, 0, 2)]
        scales = [p.gscale.reshape(n, g).T]
        if p.mins is not None:
            # The sub-block minimums become one extra group per block, paired
            # with the activation's partial sums (see planes.py).
            u = p.mins.shape[1]
            self.mins_width = u
            mins = np.zeros((per_row, n, GROUP), dtype=p.q.dtype)
            mins[:, :, :u] = p.mins.reshape(n, per_row, u).transpose(1, 0, 2)
            parts.append(mins)
            scales.append(p.mscale.reshape(n, per_row).T)
        dtype = F32 if layout == "f32" else p.q.dtype
        self.planes = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=dtype)
        self.wscale = np.ascontiguousarray(np.concatenate(scales, axis=0), dtype=F32)  # (G', n)

    @property
    def nbytes(self) -> int:
        """Memory held by the prepared form."""
        extra = 0 if self.offset is None else self.offset.nbytes
        if self.dense is not None:
            return self.dense.nbytes + extra
        return self.planes.nbytes + self.wscale.nbytes + extra

    # ------------------------------------------------------------ activations
    def quantize_activations(self, x: np.ndarray):
        """Rows of ``x`` in the dot type's integer form, laid out like the weight's groups.

        Returns ``(xplanes (G', m, 32) float32, xscale (m, G') float32, s (m, G) or None)``.
        """
        t, dot = self.type, self.type.dot_type
        m, k = x.shape
        raw = dot.quantize_activations(x).reshape(-1, dot.type_size)
        a = dot.act_planes(raw)
        g = k // GROUP
        parts = [a.q.reshape(m, g, GROUP).transpose(1, 0, 2)]
        scales = [a.gscale.reshape(m, g)]
        if self.mins_width:
            per_row = k // t.block_size
            sums = a.sums16.astype(np.int32)
            if self.mins_width == 8:  # Q4K/Q5K minimums cover 32 values: two bsums each
                sums = sums.reshape(-1, 8, 2).sum(axis=-1)
            virt = np.zeros((per_row, m, GROUP), dtype=F32)
            virt[:, :, : self.mins_width] = sums.reshape(m, per_row, self.mins_width).transpose(1, 0, 2)
            parts.append(virt)
            scales.append(a.gscale[:, 0].reshape(m, per_row))
        xplanes = np.concatenate(parts, axis=0).astype(F32)
        xscale = np.ascontiguousarray(np.concatenate(scales, axis=1), dtype=F32)
        s = None if a.s is None else a.s.reshape(m, g)
        return xplanes, xscale, s

    # ------------------------------------------------------------ products
    def matmul_t(self, x: np.ndarray, num_threads: int | None = None) -> np.ndarray:
        """``x @ W.T`` with ggml's quantized-activation semantics; ``x`` is ``(..., k)``."""
        x2, lead = activation_rows(x, self.n, self.k)
        if self.type.is_float:
            out = x2 @ self.dense.T
        elif self.dense is not None:
            out = self._matmul_dequantized(x2)
        elif x2.shape[0] == 0 or self.n == 0:
            out = np.zeros((x2.shape[0], self.n), F32)
        else:
            out = self._matmul_planes(x2, num_threads or CONFIG.get())
        return out.reshape(*lead, self.n)

    def _matmul_dequantized(self, x: np.ndarray) -> np.ndarray:
        dot = self.type.dot_type
        raw = dot.quantize_activations(x)
        xq = dot.dequantize(raw).reshape(x.shape)  # the activation ggml multiplies with
        out = xq @ self.dense.T
        if self.offset is not None:
            # ggml adds m_w * s_x with Q8_1's stored s = f16(sum q * d); the
            # dense product used the exact d * sum q.  Add the difference.
            a = dot.act_planes(raw.reshape(-1, dot.type_size))
            exact = (a.q.astype(F32).reshape(x.shape[0], -1, GROUP).sum(axis=-1)) * a.gscale.reshape(x.shape[0], -1)
            out += np.matmul((a.s.reshape(exact.shape) - exact)[:, None, :], self.offset.T)[:, 0, :]
        return out

    def _matmul_planes(self, x: np.ndarray, threads: int) -> np.ndarray:
        xplanes, xscale, s = self.quantize_activations(x)
        groups = self.planes.shape[0]
        ranges = _split(groups, min(threads, -(-groups // _ACC)), _ACC)
        with single_threaded_blas():
            if len(ranges) == 1:
                partials = [self._partial(xplanes, xscale, 0, groups)]
            else:
                partials = [None] * len(ranges)

                def part(i, a, b):
                    partials[i] = self._partial(xplanes, xscale, a, b)

                run_pieces(part, [(i, a, b) for i, (a, b) in enumerate(ranges)], len(ranges))
        out = partials[0]
        for p in partials[1:]:
            out += p
        if self.offset is not None:
            # Q4_1/Q5_1: sum_b m_w[b] * s_x[b], one (1, G) @ (G, n) product per row
            # (a single (m, G) GEMM would round differently for different m).
            out += np.matmul(s[:, None, :], self.offset.T)[:, 0, :]
        return out

    def _chunk_groups(self, rows: int) -> int:
        """Groups whose integer sums are computed by one call (a multiple of _ACC).

        Any size gives the same exact sums; it only bounds the float32
        scratch: the cast planes (int planes) and the (groups, rows, n) sums.
        """
        limit = _CHUNK // (self.n * rows)
        if self.planes.dtype != F32:
            limit = min(limit, _CHUNK // (self.n * GROUP))
        return max(_ACC, limit // _ACC * _ACC)

    def _partial(self, xplanes, xscale, a: int, b: int) -> np.ndarray:
        """Contribution of groups ``a:b`` to every output row."""
        m = xplanes.shape[1]
        out = np.zeros((m, self.n), dtype=F32)
        cast = self.planes.dtype != F32
        for r0 in range(0, m, _ROWS):
            r1 = min(m, r0 + _ROWS)
            step = self._chunk_groups(r1 - r0)
            buf = np.empty((step,) + self.planes.shape[1:], dtype=F32) if cast else None
            for lo in range(a, b, step):
                hi = min(b, lo + step)
                wp = self.planes[lo:hi]
                if cast:
                    np.copyto(buf[: hi - lo], wp, casting="unsafe")
                    wp = buf[: hi - lo]
                if r1 - r0 == 1:  # (n, 32) @ (32, 1) per group: matrix-vector products
                    sums = np.matmul(wp, xplanes[lo:hi, r0, :, None])[..., 0][:, None, :]
                else:  # (rows, 32) @ (32, n) per group
                    sums = np.matmul(xplanes[lo:hi, r0:r1], wp.transpose(0, 2, 1))
                # sums[g, i, j] are exact integer group sums; now the float scales.
                sums *= self.wscale[lo:hi, None, :]
                # Accumulate _ACC groups at a time, aligned to multiples of _ACC,
                # so every row sees the same additions whatever the batch.
                for g0 in range(lo, hi, _ACC):
                    g1 = min(hi, g0 + _ACC)
                    part = sums[g0 - lo : g1 - lo].transpose(1, 0, 2)
                    out[r0:r1] += np.matmul(xscale[r0:r1, None, g0:g1], part)[:, 0, :]
        return out


def prepare_weight(w_raw, w_type, n: int, k: int, layout: str = "int") -> PreparedWeight:
    """Unpack a weight once for repeated :meth:`PreparedWeight.matmul_t` calls."""
    return PreparedWeight(w_raw, w_type, n, k, layout=layout)


def matmul_t(x: np.ndarray, w_raw, w_type, n: int, k: int, num_threads: int | None = None) -> np.ndarray:
    """``x @ W.T`` for ``x`` float32 ``(m, k)`` (or ``(..., k)``) and ``W`` given as GGML blocks ``(n, k)``.

    ggml/candle semantics: activations quantized to the dot type, exact
    integer block sums, then the scales.  Prepares the weight on every call;
    keep a :class:`PreparedWeight` to multiply by the same weight repeatedly.
    """
    return PreparedWeight(w_raw, w_type, n, k).matmul_t(x, num_threads=num_threads)


def matmul_t_dequantized(x: np.ndarray, w_raw, w_type, n: int, k: int) -> np.ndarray:
    """``x @ dequantize(W).T`` in float32: no activation quantization (candle's DequantizeAll)."""
    t: GgmlType = ggml_type(w_type)
    w = t.dequantize(w_raw, n * k).reshape(n, k)
    x = np.asarray(x, dtype=F32)
    if x.shape[-1:] != (k,):
        raise ValueError(f"matmul_t_dequantized: x has shape {x.shape}, expected (..., {k})")
    return x @ w.T
