"""Work split into pieces that a few threads take from a shared queue as they free up.

The quantized kernels split a product's rows this way (``fn(a, b)`` over
ranges of tiles or row groups): several pieces per thread, the calling thread
among the workers, so a core busy with another process delays one piece, not
half of the product.  Idle workers block on the pool's queue (no spinning).
The pool is the caller's: the C kernels keep an executor of their own (a
caller running on a worker of the backend's shared pool must not wait on that
same pool), the numba path uses the shared one.
"""

from __future__ import annotations

import threading

import numpy as np


def split(total: int, parts: int, align: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(total)``, inner edges multiples of ``align``."""
    units = -(-total // align)
    edges = [min(total, round(units * i / parts) * align) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def run_pieces(fn, total: int, threads: int, pool, pieces: int | None = None) -> None:
    """``fn(a, b)`` over ``pieces`` ranges of ``range(total)`` (default ``4 * threads``),
    taken by ``threads`` threads: the caller and ``threads - 1`` tasks on ``pool``
    (a ``concurrent.futures`` executor).  Returns when every piece is done; the
    first exception of a piece is raised."""
    count = min(total, pieces if pieces is not None else threads * 4)
    queue = iter(split(total, count, 1))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                piece = next(queue, None)
            if piece is None:
                return
            fn(*piece)

    futures = [pool.submit(worker) for _ in range(threads - 1)]
    try:
        worker()
    finally:
        for f in futures:
            f.result()


def activation_rows(x, n: int, k: int):
    """``x`` (..., k) of a product with an (n, k) weight as contiguous f32 rows
    ``(m, k)``, with its leading shape; ValueError when the last dim is not ``k``."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1:] != (k,):
        raise ValueError(f"matmul_t: x has shape {x.shape}, expected (..., {k}) for a "
                         f"({n}, {k}) weight")
    return np.ascontiguousarray(x.reshape(-1, k)), x.shape[:-1]
