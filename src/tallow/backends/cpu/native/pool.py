"""The CPU backend's one thread pool and its one ``run_pieces``.

The pool is the compiled worker pool (``_workers.c``): the quantized and float
kernels split their products over it from C, and :func:`run_pieces` splits the
backend's NumPy and BLAS work (row blocks, GEMM panels, a convolution's images,
the quantized products' tiles) over the same threads.  Its size follows the
thread setting of :mod:`tallow.backends.cpu.threads` (``set_num_threads`` /
``TALLOW_NUM_THREADS``), the only place the count is read.

Pieces are taken one at a time by whichever thread is free, the calling thread
among them, so a worker whose core is busy with another process costs nothing: the
others take its share.  A second caller while a job runs (another Python thread, or
a piece that splits again) runs its pieces on its own thread instead of waiting, so
nested use cannot deadlock.  A fork leaves the child a fresh pool (an atfork handler
in C), so a forked process never waits on threads it does not have.

Without the compiled pool (no compiler at install time, or not Linux) every piece
runs on the calling thread.
"""

from __future__ import annotations

import contextlib
import threading

from .... import config
from ..threads import CONFIG
from . import loader

_workers = loader.built("_workers")  # optional: None without a compiler at install time
if _workers is not None:
    # The kernels' own splits wait for the machine to have a CPU to spare (the load
    # check in _workers.c); TALLOW_SPLIT_WHEN_BUSY=1 splits them regardless.
    _workers.set_load_check(not config.settings.split_when_busy)


def available() -> bool:
    """True when the compiled pool is built and this platform runs it (Linux)."""
    return _workers is not None and _workers.enabled()


def sync_threads() -> int:
    """Size the pool to the thread setting (cheap when unchanged); returns the count.

    Called before every split, so a changed setting takes effect at the next op.
    """
    n = CONFIG.get()
    if _workers is not None and _workers.threads() != n:
        _workers.set_threads(n)
    return n


def split(total: int, parts: int, align: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(total)``, inner edges multiples of ``align``."""
    units = -(-total // align)
    edges = [min(total, round(units * i / parts) * align) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def run_pieces(fn, pieces, threads: int) -> None:
    """``fn(*piece)`` for every piece (a tuple of arguments), on up to ``threads``
    threads of the pool, the calling thread included; returns when all ran.

    The number of pieces bounds the threads that take part (make a few per thread:
    a late thread then delays one piece, not a share).  After a piece raises, the
    pieces not yet started are skipped and the first exception is raised here.
    """
    pieces = [tuple(p) for p in pieces]
    if threads <= 1 or len(pieces) <= 1 or _workers is None or in_serial():
        for p in pieces:
            fn(*p)
        return
    sync_threads()
    _workers.run_pieces(fn, pieces)


def run_ranges(fn, total: int, threads: int, pieces: int | None = None) -> None:
    """``fn(a, b)`` over ``pieces`` ranges of ``range(total)`` (default ``4 * threads``),
    through :func:`run_pieces`."""
    count = min(total, pieces if pieces is not None else threads * 4)
    run_pieces(fn, split(total, max(1, count), 1), threads)


class _ThreadState(threading.local):
    serial = False  # a class default: no AttributeError raised and caught per op


_local = _ThreadState()


@contextlib.contextmanager
def serial():
    """Keep the calling thread's work on that thread (for callers that already run
    independent work on every core, e.g. one batch per thread): :func:`run_pieces`
    and the compiled kernels' splits run in place on it."""
    before = _local.serial
    _local.serial = True
    pool_before = _workers.set_serial(True) if _workers is not None else False
    try:
        yield
    finally:
        _local.serial = before
        if _workers is not None:
            _workers.set_serial(pool_before)


def in_serial() -> bool:
    """True inside :func:`serial` on this thread."""
    return _local.serial
