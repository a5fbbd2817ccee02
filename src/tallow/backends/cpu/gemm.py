"""Float matrix products under tallow's thread policy: BLAS on one thread, large
products split by tallow.

OpenBLAS's worker threads spin-wait inside and between products. With one
other CPU-bound process on the machine, a multi-threaded BLAS product waits on
a worker that is not running (and the spinning workers take the time the
others need): docs/design.md ("Thread policy") has the figures. So NumPy's
BLAS is kept on one thread (``threads.CONFIG.apply``) and tallow decides per
product:

* matrix-vector products, and products under ``SPLIT_MIN`` multiply-adds per
  thread, are one BLAS call on the calling thread: a hand-off to another
  thread costs more than they take, and a busy core cannot stall them;
* larger ones are cut into blocks of the output (row blocks when the lhs has
  at least as many rows as the rhs has columns, else column blocks; whole
  matrices of the leading batch dim when both are too narrow to cut), each
  block one single-threaded BLAS call. ``PIECES_PER_THREAD`` blocks per thread
  (one for very large products) are handed out as threads free up
  (:func:`threads.run_pieces`): the calling thread works too, and a core taken
  by another process delays at most the block it holds.
"""

from __future__ import annotations

import numpy as np

from . import parallel
from .threads import CONFIG, run_pieces

# Multiply-adds a thread must get before a product is split (~0.2 ms of one core's BLAS
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


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` for float arrays, split across tallow's threads when large."""
    if a.ndim < 2 or b.ndim < 2 or a.dtype.kind != "f" or b.dtype.kind != "f":
        return np.matmul(a, b)
    if CONFIG._applied is None:
        CONFIG.apply()
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    batch = 1
    for d in batch_shape:
        batch *= d
    threads = 1 if parallel.in_serial() else plan(m, n, k, batch)
    if threads == 1:
        return np.matmul(a, b)
    out = np.empty(batch_shape + (m, n), np.result_type(a, b))
    work = batch * m * n * k
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
        return np.matmul(a, b)
    run_pieces(block, pieces, threads)
    return out
