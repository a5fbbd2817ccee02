"""The CPU backend's one thread pool (native/pool.py over _workers.c): every piece once,
errors, nesting, concurrent callers, the thread setting, and a forked child."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tallow as tl
from tallow.backends.cpu import threads
from tallow.backends.cpu.native import pool

needs_pool = pytest.mark.skipif(not pool.available(), reason="the compiled pool is not built")
two_cpus = pytest.mark.skipif(threads.usable_cpus() < 2, reason="needs two usable CPUs")


@pytest.fixture
def two_threads():
    before = tl.utils.get_num_threads()
    tl.utils.set_num_threads(min(2, threads.usable_cpus()))
    try:
        yield
    finally:
        tl.utils.set_num_threads(before)


@pytest.mark.parametrize("total,parts,align", [(10, 3, 1), (100, 7, 8), (5, 9, 1), (64, 4, 16), (1, 1, 1)])
def test_split_covers_the_range_in_order(total, parts, align):
    ranges = pool.split(total, parts, align)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a < b for a, b in ranges)
    assert all(b == c for (_, b), (c, _) in zip(ranges[:-1], ranges[1:]))
    assert all(b % align == 0 for _, b in ranges[:-1])
    assert len(ranges) <= parts


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("count", [None, 1, 50])
def test_every_index_is_done_once_across_threads(n_threads, count, two_threads):
    seen, lock = [], threading.Lock()

    def fn(a, b):
        with lock:
            seen.extend(range(a, b))

    pool.run_ranges(fn, 37, n_threads, count)
    assert sorted(seen) == list(range(37))


@needs_pool
@two_cpus
def test_pieces_run_on_two_threads_at_once(two_threads):
    """Two pieces that each wait for the other finish only when two threads run them."""
    arrived = threading.Barrier(2, timeout=20)
    idents = set()

    def piece(i):
        idents.add(threading.get_ident())
        arrived.wait()  # releases the GIL; raises BrokenBarrierError after 20 s alone

    pool.run_pieces(piece, [(0,), (1,)], 2)
    assert len(idents) == 2


def test_an_exception_in_a_piece_reaches_the_caller(two_threads):
    ran = []

    def fn(i):
        ran.append(i)
        if i == 3:
            raise ValueError("piece 3")

    with pytest.raises(ValueError, match="piece 3"):
        pool.run_pieces(fn, [(i,) for i in range(8)], 2)
    assert 3 in ran
    pool.run_pieces(ran.append, [(i,) for i in range(4)], 2)  # the pool still works after
    assert sorted(ran[-4:]) == [0, 1, 2, 3]


def test_a_piece_that_splits_again_runs_its_pieces_in_place(two_threads):
    """A split inside a piece finds the pool busy with its caller's job and runs on its
    own thread: no deadlock, every inner piece once."""
    out, lock = [], threading.Lock()

    def outer(i):
        inner = []
        pool.run_pieces(inner.append, [(j,) for j in range(5)], 2)
        with lock:
            out.append((i, sorted(inner)))

    pool.run_pieces(outer, [(i,) for i in range(4)], 2)
    assert sorted(out) == [(i, [0, 1, 2, 3, 4]) for i in range(4)]


def test_callers_on_several_python_threads_each_get_all_their_pieces(two_threads):
    results, errors = {}, []

    def caller(t):
        try:
            got, lock = [], threading.Lock()

            def piece(i):
                time.sleep(0.001)
                with lock:
                    got.append(i)

            for _ in range(5):
                got.clear()
                pool.run_pieces(piece, [(i,) for i in range(16)], 2)
                assert sorted(got) == list(range(16))
            results[t] = True
        except BaseException as e:  # reported below
            errors.append(e)

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors and len(results) == 3


@needs_pool
def test_the_pool_follows_the_thread_setting():
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        assert pool.sync_threads() == 1 and pool._workers.threads() == 1
        tl.utils.set_num_threads(min(2, threads.usable_cpus()))
        assert pool.sync_threads() == pool._workers.threads() == min(2, threads.usable_cpus())
    finally:
        tl.utils.set_num_threads(before)


def test_serial_keeps_the_pieces_on_the_calling_thread(two_threads):
    idents = set()
    with pool.serial():
        assert pool.in_serial()
        pool.run_pieces(lambda i: idents.add(threading.get_ident()), [(i,) for i in range(8)], 2)
    assert not pool.in_serial()
    assert idents == {threading.get_ident()}


def test_the_backend_has_no_other_thread_pool():
    """One pool: no executor of concurrent.futures in the CPU backend's source."""
    root = os.path.dirname(os.path.dirname(pool.__file__))
    offenders = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if "ThreadPoolExecutor" in text or ("def run_pieces" in text and name != "pool.py"):
                    offenders.append(os.path.relpath(path, root))
    assert offenders == []


# -- fork ------------------------------------------------------------------------------

FORK_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, sys
    import numpy as np
    import tallow as tl

    tl.utils.set_num_threads(2)
    rng = np.random.default_rng(0)
    fmt = sys.argv[1]
    w = tl.tensor(rng.standard_normal((1024, 1024)).astype(np.float32))
    qm = tl.QMatMul(w.quantize(fmt))
    x = tl.tensor(rng.standard_normal((64, 1024)).astype(np.float32))   # prompt-sized
    a = rng.standard_normal((512, 512)).astype(np.float32)

    def products():
        return qm.forward(x).numpy(), (tl.tensor(a) @ tl.tensor(a)).numpy()

    q_parent, f_parent = products()   # the pool's threads start in the parent
    assert np.allclose(f_parent, a.astype(np.float64) @ a, rtol=1e-4, atol=1e-3)

    def child(conn):
        q, f = products()
        conn.send((np.array_equal(q, q_parent), np.allclose(f, f_parent, rtol=1e-5, atol=1e-4)))

    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    p = ctx.Process(target=child, args=(child_end,))
    p.start()
    assert parent_end.poll(60), "multiprocessing fork child: no result in 60 s"
    assert parent_end.recv() == (True, True)
    p.join(30)

    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        q, f = products()
        ok = np.array_equal(q, q_parent) and np.allclose(f, f_parent, rtol=1e-5, atol=1e-4)
        os.write(wfd, b"ok" if ok else b"bad")
        os._exit(0)
    os.close(wfd)
    import select
    ready, _, _ = select.select([r], [], [], 60)
    assert ready, "os.fork child: no result in 60 s"
    assert os.read(r, 8) == b"ok"
    os.waitpid(pid, 0)
    print("fork ok", qm.path)
""")


@two_cpus
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4k", "q6k", "q2k"])
def test_a_forked_child_runs_split_products_after_the_parent_did(fmt):
    """The parent's products ran on two threads; a child forked afterwards (through
    multiprocessing's fork context, and by os.fork) computes the same numbers instead
    of waiting on pool threads that did not come along."""
    env = dict(os.environ, TALLOW_SPLIT_WHEN_BUSY="1")  # split even on a loaded machine
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT, fmt], env=env, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0 and "fork ok" in out.stdout, out.stdout + out.stderr
