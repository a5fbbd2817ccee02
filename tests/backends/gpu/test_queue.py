"""The command stream: asynchronous ops, submission every N ops (and its
environment variable), readbacks that wait for their own submission, counters,
and thread-safe readback (the race candle fixed in #3595)."""

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import tallow as tl
from tallow.backends.gpu.commands import DEFAULT_OPS_PER_SUBMIT, parse_ops_per_submit

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("value,expected", [
    (None, 50), ("50", 50), ("1", 1), ("0", 1), ("10", 10), ("1000", 1000), (" 7 ", 7),
])
def test_ops_per_submit_parsing(value, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_ops_per_submit(value) == expected


@pytest.mark.parametrize("value", ["abc", "-3", "1.5", ""])
def test_ops_per_submit_invalid_warns_and_uses_default(value):
    with pytest.warns(RuntimeWarning, match="TALLOW_GPU_OPS_PER_SUBMIT"):
        assert parse_ops_per_submit(value) == DEFAULT_OPS_PER_SUBMIT == 50


def _run_with_env(value, code):
    env = dict(os.environ, TALLOW_GPU_OPS_PER_SUBMIT=value)
    src = os.path.join(os.path.dirname(tl.__file__), "..")
    env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env=env,
                          capture_output=True, text=True, timeout=120)


def test_ops_per_submit_env_variable_in_a_fresh_process(gpu):
    code = ("import tallow as tl; d = tl.Device.gpu(0); x = tl.ones((4,), device=d)\n"
            "for _ in range(7): x = x + 1.0\n"
            "i = d.info(); print(i['ops_per_submit'], i['submits'], x.values()[0])")
    out = _run_with_env("abc", code)
    assert out.returncode == 0, out.stderr
    assert "RuntimeWarning" in out.stderr and "TALLOW_GPU_OPS_PER_SUBMIT='abc'" in out.stderr
    assert out.stdout.split()[0] == "50"
    out = _run_with_env("1", code)
    per, submits, val = out.stdout.split()
    assert per == "1" and float(val) == 8.0
    assert int(submits) >= 8  # every op (fill + 7 adds) submitted, then the readback


def test_submission_every_n_ops(gpu):
    cmd = gpu._state.commands
    old = cmd.per_submit
    try:
        x = tl.ones((16,), device=gpu)
        for n in (1, 3, 10):
            cmd.set_ops_per_submit(n)
            gpu.synchronize()
            s0, o0 = cmd.submits, cmd.ops
            y = x
            for _ in range(30):
                y = y + 1.0
            assert cmd.ops - o0 == 30
            assert cmd.submits - s0 == 30 // n  # the GPU got batches of n, nothing waited
            assert y.values()[0] == 31.0
        with pytest.warns(RuntimeWarning):
            assert cmd.set_ops_per_submit("abc") == 50
    finally:
        cmd.set_ops_per_submit(old)


def test_ops_are_asynchronous_and_readback_counts(gpu):
    cmd = gpu._state.commands
    old = cmd.per_submit
    cmd.set_ops_per_submit(1000)
    try:
        gpu.synchronize()
        x = tl.ones((1024,), device=gpu)
        r0, s0, b0 = cmd.readbacks, cmd.submits, cmd.bytes_read_back
        for _ in range(20):
            x = x + 1.0
        assert cmd.submits == s0  # encoded, not submitted: nothing has run yet
        assert cmd.in_batch > 0
        v = x.numpy()
        assert cmd.readbacks == r0 + 1 and cmd.submits == s0 + 1  # one submit, one wait
        assert cmd.bytes_read_back - b0 == 4096
        assert cmd.in_batch == 0
        np.testing.assert_array_equal(v, np.full(1024, 21.0, np.float32))
        y = x * 2.0
        gpu.synchronize()
        assert cmd.in_batch == 0 and cmd.submits == s0 + 2
        assert y.values()[0] == 42.0
    finally:
        cmd.set_ops_per_submit(old)


