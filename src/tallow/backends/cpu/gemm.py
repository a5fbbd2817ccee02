"""Float matrix products under tallow's thread policy.

f32 products go to tallow's own kernel (``native/_gemm.c``) when it is built:
packed B panels, a 6x16 AVX2+FMA register tile, operands read through any
strides (transposed, sliced and broadcast views need no copy), split over the
compiled worker pool (a hand-off of a few microseconds) only while the machine
has a CPU to spare. Its results are bit-identical at any thread count, and the
choice of path depends on the shape alone: it takes the products the BLAS path
below never splits (under ``2 * SPLIT_MIN`` multiply-adds) that are large enough
for its pool to split (``_gemm.split_min()``, 2^18), smaller ones where it
measured at least as fast as NumPy's OpenBLAS (:func:`native_wins_alone`), and,
up to 2^27, the wide ones the BLAS path would split (:func:`native_splits_better`:
a convolution layer's products, where the kernel's split scaled better). Thin and
larger products keep the BLAS path's split (docs/design.md, "Thread policy", has
the figures).

Other products (f64, f16/bf16 widened by the callers to f32 aside, a missing
native module, ``TALLOW_NO_NATIVE_GEMM``) take the BLAS path. OpenBLAS's worker
threads spin-wait inside and between products. With one other CPU-bound
process on the machine, a multi-threaded BLAS product waits on a worker that is
not running (and the spinning workers take the time the others need): docs/design.md
("Thread policy") has the figures. So NumPy's BLAS is kept on one thread
(``threads.CONFIG.apply``) and tallow decides per product:

* matrix-vector products, and products under ``SPLIT_MIN`` multiply-adds per
  thread, are one BLAS call on the calling thread: a hand-off to another
  thread costs more than they take, and a busy core cannot stall them;
* larger ones are cut into blocks of the output (row blocks when the lhs has
  at least as many rows as the rhs has columns, else column blocks; whole
  matrices of the leading batch dim when both are too narrow to cut), each
  block one single-threaded BLAS call. ``PIECES_PER_THREAD`` blocks per thread
  (one for very large products) are handed out as threads free up
  (:func:`native.pool.run_pieces`): the calling thread works too, and a core taken
  by another process delays at most the block it holds.
"""

from __future__ import annotations

import platform

import numpy as np

from ... import config
from . import parallel
from .native import loader
from .native.pool import run_pieces, sync_threads
from .threads import CONFIG

# Where the native kernel is used on one thread (not split): OpenBLAS is faster on
# thin products (few rows or columns: im2col products of a first convolution layer,
# 1.2-1.5x), on a long k (several K chunks: 1.3x), and from ~512^3 (1024^3: 24 ms
# against 29 ms). Split products always use it.
NATIVE_MIN_ROWS = 48
NATIVE_MIN_COLS = 64
NATIVE_MAX_K = 512
NATIVE_MAX = 1 << 27

# tallow's own f32 kernel (an optional C extension), loaded at the first product: the
# native package imports parts of tallow that import this module.
_native = None
_native_on = None  # None: not loaded yet


# Machines whose vector units tallow's own f32 kernel is written for (AVX2/AVX-512, with
# a portable build for x86 without them); every other machine multiplies with the
# system BLAS, which is tuned for it (OpenBLAS or Accelerate on aarch64).
X86_MACHINES = ("x86_64", "amd64", "i386", "i686", "x86")


def product_kernel(machine: str | None = None) -> str:
    """Which kernel multiplies f32 matrices here: ``"native"`` (tallow's own) on x86 when
    it is built and not switched off (``TALLOW_NO_NATIVE_GEMM``, ``TALLOW_NO_NATIVE``),
    else ``"blas"`` (NumPy's matmul).  ``machine``: ``platform.machine()``'s answer."""
    if (machine or platform.machine()).lower() not in X86_MACHINES:
        return "blas"
    if config.settings.no_native_gemm or config.settings.no_native:
        return "blas"
    return "native" if loader.built("_gemm") is not None else "blas"


def _load_native() -> None:
    global _native, _native_on
    _native = loader.built("_gemm")  # (switched to TALLOW_NATIVE_ISA's builds by the loader)
    _native_on = product_kernel() == "native"


def native_available() -> bool:
    """Whether f32 products use tallow's own kernel (built, and not switched off)."""
    if _native_on is None:
        _load_native()
    return _native_on


def set_native(on: bool) -> bool:
    """Use (True) or not (False) the native f32 kernel; returns the previous setting.
    Turning it on without the built module raises ``RuntimeError``."""
    global _native_on
    native_available()
    if on and _native is None:
        raise RuntimeError("tallow's native gemm module is not built (python setup.py build_ext --inplace)")
    previous, _native_on = _native_on, bool(on)
    return previous


