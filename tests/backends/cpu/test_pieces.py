"""The shared "pieces from a queue" helper of the quantized kernels."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tallow.backends.cpu import pieces


@pytest.mark.parametrize("total,parts,align", [(10, 3, 1), (100, 7, 8), (5, 9, 1), (64, 4, 16), (1, 1, 1)])
def test_split_covers_the_range_in_order(total, parts, align):
    ranges = pieces.split(total, parts, align)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a < b for a, b in ranges)
    assert all(b == c for (_, b), (c, _) in zip(ranges[:-1], ranges[1:]))
    assert all(b % align == 0 for _, b in ranges[:-1])
    assert len(ranges) <= parts


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("count", [None, 1, 50])
def test_every_index_is_done_once_across_threads(threads, count):
    seen, names, lock = [], set(), threading.Lock()

    def fn(a, b):
        with lock:
            seen.extend(range(a, b))
            names.add(threading.current_thread().name)

    with ThreadPoolExecutor(max_workers=max(1, threads - 1)) as pool:
        pieces.run_pieces(fn, 37, threads, pool, count)
    assert sorted(seen) == list(range(37))
    if threads == 1:  # no task submitted: the caller did everything
        assert names == {threading.current_thread().name}


def test_an_exception_in_a_piece_reaches_the_caller():
    def fn(a, b):
        if a <= 5 < b:
            raise ValueError("piece failed")

    with ThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(ValueError, match="piece failed"):
            pieces.run_pieces(fn, 12, 2, pool, 6)
