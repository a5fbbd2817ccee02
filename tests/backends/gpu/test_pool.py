"""The buffer pool: power-of-two buckets, reuse, release at synchronize/readback,
the cache limit, statistics, and storages' buffer sizes."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tallow as tl
from tallow.backends.gpu import new_device_state
from tallow import config
from tallow.backends.gpu.pool import MIN_BUCKET

pytestmark = pytest.mark.gpu


def test_bucket_sizes(gpu):
    pool = gpu._state.pool
    assert pool.bucket(0) == pool.bucket(1) == pool.bucket(2) == MIN_BUCKET >= 2
    assert pool.bucket(16) == 16 and pool.bucket(17) == 32
    assert pool.bucket(1024) == 1024 and pool.bucket(1025) == 2048
    assert pool.bucket(3 << 20) == 4 << 20
    for n in range(1, 5000, 37):
        b = pool.bucket(n)
        assert b >= n and b & (b - 1) == 0


def test_buffer_size_of_storages(gpu):
    scalar = tl.full((), 1.5, dtype="bf16", device=gpu)
    s, _ = scalar.storage_and_layout()
    assert s.nbytes == 2 and s.buffer_size >= 2 and s.buffer_size == MIN_BUCKET
    t = tl.zeros((1025,), dtype="u8", device=gpu)
    assert t.storage_and_layout()[0].buffer_size == 2048
    assert t.storage_and_layout()[0].nbytes == 1025
    c = tl.zeros((3, 4), device=tl.cpu)
    assert c.storage_and_layout()[0].buffer_size == c.storage_and_layout()[0].nbytes == 48
    assert scalar.values() == 1.5


def test_buffers_are_reused_once_free(gpu):
    x = tl.ones((1000,), device=gpu)
    a = x + 1.0
    pa = a.storage_and_layout()[0].ptr
    b = x + 2.0
    assert b.storage_and_layout()[0].ptr != pa  # a still holds its buffer
    reused = gpu.memory_stats()["buffers_reused"]
    del a
    c = x + 3.0
    assert c.storage_and_layout()[0].ptr == pa
    assert gpu.memory_stats()["buffers_reused"] == reused + 1
    assert c.values()[0] == 4.0 and b.values()[0] == 3.0


def test_views_share_the_buffer(gpu):
    x = tl.arange(0, 24, dtype="f32", device=gpu).reshape((2, 3, 4))
    v = x.transpose(0, 2)
    assert v.storage_and_layout()[0].ptr == x.storage_and_layout()[0].ptr
    del x
    assert v.contiguous().values() == np.arange(24.0).reshape(2, 3, 4).transpose(2, 1, 0).tolist()


def test_memory_stats_and_cache_limit():
    state = new_device_state(0)
    dev = tl.Device.of(state)
    stats = dev.memory_stats()
    for key in ("active_bytes", "cached_bytes", "peak_bytes", "buffers_per_bucket"):
        assert key in stats
    ts = [tl.zeros((n,), device=dev) for n in (10, 300, 300, 5000)]
    stats = dev.memory_stats()
    assert stats["active_bytes"] == 64 + 2048 + 2048 + 32768
    assert stats["buffers_per_bucket"] == {64: 1, 2048: 2, 32768: 1}
    del ts
    stats = dev.memory_stats()
    assert stats["active_bytes"] == 0 and stats["cached_bytes"] == 64 + 4096 + 32768
    assert stats["peak_bytes"] >= 64 + 4096 + 32768
    # Free buffers survive a synchronize under the limit...
    dev.synchronize()
    assert dev.memory_stats()["cached_bytes"] == 64 + 4096 + 32768
    # ...and are released down to it, largest first, when it is lowered.
    dev.set_cache_limit(5000)
    stats = dev.memory_stats()
    assert stats["cached_bytes"] <= 5000 and stats["buffers_per_bucket"].get(32768, 0) == 0
    dev.set_cache_limit(0)
    assert dev.memory_stats()["cached_bytes"] == 0
    # With a zero limit every readback releases what is free (candle's behaviour).
    x = tl.ones((100,), device=dev)
    y = x + 1.0
    z = y * 2.0
    del y
    assert z.values()[0] == 4.0
    assert dev.memory_stats()["cached_bytes"] == 0
    assert dev.memory_stats()["buffers_released"] > 0
    with pytest.raises(ValueError):
        dev.set_cache_limit(-1)


def test_cache_limit_parsing():
    def parse_size(value):
        return config.size("TALLOW_GPU_CACHE_LIMIT", 7, value)

    assert parse_size(None) == 7
    assert parse_size("1024") == 1024
    assert parse_size("2K") == 2048
    assert parse_size("3MiB") == 3 << 20
    assert parse_size("1g") == 1 << 30
    with pytest.warns(RuntimeWarning, match="TALLOW_GPU_CACHE_LIMIT='lots'"):
        assert parse_size("lots") == 7


def test_cache_limit_env_variable(gpu):
    env = dict(os.environ, TALLOW_GPU_CACHE_LIMIT="12345")
    src = os.path.abspath(os.path.join(os.path.dirname(tl.__file__), ".."))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c",
                          "import tallow as tl; print(tl.Device.gpu(0).memory_stats()['cache_limit'])"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "12345", out.stderr


def test_copy_allocates_a_new_buffer(gpu):
    # candle's Metal try_clone shared the buffer, so an in-place write showed in the copy.
    orig = tl.zeros((4,), device=gpu)
    copied = orig.copy()
    assert copied.storage_and_layout()[0].ptr != orig.storage_and_layout()[0].ptr
    orig.slice_set(tl.ones((2,), device=gpu), 0, 0)
    assert orig.values() == [1.0, 1.0, 0.0, 0.0]
    assert copied.values() == [0.0, 0.0, 0.0, 0.0]
    big = tl.arange(0, 1000, dtype="f32", device=gpu).reshape((10, 100))
    row = big[3].copy()
    assert row.storage_and_layout()[0].nbytes == 400
    assert big.force_contiguous().storage_and_layout()[0].ptr != big.storage_and_layout()[0].ptr


def test_a_buffer_returned_twice_is_handed_out_once(gpu):
    from tallow.backends.gpu import new_device_state

    state = new_device_state(0)
    pool = state.pool
    with state.commands.lock:
        buf = pool.alloc(4096)
    pool.release(buf)
    pool.release(buf)  # a second owner returning the same buffer
    with state.commands.lock:
        first = pool.alloc(4096)
        second = pool.alloc(4096)
    assert first is buf and second is not buf
    assert pool.stats()["double_releases"] == 1


def test_a_storage_in_cyclic_garbage_returns_a_live_buffer(gpu):
    # The cycle collector finalizes everything reachable only from a cycle; the GPU
    # object of a pooled buffer must not be among it, or the pool would hand out a
    # buffer whose native object is released (an abort inside wgpu-native).
    import gc

    state = gpu._state
    gc.collect()
    t = tl.ones((1000,), device=gpu) + 1.0
    buf_id = t.storage_and_layout()[0].ptr
    size = t.storage_and_layout()[0].buffer_size
    cycle = [t]
    cycle.append(cycle)
    del t, cycle
    gc.collect()
    state.pool.stats()  # moves returned buffers to the free lists
    free = [b for b in state.pool._free[size] if b.id == buf_id]
    assert len(free) == 1 and not free[0].held
    assert free[0].gpu._internal is not None
    del free
    ones = tl.ones((1000,), device=gpu)
    again = ones * 3.0  # one of the two takes the returned buffer
    assert buf_id in (ones.storage_and_layout()[0].ptr, again.storage_and_layout()[0].ptr)
    assert again.values() == [3.0] * 1000


def test_threads_with_cyclic_garbage(gpu):
    # Threads encoding ops while another thread's collection finalizes cycles that
    # hold GPU tensors (run in a child: the failure this guards against is an abort).
    code = """
import gc, threading
import numpy as np
import tallow as tl
gpu = tl.Device.gpu(0)
errors = []
def work(seed):
    rng = np.random.default_rng(seed)
    try:
        for i in range(120):
            a = tl.tensor(rng.standard_normal(257).astype(np.float32), device=gpu)
            for _ in range(5):
                c = [a + 1.0, a * 2.0]
                c.append(c)
            got = np.array(((a + 1.0) * 2.0).values(), np.float32)
            want = (np.array(a.values(), np.float32) + 1.0) * 2.0
            if not np.allclose(got, want):
                errors.append((seed, i))
            if i % 7 == 0:
                gc.collect()
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors
print("ok")
"""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-3000:])