# BLAS path: multiply-adds a thread must get before a product is split (~0.2 ms of one core's BLAS
# here; docs/design.md): below, the hand-off (12-20 µs, more when the other core is
# busy) and a worker that waits for a core cost more than the second thread saves.
# Every matrix product of a Linear layer with a batch of 64 and widths up to 256 stays
# on the calling thread.
SPLIT_MIN = 1 << 23
PIECES_PER_THREAD = 2
# From this many multiply-adds per thread (~3 ms), one block per thread: each block
# repacks one whole operand, and over blocks this long the scheduler's time slices
# even the threads out anyway.
ONE_BLOCK_PER_THREAD = 1 << 27
ALIGN = 32  # block edges on multiples of BLAS's register tiles


def _edges(total: int, parts: int):
    units = -(-total // ALIGN)
    parts = max(1, min(parts, units))
    cuts = [min(total, (units * i // parts) * ALIGN) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def plan(m: int, n: int, k: int, batch: int = 1) -> int:
    """Threads for a ``batch`` x (m, k) @ (k, n) product under the policy (1: not split)."""
    threads = CONFIG.get()
    if threads <= 1 or m <= 1 or n <= 1:  # matrix-vector: memory-bound, on the caller
        return 1
    work = batch * m * n * k
    return max(1, min(threads, work // SPLIT_MIN))


def _native_matmul(a, b, batch_shape, batch, m, n, k, out, bias, split):
    """``a @ b (+ bias)`` by the native kernel into ``out`` (made when None)."""
    if out is None:
        out = np.empty(batch_shape + (m, n), np.float32)
    if len(batch_shape) > 1:  # the kernel takes one batch dim: merge (views unless broadcast)
        a = a.reshape(a.shape[-2:]) if a.size == m * k else np.broadcast_to(a, batch_shape + (m, k)).reshape(batch, m, k)
        b = b.reshape(b.shape[-2:]) if b.size == k * n else np.broadcast_to(b, batch_shape + (k, n)).reshape(batch, k, n)
        c = out.reshape(batch, m, n)
    else:
        c = out
    if _narrow_and_tall(m, n):
        # Too narrow for the kernel's 16-column panels (a 7x7 image's 49 positions use
        # 77% of four) but tall: computed as (B^T A^T)^T, whose 49 rows fill 6-row
        # tiles, then transposed into place (m * n values against m * n * k products).
        ct = np.empty(c.shape[:-2] + (n, m), np.float32)
        _native.gemm(b.swapaxes(-1, -2), a.swapaxes(-1, -2), ct, False, None, split)
        # (tiled in C, over the threads: NumPy's copy took 8% of a 7x7 layer's input gradient)
        parallel.transpose_into(c, ct.swapaxes(-1, -2))
        if bias is not None:
            c += bias
        return out
    _native.gemm(a, b, c, False, bias, split)
    return out


def _narrow_and_tall(m: int, n: int) -> bool:
    """Whether the kernel computes a product transposed, ``(B^T A^T)^T``: 48-63
    columns (a 7x7 image's 49 positions) and at least 64 rows."""
    return n < NATIVE_MIN_COLS and n >= NATIVE_MIN_ROWS and m >= NATIVE_MIN_COLS


def _pool_threads() -> int:
    """tallow's thread setting, the pool sized to it (cheap when unchanged)."""
    return sync_threads()


def _batch_shape(a_batch: tuple, b_batch: tuple) -> tuple:
    """``np.broadcast_shapes`` of two batch shapes (that costs microseconds per call)."""
    if a_batch == b_batch or not b_batch:
        return a_batch
    if not a_batch:
        return b_batch
    rank = max(len(a_batch), len(b_batch))
    a_batch = (1,) * (rank - len(a_batch)) + a_batch
    b_batch = (1,) * (rank - len(b_batch)) + b_batch
    out = []
    for x, y in zip(a_batch, b_batch):
        if x != y and x != 1 and y != 1:
            return np.broadcast_shapes(a_batch, b_batch)  # raises NumPy's error
        out.append(y if x == 1 else x)
    return tuple(out)


def native_wins_alone(m: int, n: int, k: int, work: int) -> bool:
    """Whether the native kernel on one thread is at least as fast as OpenBLAS's for
    this shape (measured, docs/design.md): the products of a Linear layer and its
    gradients, square ones up to ~512^3. Thin ones (few rows or columns, a long k)
    stay on BLAS when not split."""
    return m >= NATIVE_MIN_ROWS and n >= NATIVE_MIN_COLS and k <= NATIVE_MAX_K and work <= NATIVE_MAX


def native_splits_better(m: int, n: int, work: int) -> bool:
    """Whether a product the BLAS path would split (from ``2 * SPLIT_MIN`` multiply-adds)
    goes to the native kernel instead: at least 48 rows and 64 columns, or 48-63
    columns and 64+ rows (computed transposed), up to ``NATIVE_MAX`` (the products of
    convolution layers). On one thread the kernel takes 1.0-1.15x OpenBLAS's time
    there; split, 0.5-0.75x of it, where the BLAS path's split over Python threads
    reached 0.75-1.0x beside the rest of a convolution, or more than one thread's
    time (docs/design.md, "Thread policy"). Thinner and larger products keep the BLAS
    path."""
    return ((m >= NATIVE_MIN_ROWS and n >= NATIVE_MIN_COLS) or _narrow_and_tall(m, n)) and work <= NATIVE_MAX


def _native_shape(m: int, n: int, k: int, work: int) -> bool:
    # The path depends on the shape alone, never on the thread count or the load, so
    # that a product gives the same bits at 1 and 2 threads, split or not: products the
    # BLAS path never splits (under 2 * SPLIT_MIN) and large enough for the compiled
    # pool to split go to the kernel, as do smaller ones where it beats BLAS alone, and
    # the wide ones of convolution layers up to NATIVE_MAX. Thin and larger products
    # keep the BLAS path's split, faster there (docs/design.md).
    if work >= 2 * SPLIT_MIN:
        return native_splits_better(m, n, work)
    return work >= _native.split_min() or native_wins_alone(m, n, k, work)


def native_takes(m: int, n: int, k: int, batch: int = 1) -> bool:
    """Whether an f32 ``batch`` x (m, k) @ (k, n) product runs on the native kernel
    (callers choose their layout by it: a batch of per-image products needs no
    transposed copies there, where BLAS wants one product over the batch)."""
    if _native_on is None:
        _load_native()
    return bool(_native_on) and _native_shape(m, n, k, batch * m * n * k)


def sum_of_products(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = a[0] @ b[0] + a[1] @ b[1] + ...`` for f32 ``a`` (n, ..., m, k) and ``b``
    (n, ..., k, p) of any strides, by the native kernel adding each product into
    ``out`` (C-contiguous f32, (..., m, p)) in order: a batch-summed product (a
    convolution's kernel gradient) with no transposed copy of either operand.
    ``native_available()`` must be true."""
    split = not parallel.in_serial() and _pool_threads() > 1
    gemm = _native.gemm
    for i in range(a.shape[0]):
        gemm(a[i], b[i], out, i > 0, None, split)
    return out


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
           bias: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b)`` for float arrays (``+ bias``, a row of ``n`` values, when
    given), on tallow's own kernel for f32, else BLAS split across tallow's threads
    when large.

    ``out``: a C-contiguous array of the result's shape and dtype to write into (the
    result is then ``out``); it must not overlap ``a`` or ``b``.
    """
    if a.ndim < 2 or b.ndim < 2 or a.dtype.kind != "f" or b.dtype.kind != "f":
        return _with_bias(np.matmul(a, b, out=out), bias)
    if CONFIG._applied is None:
        CONFIG.apply()
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = _batch_shape(a.shape[:-2], b.shape[:-2])
    batch = 1
    for d in batch_shape:
        batch *= d
    if _native_on is None:
        _load_native()
    work = batch * m * n * k
    if (_native_on and a.dtype == np.float32 and b.dtype == np.float32 and b.shape[-2] == k
            and (bias is None or (bias.dtype == np.float32 and bias.shape == (n,) and bias.flags.c_contiguous))
            and (out is None or (out.dtype == np.float32 and out.flags.c_contiguous
                                 and out.shape == batch_shape + (m, n)))
            and _native_shape(m, n, k, work)):
        split = not parallel.in_serial() and _pool_threads() > 1  # the kernel asks the load check
        return _native_matmul(a, b, batch_shape, batch, m, n, k, out, bias, split)
    threads = 1 if parallel.in_serial() else plan(m, n, k, batch)
    if threads == 1:
        return _with_bias(np.matmul(a, b, out=out), bias)
    if out is None:
        out = np.empty(batch_shape + (m, n), np.result_type(a, b))
    parts = threads if work >= threads * ONE_BLOCK_PER_THREAD else threads * PIECES_PER_THREAD
    if max(m, n) >= 2 * ALIGN:
        if m >= n:
            pieces = _edges(m, parts)

            def block(r0, r1):
                np.matmul(a[..., r0:r1, :], b, out=out[..., r0:r1, :])
        else:
            pieces = _edges(n, parts)

            def block(c0, c1):
                np.matmul(a, b[..., c0:c1], out=out[..., c0:c1])
    elif batch_shape and batch_shape[0] > 1:
        lead = batch_shape[0]
        a = np.broadcast_to(a, batch_shape + a.shape[-2:])
        b = np.broadcast_to(b, batch_shape + b.shape[-2:])
        step = -(-lead // parts)
        pieces = [(i, min(lead, i + step)) for i in range(0, lead, step)]

        def block(i0, i1):
            np.matmul(a[i0:i1], b[i0:i1], out=out[i0:i1])
    else:
        return _with_bias(np.matmul(a, b, out=out), bias)
    run_pieces(block, pieces, threads)
    return _with_bias(out, bias)


def _with_bias(y, bias):
    if bias is not None:
        y += bias
    return y
