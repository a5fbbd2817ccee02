"""Float products split across tallow's threads (backends/cpu/gemm.py) against NumPy, and
the thread setting they follow: the BLAS path (the native f32 kernel switched off here;
tests/backends/cpu/test_native_gemm.py tests that one)."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import gemm, parallel, threads

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def blas_path(monkeypatch):
    """f32 products through NumPy's BLAS, the path these tests are about."""
    monkeypatch.setattr(gemm, "_native_on", False)


@pytest.fixture
def split_everything(monkeypatch):
    """Two threads, and every product with more than one row and column split (the
    threshold lowered so that small shapes exercise the split)."""
    before = tl.utils.get_num_threads()
    if threads.usable_cpus() < 2:
        pytest.skip("needs two usable CPUs")
    tl.utils.set_num_threads(2)
    monkeypatch.setattr(gemm, "SPLIT_MIN", 1)
    monkeypatch.setattr(gemm, "ALIGN", 2)
    try:
        yield
    finally:
        tl.utils.set_num_threads(before)


def reference(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def tolerance(a, b, dtype):
    """Rounding bound of a k-term dot product: k * eps * sum |a_i b_i| (the NumPy
    oracle's own rounding included)."""
    k = a.shape[-1]
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    return 2 * k * np.finfo(dtype).eps * scale + np.finfo(dtype).tiny


@st.composite
def operands(draw):
    """(a, b) with batch dims that broadcast, in every inner layout: row-major,
    transposed (column-major), or a stepped slice of a bigger buffer."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    m, n, k = (draw(st.integers(1, 70)) for _ in range(3))
    rank = draw(st.integers(0, 2))
    batch = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    # each operand's batch dims: the full ones, some set to 1 (broadcast), or fewer of them
    a_batch = tuple(d if draw(st.booleans()) else 1 for d in batch)
    b_batch = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, rank)):]
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)

    def make(bdims, rows, cols):
        layout = draw(st.sampled_from(["row", "transposed", "stepped"]))
        if layout == "transposed":
            x = rng.uniform(-1, 1, bdims + (cols, rows)).astype(dtype)
            return np.swapaxes(x, -1, -2)
        if layout == "stepped":
            x = rng.uniform(-1, 1, bdims + (rows, 2 * cols)).astype(dtype)
            return x[..., ::2]
        return rng.uniform(-1, 1, bdims + (rows, cols)).astype(dtype)

    return make(a_batch, m, k), make(b_batch, k, n)


@SETTINGS
@given(ab=operands())
def test_split_product_matches_numpy(split_everything, ab):
    a, b = ab
    out = gemm.matmul(a, b)
    expected = reference(a, b)
    assert out.shape == expected.shape and out.dtype == a.dtype
    assert np.all(np.abs(out - expected) <= tolerance(a, b, a.dtype))


@SETTINGS
@given(ab=operands(), transpose_a=st.booleans(), transpose_b=st.booleans())
def test_tensor_matmul_split_matches_numpy(split_everything, ab, transpose_a, transpose_b):
    """Through the Tensor API, with transposed operands made by ``t()``."""
    a, b = ab
    ta, tb = tl.Tensor(np.ascontiguousarray(a)), tl.Tensor(np.ascontiguousarray(b))
    if transpose_a:  # the same values, stored transposed
        ta = tl.Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).t()
    if transpose_b:
        tb = tl.Tensor(np.ascontiguousarray(np.swapaxes(b, -1, -2))).t()
    out = ta.broadcast_matmul(tb)
    expected = reference(a, b)
    assert out.shape == expected.shape
    assert np.all(np.abs(out.numpy() - expected) <= tolerance(a, b, a.dtype))


def test_large_product_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 300, 257)).astype(np.float32)
    b = rng.standard_normal((257, 513)).astype(np.float32)
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(min(2, threads.usable_cpus()))
        out = tl.Tensor(a).broadcast_matmul(tl.Tensor(b)).numpy()
    finally:
        tl.utils.set_num_threads(before)
    expected = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()
    assert np.all(np.abs(out - expected) <= tolerance(a, b, np.float32))


def test_half_types_widen_and_split(split_everything):
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (3, 40, 24)).astype(np.float16)
    b = rng.uniform(-1, 1, (3, 24, 50)).astype(np.float16)
    out = tl.Tensor(a).matmul(tl.Tensor(b))
    assert out.dtype == tl.f16
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               reference(a, b).astype(np.float16).astype(np.float32), rtol=2e-3, atol=2e-3)


def test_integer_products_are_not_split(split_everything):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    b = np.arange(20, dtype=np.int64).reshape(4, 5)
    np.testing.assert_array_equal(gemm.matmul(a, b), a @ b)


# -- the policy -----------------------------------------------------------------------

def test_plan_follows_the_thread_setting():
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        assert gemm.plan(1024, 1024, 1024) == 1
        if threads.usable_cpus() >= 2:
            tl.utils.set_num_threads(2)
            assert gemm.plan(1024, 1024, 1024) == 2
            assert gemm.plan(1, 1024, 1024) == 1  # matrix-vector: the calling thread
            assert gemm.plan(1024, 1, 1024) == 1
            assert gemm.plan(8, 8, 8) == 1  # small: the calling thread
    finally:
        tl.utils.set_num_threads(before)


def _threads_used(monkeypatch, a, b):
    """The distinct threads that ran BLAS blocks of ``gemm.matmul(a, b)``."""
    seen = set()
    real = np.matmul

    def spy(*args, **kwargs):
        seen.add(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm.np, "matmul", spy)
    try:
        gemm.matmul(a, b)
    finally:
        monkeypatch.setattr(gemm.np, "matmul", real)
    return seen


def test_one_thread_setting_keeps_products_on_the_caller(monkeypatch):
    a = np.ones((512, 512), np.float32)
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        assert _threads_used(monkeypatch, a, a) == {threading.get_ident()}
    finally:
        tl.utils.set_num_threads(before)


def test_serial_keeps_products_on_the_caller(split_everything, monkeypatch):
    a = np.ones((512, 512), np.float32)
    with parallel.serial():
        assert _threads_used(monkeypatch, a, a) == {threading.get_ident()}


def test_blas_stays_on_one_thread_at_any_setting():
    from threadpoolctl import threadpool_info

    before = tl.utils.get_num_threads()
    try:
        for n in sorted({1, min(2, threads.usable_cpus())}):
            tl.utils.set_num_threads(n)
            tl.Tensor(np.ones((4, 4), np.float32)).matmul(tl.Tensor(np.ones((4, 4), np.float32)))
            assert tl.utils.get_num_threads() == n
            assert all(d["num_threads"] == threads.BLAS_THREADS
                       for d in threadpool_info() if d["user_api"] == "blas")
    finally:
        tl.utils.set_num_threads(before)


@pytest.mark.parametrize("value", ["1", "2"])
def test_environment_variable_sets_the_split(value):
    """TALLOW_NUM_THREADS (read through tallow.config) decides how many threads a large
    product uses; BLAS stays on one either way."""
    if int(value) > threads.usable_cpus():
        pytest.skip("needs two usable CPUs")
    code = (
        "import threading, numpy as np, tallow as tl\n"
        "from tallow.backends.cpu import gemm\n"
        "from threadpoolctl import threadpool_info\n"
        "seen = set(); real = np.matmul\n"
        "def spy(*a, **k):\n"
        "    seen.add(threading.get_ident()); return real(*a, **k)\n"
        "gemm.np.matmul = spy\n"
        "x = tl.Tensor(np.ones((512, 512), np.float32))\n"
        "x.matmul(x)\n"
        "gemm.np.matmul = real\n"
        "print(tl.utils.get_num_threads(), gemm.plan(512, 512, 512), len(seen),\n"
        "      sorted({d['num_threads'] for d in threadpool_info() if d['user_api'] == 'blas'}))\n"
    )
    env = dict(os.environ, TALLOW_NUM_THREADS=value, TALLOW_NO_NATIVE_GEMM="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    count, planned, used, blas = out.stdout.split(maxsplit=3)
    assert (count, planned) == (value, value)
    assert 1 <= int(used) <= int(value)  # a worker may find every block taken already
    assert blas.strip() == "[1]"