def test_counters_in_info(gpu):
    info = gpu.info()
    for key in ("ops_per_submit", "ops_encoded", "submits", "readbacks", "bytes_uploaded",
                "bytes_read_back"):
        assert isinstance(info[key], int), key
    before = gpu.info()
    t = tl.Tensor(np.arange(100, dtype=np.float32), device=gpu)
    (t + 1.0).numpy()
    after = gpu.info()
    assert after["bytes_uploaded"] - before["bytes_uploaded"] == 400
    assert after["bytes_read_back"] - before["bytes_read_back"] == 400
    assert after["ops_encoded"] > before["ops_encoded"]
    assert after["readbacks"] == before["readbacks"] + 1


def test_readback_waits_for_the_right_work(gpu):
    # A long queue of dependent ops, read back with no synchronize first.
    x = tl.zeros((50000,), device=gpu)
    for i in range(120):
        x = x + 1.0
    assert float(x.max_all().values()) == 120.0
    assert x.sum_all().values() == 120.0 * 50000


def test_reused_buffers_keep_dependent_ops_ordered(gpu):
    # Free buffers are reused at once as outputs of later ops (no waiting), and
    # uploads never write into a buffer the pending batch still reads.
    cmd = gpu._state.commands
    old = cmd.per_submit
    cmd.set_ops_per_submit(1000)
    try:
        expected = []
        outs = []
        for i in range(30):
            a = tl.Tensor(np.full(64, i, np.float32), device=gpu)  # upload
            b = (a * 2.0) + 1.0  # reads a
            del a  # a's buffer goes back to the pool while b's op is still pending
            outs.append(b)
            expected.append(2.0 * i + 1.0)
        got = [o.values()[0] for o in outs]
        assert got == expected
    finally:
        cmd.set_ops_per_submit(old)


def test_readback_is_thread_safe(gpu):
    errors = []

    def worker(k):
        try:
            base = tl.Tensor(np.arange(256, dtype=np.float32) + k * 1000, device=gpu)
            for it in range(200):
                y = (base * 2.0 + float(it)).sum_keepdim(0)
                got = y.values()[0]
                want = float(2.0 * (np.arange(256) + k * 1000).sum() + 256 * it)
                if got != want:
                    errors.append((k, it, got, want))
        except Exception as e:  # pragma: no cover - reported below
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_synchronize_from_many_threads_with_pending_work(gpu):
    x = tl.ones((4096,), device=gpu)
    results = []

    def worker():
        y = x
        for _ in range(30):
            y = y + 1.0
        gpu.synchronize()
        results.append(y.values()[0])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [31.0] * 4


_DOUBLE = """
struct Params { w: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < P.w[0].x) { y[gid.x] = a[gid.x] * 2.0; }
}
"""


def test_a_bad_dispatch_raises_at_once_and_spares_the_batch(gpu):
    # A dispatch WebGPU would reject invalidates the whole command buffer at submit:
    # it must be refused when encoded, so the ops queued before it stay right.
    from tallow.backends.gpu import run_wgsl

    x = tl.Tensor(np.arange(10, dtype=np.float32), device=gpu)
    y = x + 1.0  # queued in the same batch
    s, _ = x.storage_and_layout()
    limit = gpu.info()["limits"]["max-compute-workgroups-per-dimension"]
    with pytest.raises(tl.TallowError, match="workgroups"):
        run_wgsl(_DOUBLE, inputs=[s], outputs=[(tl.f32, 10)], params=[10], workgroups=(limit + 1,))
    with pytest.raises(tl.TallowError, match="both"):
        run_wgsl(_DOUBLE.replace("binding(5)", "binding(1) var<storage, read> b: array<f32>;\n"
                                 "@group(0) @binding(5)"), inputs=[s], inplace=[s], params=[10])
    np.testing.assert_array_equal(y.numpy(), np.arange(10, dtype=np.float32) + 1)
    (z,) = run_wgsl(_DOUBLE, inputs=[s], outputs=[(tl.f32, 10)], params=[10], workgroups=(1,))
    from tallow.layout import Layout

    np.testing.assert_array_equal(z.to_numpy(Layout.contiguous_of((10,))), np.arange(10) * 2.0)
