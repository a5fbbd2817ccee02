"""The compiled CPU path of quantized matmul: ggml's block dot products, with numba.

Same semantics as :mod:`vec_dot` (and as candle's ``k_quants::matmul`` and
ggml's generic ``ggml_vec_dot_*``): each activation row is quantized to the
weight format's dot type, every block contributes ``scale * (exact integer
sum)``.  Here the integer sums come from a loop compiled by numba instead of
BLAS calls on small integers, over a weight layout built for it:

* **Tiles of J rows.**  The weight's small integers (one int8 per weight,
  unscaled: ``q - 8`` for Q4_0, the 6-bit values for Q6K, ...) are stored as
  ``(n / J, blocks, block_size, J)``: for one block position the ``J`` output
  rows are adjacent, so the innermost loop runs over rows with SIMD lanes and
  each activation value is a broadcast scalar.  The sub-block integer scales
  (K-quants), the minimums (Q2K, Q4K, Q5K) and the f32 block scales are
  tiled the same way.  1.06-1.25 bytes per weight (an f32 matrix takes 4).
* **Exact integer sums.**  The products of one sub-block (16 or 32 values,
  both factors small integers) are summed in float32, where every partial
  sum is an integer below 2**24 and therefore exact; the sub-block sums are
  then combined with the integer scales in int32, exactly as ggml's
  ``aux32``/``isum`` are.
* **ggml's float arithmetic.**  The scaled block terms are added in block
  order with ggml's association: ``(isum * d_w) * d_x`` (+ ``m_w * s_x`` for
  Q4_1/Q5_1) for the 32-element formats and Q8K, ``d_x d_w isum - d_x dmin_w
  msum`` for Q2K: bit for bit what candle's ``vec_dot_unopt`` and ggml's
  generic routines return.  Q3K-Q6K, where ggml keeps eight partial lanes
  per row, scale the whole super-block's integer sum at once instead (a
  difference of float rounding, ~1e-7 of the terms).  IQ4_NL is
  ``(d_w d_x) isum`` per block, as ggml's generic routine; IQ4_XS folds its
  sub-block scales into the integer sum like Q6K.

Each (activation row, output row) pair is computed by the same operations
whatever the batch size, tile split or thread count: results do not depend
on them.  Threads split the tiles (each writes its own output columns); the
kernel releases the GIL.  Compiled on first use, cached on disk by numba.

numba is optional: without it (or with ``TALLOW_NO_NUMBA=1``) quantized
matmul uses the NumPy path of :mod:`vec_dot`.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .... import config
from ....ggml.blocks import byte_blocks, f16_field, f16_round
from ....ggml.types import ggml_type
from ..threads import CONFIG
from ..native.pool import run_ranges
from ..pieces import activation_rows

F32 = np.float32

# Block combination modes (see the module doc).
LEGACY, OFFSET, KQUANT, KMIN = 0, 1, 2, 3

_state = {"checked": False, "kernel": None, "quantize": None, "error": None, "compile_seconds": None}
_lock = threading.Lock()


def numba_disabled() -> bool:
    """``TALLOW_NO_NUMBA`` is on (see tallow.config)."""
    return config.settings.no_numba


def available() -> bool:
    """True when the compiled path can be used (numba importable and not disabled)."""
    if numba_disabled():
        return False
    return _kernel() is not None


def status() -> dict:
    """What the compiled path is doing: usable, why not, and its first-use compile time."""
    usable = available()
    return {"numba": usable, "disabled": numba_disabled(), "error": _state["error"],
            "compile_seconds": _state["compile_seconds"]}


def _kernel():
    if _state["checked"]:
        return _state["kernel"]
    with _lock:
        if not _state["checked"]:
            try:
                _state["kernel"], _state["quantize"] = _build()
            except Exception as e:  # numba missing or broken: the NumPy path serves
                _state["error"] = f"{type(e).__name__}: {e}"
                _state["kernel"] = _state["quantize"] = None
            _state["checked"] = True
    return _state["kernel"]


def _build():
    from . import fast_kernels as fk

    t0 = time.perf_counter()
    _warm(fk.qmm_tiles, fk.quantize_rows)
    _state["compile_seconds"] = time.perf_counter() - t0
    return fk.qmm_tiles, fk.quantize_rows


def _warm(kernel, quantize_rows):
    """Compile (or load from numba's cache) the one signature every call uses."""
    z8 = np.zeros((1, 1, 32, 16), np.int8)
    e8 = np.zeros((1, 1, 0, 16), np.int8)
    f = np.zeros((1, 1, 16), F32)
    p8 = np.zeros((1, 1, 16, 16), np.uint8)
    ep = np.zeros((1, 1, 0, 16), np.uint8)
    for m in (1, 4):  # both row paths, both layouts
        x = np.zeros((m, 1, 32), F32)
        xd = np.zeros((m, 1), F32)
        xm = np.zeros((m, 1, 0), F32)
        out = np.zeros((m, 16), F32)
        kernel(z8, ep, 0, e8, f, e8, f, f, x, xd, xd, xd, xm, 0, 32, out, 0, 1)
        kernel(e8, p8, 8, e8, f, e8, f, f, x, xd, xd, xd, xm, 0, 32, out, 0, 1)
    x = np.zeros((1, 1, 256), F32)
    quantize_rows(x, 0, x.copy(), np.zeros((1, 1), F32), np.zeros((1, 1), np.int32), np.zeros((1, 1, 16), np.int32))


# ---------------------------------------------------------------- weight unpacking
def _decompose(t, blocks: np.ndarray) -> dict:
    """One format's blocks as ggml's vec_dot sees them (see the module doc).

    Returns q (n, B) int8 and d (n,) f32, plus as the format needs: sc (n, nsub)
    int8 sub-block scales, mins (n, nmin) int8 and dmin (n,) f32, m (n,) f32;
    ``packed`` for 4-bit values (0..15, stored two per byte), ``zero`` the
    offset subtracted from them (Q4_0's 8).
    """
    from ....ggml import kquants as kq
    from ....ggml import legacy as lg

    name = t.name
    nb = blocks.shape[0]
    out: dict = {"mode": LEGACY, "sub": 32}
    if name == "Q4_0":  # values 0..15 kept packed; the -8 is applied to the integer sum
        out.update(q=lg.nibbles(blocks[:, 2:]).astype(np.int8), d=f16_field(blocks, 0), zero=8, packed=True)
    elif name == "Q4_1":
        out.update(q=lg.nibbles(blocks[:, 4:]).astype(np.int8), d=f16_field(blocks, 0),
                   m=f16_field(blocks, 2), mode=OFFSET, packed=True)
    elif name == "Q5_0":
        q = lg.q5_values(blocks[:, 2:6], blocks[:, 6:]).astype(np.int8) - np.int8(16)
        out.update(q=q, d=f16_field(blocks, 0))
    elif name == "Q5_1":
        out.update(q=lg.q5_values(blocks[:, 4:8], blocks[:, 8:]).astype(np.int8), d=f16_field(blocks, 0),
                   m=f16_field(blocks, 2), mode=OFFSET)
    elif name == "Q8_0":
        out.update(q=np.ascontiguousarray(blocks[:, 2:]).view(np.int8), d=f16_field(blocks, 0))
    elif name == "Q8_1":  # Q8_1 x Q8_1 uses d and qs only
        out.update(q=np.ascontiguousarray(blocks[:, 4:]).view(np.int8), d=f16_field(blocks, 0))
    elif name == "Q8K":
        d, q, _ = kq.q8k_fields(blocks)
        out.update(q=q, d=d)
    elif name == "Q2K":
        sc = blocks[:, :16]
        out.update(q=kq.unpack_2bit(blocks[:, 16:80]).astype(np.int8), d=f16_field(blocks, 80),
                   sc=(sc & 0x0F).astype(np.int8), mins=(sc >> 4).astype(np.int8),
                   dmin=f16_field(blocks, 82), mode=KMIN)
    elif name == "Q3K":
        out.update(q=kq.q3_values(blocks), d=f16_field(blocks, 108), sc=kq.q3_scales(blocks[:, 96:108]),
                   mode=KQUANT)
    elif name in ("Q4K", "Q5K"):
        values = kq.unpack_4bit_32(blocks[:, 16:144]) if name == "Q4K" else kq.q5k_values(blocks)
        d, dmin, sc, mn = kq.k45_fields(blocks)
        out.update(q=values.reshape(nb, 256).astype(np.int8), d=d, sc=sc.astype(np.int8),
                   mins=mn.astype(np.int8), dmin=dmin, mode=KMIN, packed=name == "Q4K")
    elif name == "Q6K":
        out.update(q=kq.q6_values(blocks), d=f16_field(blocks, 208),
                   sc=np.ascontiguousarray(blocks[:, 192:208]).view(np.int8), mode=KQUANT)
    elif name in ("IQ4_NL", "IQ4_XS"):  # non-linear levels; ggml scales (d_w d_x) * isum
        from ....ggml import iq4

        if name == "IQ4_NL":
            out.update(q=iq4.iq4_nl_levels(blocks), d=f16_field(blocks, 0), mode=KQUANT)
        else:
            out.update(q=iq4.iq4_xs_levels(blocks), d=f16_field(blocks, 0), sc=iq4.iq4_xs_scales(blocks),
                       mode=KQUANT)
    else:
        raise ValueError(f"{name} has no compiled quantized matmul")
    for key in ("d", "m", "dmin"):
        if key in out:
            out[key] = np.ascontiguousarray(out[key], dtype=F32).reshape(nb)
    return out


def tile_width(n: int) -> int:
    """Rows per tile: 64 (a multiple of every SIMD width), fewer for small weights."""
    for j in (64, 32):
        if n >= 4 * j:
            return j
    return 16


def _tiles(a: np.ndarray, n: int, per_row: int, jw: int) -> np.ndarray:
    """(n * per_row, *rest) -> (tiles, per_row, *rest, jw), rows padded with zeros."""
    rest = a.shape[1:]
    a = a.reshape((n, per_row) + rest)
    pad = -n % jw
    if pad:
        a = np.concatenate([a, np.zeros((pad, per_row) + rest, a.dtype)])
    tiles = a.shape[0] // jw
    a = a.reshape((tiles, jw, per_row) + rest)
    order = (0, 2) + tuple(range(3, a.ndim)) + (1,)
    return np.ascontiguousarray(a.transpose(order))


class TiledWeight:
    """A ``(n, k)`` quantized weight in the tiled layout of the compiled kernel."""

    def __init__(self, raw, w_type, n: int, k: int):
        t = ggml_type(w_type)
        if t.is_float:
            raise ValueError(f"{t.name} weights are plain float matrices, not tiled")
        if n < 0 or k <= 0 or k % t.block_size:
            raise ValueError(f"{t.name} weight: k={k} must be a positive multiple of the block size {t.block_size}")
        self.type, self.n, self.k = t, n, k
        self.dot = t.dot_type
        blocks = byte_blocks(raw, n * k, t.block_size, t.type_size, t.name)
        parts = _decompose(t, blocks)
        per_row = k // t.block_size
        self.mode, self.sub = parts["mode"], parts["sub"]
        self.jw = jw = tile_width(n)
        self.tiles = -(-n // jw)
        self.zero = int(parts.get("zero", 0))
        wq = _tiles(parts["q"].reshape(-1, t.block_size), n, per_row, jw)
        if parts.get("packed"):
            # values 0..15: element 2u in the low nibble of byte u, 2u + 1 in the high one
            lo, hi = wq[:, :, 0::2].view(np.uint8), wq[:, :, 1::2].view(np.uint8)
            self.wp = np.ascontiguousarray(lo | (hi << 4))
            self.wq = np.zeros((self.tiles, per_row, 0, jw), np.int8)
        else:
            self.wq = wq
            self.wp = np.zeros((self.tiles, per_row, 0, jw), np.uint8)
        self.wd = _tiles(parts["d"], n, per_row, jw)
        empty8 = np.zeros((self.tiles, per_row, 0, jw), np.int8)
        zf = np.zeros((self.tiles, per_row, jw), F32)
        self.wsc = _tiles(parts["sc"], n, per_row, jw) if "sc" in parts else empty8
        self.wmin = _tiles(parts["mins"], n, per_row, jw) if "mins" in parts else empty8
        self.wdmin = _tiles(parts["dmin"], n, per_row, jw) if "dmin" in parts else zf
        self.wm = _tiles(parts["m"], n, per_row, jw) if "m" in parts else zf
        self._shared_zeros = zf

    @property
    def nbytes(self) -> int:
        """Memory held by the tiled form (the padding rows included)."""
        arrays = [self.wq, self.wp, self.wd, self.wsc, self.wmin]
        for a in (self.wdmin, self.wm):
            if a is not self._shared_zeros:
                arrays.append(a)
        return sum(a.nbytes for a in arrays)

    def quantize_activations(self, x: np.ndarray):
        """``x`` (m, k) -> (xf (m, nb, B) f32 integers, xd (m, nb) scales, xs (m, nb) Q8_1 sums,
        xsum (m, nb) integer block sums, xms (m, nb, nmin) partial sums for the minimums).

        Compiled, with the same results as the NumPy codecs of the dot type
        (which serve for non-finite inputs).
        """
        t = self.type
        m, k = x.shape
        nb = k // t.block_size
        quantize_rows = _state["quantize"]
        if quantize_rows is not None:
            bs = t.block_size
            xb = np.ascontiguousarray(x, dtype=F32).reshape(m, nb, bs)
            xf = np.empty((m, nb, bs), F32)
            xd = np.empty((m, nb), F32)
            xsum = np.zeros((m, nb), np.int32)
            xbs = np.zeros((m, nb, bs // 16), np.int32)
            kind = 1 if self.dot.name == "Q8K" else 0
            if quantize_rows(xb, kind, xf, xd, xsum, xbs):
                xs = np.zeros((m, nb), F32)
                if kind == 0:
                    if self.dot.name == "Q8_1":  # ggml's s: f16(sum * d), d before its f16 rounding
                        xs = f16_round(xsum.astype(F32) * xd)
                    xd = f16_round(xd)  # the block's stored d
                return xf, xd, xs, xsum.astype(F32), self._min_sums(xbs)
        return self._quantize_activations_numpy(x)

    def _min_sums(self, bsums: np.ndarray) -> np.ndarray:
        """The activation's partial sums the weight's minimums multiply (Q8K bsums, paired for Q4K/Q5K)."""
        m, nb = bsums.shape[:2]
        nmin = self.wmin.shape[2]
        if not nmin:
            return np.zeros((m, nb, 0), F32)
        sums = bsums.astype(np.int32).reshape(m, nb, 16)
        if nmin == 8:  # Q4K/Q5K minimums cover 32 values: two bsums each
            sums = sums.reshape(m, nb, 8, 2).sum(axis=-1)
        return np.ascontiguousarray(sums, dtype=F32)

    def _quantize_activations_numpy(self, x: np.ndarray):
        t, dot = self.type, self.dot
        m, k = x.shape
        nb = k // t.block_size
        raw = dot.quantize_activations(x).reshape(-1, dot.type_size)
        a = dot.act_planes(raw)
        xf = a.q.reshape(m, nb, t.block_size).astype(F32)
        xd = np.ascontiguousarray(a.gscale[:, 0].reshape(m, nb), dtype=F32)
        xs = np.zeros((m, nb), F32) if a.s is None else np.ascontiguousarray(a.s.reshape(m, nb), dtype=F32)
        xms = self._min_sums(a.sums16.reshape(m, nb, 16)) if self.wmin.shape[2] else np.zeros((m, nb, 0), F32)
        xsum = xf.sum(axis=2, dtype=F32)  # integers below 2**24: exact
        return xf, xd, xs, xsum, xms

    def matmul_t(self, x: np.ndarray, num_threads: int | None = None) -> np.ndarray:
        """``x @ W.T`` for ``x`` (..., k), ggml semantics (see the module doc)."""
        kernel = _kernel()
        if kernel is None:
            raise RuntimeError(f"the compiled quantized matmul is not available ({_state['error']})")
        x2, lead = activation_rows(x, self.n, self.k)
        m = x2.shape[0]
        if m == 0 or self.n == 0:
            return np.zeros(lead + (self.n,), F32)
        xf, xd, xs, xsum, xms = self.quantize_activations(x2)
        out = np.empty((m, self.tiles * self.jw), F32)
        args = (self.wq, self.wp, self.zero, self.wsc, self.wd, self.wmin, self.wdmin, self.wm,
                xf, xd, xs, xsum, xms, self.mode, self.sub, out)
        threads = num_threads or CONFIG.get()
        work = m * self.n * self.k
        # A thread is worth its hand-off only for a few hundred microseconds of work.
        threads = max(1, min(threads, self.tiles, work >> 21))
        if threads == 1:
            kernel(*args, 0, self.tiles)
        else:
            # Several pieces per thread, taken as threads free up, the calling thread
            # among them: a core busy with other work (another process, BLAS threads
            # still spinning after a product) delays a piece, not half of the product.
            count = threads * (4 if work >= 1 << 24 else 1)
            run_ranges(lambda a, b: kernel(*args, a, b), self.tiles, threads, count)
        if out.shape[1] != self.n:
            out = np.ascontiguousarray(out[:, : self.n])
        return out.reshape(lead + (self.n,))
