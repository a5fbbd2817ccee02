"""The compiled kernels' worker pool (native/_workers.c): coverage of a split, split
products equal to the one-thread kernels bit for bit (and to the numba path), the
thread setting, concurrent callers and fork safety."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tallow as tl
from tallow.backends.cpu import native
from tallow.backends.cpu.quantized import fast
from tallow.quantized import ggml_type

pytestmark = pytest.mark.skipif(not (native.available() and native.pool_available()),
                                reason="the C extension or its pool is not built (Linux only)")

F = np.float32
W = native._workers


@pytest.fixture
def pool():
    """The pool with every product split (however small, whatever the machine's load),
    restored afterwards."""
    before, min_bytes = W.threads(), W.min_bytes()
    W.set_min_bytes(0)
    W.set_load_check(False)
    yield W
    W.set_load_check(True)
    W.set_min_bytes(min_bytes)
    W.set_threads(before)


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("total,grain,size", [(1, 1, -1), (7, 1, -1), (13, 4, -1), (1000, 4, -1),
                                              (5000, 1, 1 << 30), (3, 1, 1 << 30)])
def test_every_unit_is_done_exactly_once(pool, threads, total, grain, size):
    pool.set_threads(threads)
    counts = np.zeros(total, np.uint32)
    pool.cover(counts, total, grain, 200, 25, size)  # 200 ns per unit: the threads overlap
    np.testing.assert_array_equal(counts, np.full(total, 25, np.uint32))
    assert pool.workers() == (threads - 1 if total > grain else pool.workers())


def test_workers_take_chunks_when_there_is_time_to(pool):
    pool.set_threads(2)
    before = pool.stats()
    counts = np.zeros(256, np.uint32)
    pool.cover(counts, 256, 1, 20_000, 20, -1)  # 5 ms per task: the worker is awake for most of it
    after = pool.stats()
    assert after["jobs"] - before["jobs"] == 20
    assert after["worker_chunks"] > before["worker_chunks"]


def test_a_serial_thread_runs_its_tasks_in_place(pool):
    """Inside ``parallel.serial()`` (one batch of several run on Python threads at once)
    the compiled pool runs this thread's tasks on it, every unit still done once; the
    setting is this thread's alone and is restored on leaving."""
    from tallow.backends.cpu import parallel

    pool.set_threads(2)
    counts = np.zeros(256, np.uint32)
    jobs = pool.stats()["jobs"]
    with parallel.serial():
        pool.cover(counts, 256, 1, 2_000, 5, -1)
        seen = []
        other = threading.Thread(target=lambda: seen.append(pool.set_serial(False)))
        other.start()
        other.join()
        assert seen == [False]  # another thread: not serial
    assert pool.stats()["jobs"] == jobs
    np.testing.assert_array_equal(counts, np.full(256, 5, np.uint32))
    assert pool.set_serial(False) is False  # restored
    pool.cover(counts, 256, 1, 2_000, 1, -1)
    assert pool.stats()["jobs"] == jobs + 1


def weight(name, n, k, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.02, (n, k)).astype(F)
    return ggml_type(name).quantize(w).reshape(-1)


def shapes(name):
    # odd row counts: groups of eight rows with a partial last group, chunk edges anywhere
    k = 512 if ggml_type(name).block_size == 256 else 96
    return [(1, k), (7, k), (13, 2 * k), (37, k), (203, k), (1003, k)]


@pytest.mark.parametrize("name", native.SUPPORTED)
def test_split_matvec_equals_the_one_thread_kernel_bit_for_bit(pool, name):
    for n, k in shapes(name):
        raw = weight(name, n, k, seed=n)
        nw = native.NativeWeight(raw, name, n, k)
        x = np.random.default_rng(n).normal(0, 1, k).astype(F)
        pool.set_threads(1)
        one = nw.matvec(x, np.empty(n, F)).copy()
        if fast.available():  # the numba path: an independent implementation of the same arithmetic
            np.testing.assert_array_equal(one, fast.TiledWeight(raw, name, n, k).matmul_t(x[None], 1)[0])
        for threads in (2, 3, 4):
            pool.set_threads(threads)
            for _ in range(3):
                out = np.full(n, np.nan, F)
                np.testing.assert_array_equal(nw.matvec(x, out), one, err_msg=f"{name} {n}x{k} {threads} threads")


@pytest.mark.parametrize("half", [False, True])
def test_split_float_matvec_equals_the_one_thread_kernel(pool, half):
    from tallow.backends.cpu.native import _ops

    rng = np.random.default_rng(5)
    for n, k in [(1, 40), (37, 576), (1003, 96), (513, 1536)]:
        w32 = rng.normal(0, 0.05, (n, k)).astype(F)
        w = w32.astype(np.float16) if half else w32
        wbuf = w.view(np.uint16) if half else w
        for m in (1, 3):
            x = rng.normal(0, 1, (m, k)).astype(F)
            pool.set_threads(1)
            one = np.empty((m, n), F)
            _ops.matvec_float(wbuf, half, x, one, m, n, k, 0, n)
            ref = x.astype(np.float64) @ w.astype(np.float64).T
            np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
            for threads in (2, 3, 4):
                pool.set_threads(threads)
                out = np.full((m, n), np.nan, F)
                _ops.matvec_float(wbuf, half, x, out, m, n, k, 0, n)
                np.testing.assert_array_equal(out, one)
            # a row range: only those rows are written
            pool.set_threads(2)
            part = np.zeros((m, n), F)
            _ops.matvec_float(wbuf, half, x, part, m, n, k, n // 3, n)
            np.testing.assert_array_equal(part[:, n // 3:], one[:, n // 3:])
            assert not part[:, : n // 3].any()


def _attention_f64(q, kc, vc, s, nh, nkv, d, pos0, scale, h0, h1):
    """Causal softmax attention over the cache in float64 (the oracle)."""
    out = np.zeros((s, nh, d))
    for r in range(s):
        total = pos0 + r + 1
        for h in range(h0, h1):
            kv = h // (nh // nkv)
            z = kc[kv, :total].astype(np.float64) @ q[r, h].astype(np.float64) * scale
            p = np.exp(z - z.max())
            out[r, h] = (p / p.sum()) @ vc[kv, :total].astype(np.float64)
    return out


@pytest.mark.parametrize("nh,nkv,s,pos0,h0,h1", [(9, 3, 1, 300, 0, 9), (32, 4, 1, 700, 0, 32),
                                                 (8, 2, 3, 50, 0, 8), (12, 4, 1, 400, 3, 11),
                                                 (128, 1, 1, 40, 0, 128)])
def test_split_attention_equals_one_thread_bit_for_bit(pool, nh, nkv, s, pos0, h0, h1):
    """Decode attention splits its query heads across the pool (each head whole on one
    thread; the heads of a key/value head taken together, more than 64 of them in
    turns): the same bits as one thread, float64 within f32 rounding."""
    from tallow.backends.cpu.native import _ops

    rng = np.random.default_rng(nh + pos0)
    d, ctx, scale = 64, 1024, 0.125
    q = rng.normal(0, 1, (s, nh, d)).astype(F)
    kc, vc = (rng.normal(0, 1, (nkv, ctx, d)).astype(F) for _ in range(2))

    def run():
        out = np.zeros((s, nh, d), F)
        _ops.attention(q, kc, vc, out, s, nh, nkv, d, ctx, pos0, scale, h0, h1)
        return out

    pool.set_threads(1)
    one = run()
    np.testing.assert_allclose(one, _attention_f64(q, kc, vc, s, nh, nkv, d, pos0, scale, h0, h1), atol=2e-5)
    assert not one[:, :h0].any() and not one[:, h1:].any()
    for threads in (2, 3, 4):
        pool.set_threads(threads)
        before = pool.stats()["jobs"]
        for _ in range(3):
            np.testing.assert_array_equal(run(), one, err_msg=f"{threads} threads")
        assert pool.stats()["jobs"] > before  # it was split


def test_one_thread_means_no_pool_threads(pool):
    pool.set_threads(2)
    counts = np.zeros(64, np.uint32)
    pool.cover(counts, 64, 1, 0, 1, -1)
    assert pool.workers() == 1
    pool.set_threads(1)
    assert pool.workers() == 0
    pool.cover(counts, 64, 1, 0, 1, -1)
    assert pool.workers() == 0
    np.testing.assert_array_equal(counts, 2)


def test_the_thread_setting_sizes_the_pool(pool):
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        assert native.sync_threads() == 1 and W.threads() == 1
        if len(os.sched_getaffinity(0)) >= 2:
            tl.utils.set_num_threads(2)
            nw = native.NativeWeight(weight("Q8_0", 64, 64), "Q8_0", 64, 64)
            nw.matmul_t(np.ones(64, F))  # a public product picks up the new setting
            assert W.threads() == 2 and W.workers() == 1
    finally:
        tl.utils.set_num_threads(before)
        native.sync_threads()


def test_concurrent_callers_get_their_own_results(pool):
    pool.set_threads(2)
    name, n, k = "Q4_0", 203, 96
    nw = native.NativeWeight(weight(name, n, k), name, n, k)
    xs = [np.random.default_rng(i).normal(0, 1, k).astype(F) for i in range(4)]
    pool.set_threads(1)
    want = [nw.matvec(x, np.empty(n, F)).copy() for x in xs]
    pool.set_threads(2)
    errors = []

    def caller(i):
        out = np.empty(n, F)
        for _ in range(300):
            if not np.array_equal(nw.matvec(xs[i], out), want[i]):
                errors.append(i)
                return

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


FORK_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, sys, threading
    import numpy as np
    from tallow.backends.cpu import native
    W = native._workers
    W.set_min_bytes(0)
    W.set_load_check(False)
    W.set_threads(2)
    from tallow.quantized import ggml_type
    n, k = 203, 96
    raw = ggml_type("Q8_0").quantize(np.random.default_rng(0).normal(0, .02, (n, k)).astype(np.float32)).reshape(-1)
    nw = native.NativeWeight(raw, "Q8_0", n, k)
    x = np.random.default_rng(1).normal(0, 1, k).astype(np.float32)
    want = nw.matvec(x, np.empty(n, np.float32)).copy()
    assert W.workers() == 1

    def product_ok():
        return np.array_equal(nw.matvec(x, np.empty(n, np.float32)), want)

    # a thread splitting products all the time while the main thread forks
    stop = threading.Event()
    def busy():
        while not stop.is_set():
            assert product_ok()
    t = threading.Thread(target=busy)
    t.start()
    for _ in range(20):
        pid = os.fork()
        if pid == 0:  # the child: no workers came along; it starts its own
            ok = all(product_ok() for _ in range(50)) and W.workers() == 1
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    stop.set()
    t.join()

    def child(q):
        q.put(all(product_ok() for _ in range(20)))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    assert q.get(timeout=60) is True
    p.join(60)
    assert p.exitcode == 0
    print("fork ok")
""")


def test_fork_with_a_started_pool_does_not_deadlock():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fork ok" in r.stdout


@pytest.mark.parametrize("fmt", ["F32", "Q4_0", "Q8_0", "Q4K"])
def test_decode_steps_split_give_the_same_logits(pool, fmt, tmp_path):
    """A whole decode step with every product split: the logits of one thread, bit for bit."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tallow.models.quantized_llama import ModelWeights
    from support.models import QLLAMA_CFG, save_llama_gguf

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: the thread setting is capped at 1")
    torch.manual_seed(4)
    hf = LlamaForCausalLM(LlamaConfig(**dict(QLLAMA_CFG, tie_word_embeddings=True))).eval()
    path = tmp_path / f"m-{fmt}.gguf"
    save_llama_gguf(hf, path, fmt)
    model = ModelWeights.from_gguf(str(path))
    assert model._decoder is not None
    before = tl.utils.get_num_threads()
    logits = {}
    try:
        for threads in (1, 2):
            tl.utils.set_num_threads(threads)
            jobs = W.stats()["jobs"]
            cache = model.new_cache()
            out = [model.forward(tl.Tensor([[5, 9, 3]], dtype="u32"), 0, cache).numpy()[0]]
            for pos, tok in enumerate([7, 1, 12, 4], start=3):
                out.append(model.forward(tl.Tensor([[tok]], dtype="u32"), pos, cache).numpy()[0])
            assert W.threads() == threads
            assert (W.stats()["jobs"] > jobs) == (threads > 1)  # the products were split
            logits[threads] = np.array(out)
    finally:
        tl.utils.set_num_threads(before)
        native.sync_threads()
    np.testing.assert_array_equal(logits[1], logits[2])


def test_a_busy_machine_keeps_products_on_the_caller(pool):
    """More runnable tasks than spare CPUs: no splits (the workers would queue behind them)."""
    pool.set_threads(2)
    pool.set_load_check(True)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(len(os.sched_getaffinity(0)) + 1)]
    try:
        counts = np.zeros(512, np.uint32)
        deadline = time.monotonic() + 30
        while not pool.load()[0] and time.monotonic() < deadline:
            pool.cover(counts, 512, 1, 1000, 1, 1 << 20)  # the check samples the load as products come
            time.sleep(0.011)
        assert pool.load()[0], pool.load()
        jobs = pool.stats()["jobs"]
        pool.cover(counts, 512, 1, 0, 50, 1 << 20)
        assert pool.stats()["jobs"] == jobs
        assert counts.min() == counts.max()  # done on the caller, every unit once per call
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_the_load_check_follows_the_runnable_count(pool, tmp_path):
    """Made-up /proc/loadavg contents: splits stop when other runnable tasks leave no CPU
    to spare and resume once they are gone (after the moving average settles)."""
    fake = tmp_path / "loadavg"
    busy_count = len(os.sched_getaffinity(0)) + 4  # more runnable tasks than CPUs, ours aside
    pool.set_threads(2)
    pool.set_load_check(True)
    counts = np.zeros(256, np.uint32)

    def splits_after_settling(running):
        fake.write_text(f"0.00 0.00 0.00 {running}/300 4242\n")
        for _ in range(30):  # 30 samples, 10 ms apart: the average has converged
            pool.cover(counts, 256, 1, 0, 1, 1 << 20)
            time.sleep(0.011)
        jobs = pool.stats()["jobs"]
        pool.cover(counts, 256, 1, 0, 5, 1 << 20)
        return pool.stats()["jobs"] - jobs

    try:
        pool.set_load_file(str(fake))
        assert splits_after_settling(1) == 5 and not pool.load()[0]
        assert splits_after_settling(busy_count) == 0 and pool.load()[0]
        assert splits_after_settling(1) == 5 and not pool.load()[0]
    finally:
        pool.set_load_file("/proc/loadavg")
    assert counts.min() == counts.max() == 3 * 35


def test_tasks_runnable_in_every_other_sample_leave_the_splits_on(pool, tmp_path):
    """Other tasks runnable in half of the samples (short-lived ones: kernel threads,
    another library's workers spinning for a few milliseconds after its call) do not
    stop the splits; the same tasks runnable in every sample do."""
    fake = tmp_path / "loadavg"
    spare = len(os.sched_getaffinity(0)) - 2
    busy = 1 + spare + 1  # the caller, as many others as spare CPUs, and one more
    stats = pool.stats()
    pool.set_threads(2)
    pool.set_load_check(True)
    pool.set_spin(0, stats["caller_spin_us"])  # the worker asleep at every sample: the caller is all of ours
    counts = np.zeros(256, np.uint32)

    def sample(running):
        fake.write_text(f"0.00 0.00 0.00 {running}/300 4242\n")
        pool.cover(counts, 256, 1, 0, 1, 1 << 20)  # the check samples the file as the job starts
        time.sleep(0.011)

    try:
        pool.set_load_file(str(fake))
        for i in range(40):
            sample(busy if i % 2 == 0 else 1)
            assert not pool.load()[0], (i, pool.load())
        for _ in range(30):
            sample(busy)
        assert pool.load()[0], pool.load()
    finally:
        pool.set_load_file("/proc/loadavg")
        pool.set_spin(stats["worker_spin_us"], stats["caller_spin_us"])
