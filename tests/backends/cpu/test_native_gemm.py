"""tallow's own f32 product (native/_gemm.c, dispatched by backends/cpu/gemm.py) against
NumPy in float64: shapes around the kernel's tile and block sizes, strided, transposed,
reversed and broadcast operands, accumulation and the bias row, NaN/Inf, bit-identical
results at one and two threads (split or kept on the caller by the load check), the
portable C kernel, and the switch back to BLAS."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import gemm, native

from ...support.native_builds import each_build_and_thread_count

pytestmark = pytest.mark.skipif(not gemm.native_available(), reason="the native gemm module is not built")

G = gemm._native
W = native._workers
F = np.float32
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Sizes at and around the kernel's tile (6 x 16) and blocks (KC, MC, NC_MAX).
EDGE_SIZES = [0, 1, 2, 5, 6, 7, 13, 15, 16, 17, 31, 97, 119, 120, 121, 255, 256, 257, 300, 511, 512, 513]


def reference(a, b, c0=None, bias=None):
    r = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if c0 is not None:
        r = c0.astype(np.float64) + r
    if bias is not None:
        r = r + bias.astype(np.float64)
    return r


def bound(a, b, c0=None, bias=None):
    """k * eps * (sum |a_i b_i| + |c| + |bias|): the rounding of a k-term f32 sum."""
    k = a.shape[-1]
    s = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    if c0 is not None:
        s = s + np.abs(c0)
    if bias is not None:
        s = s + np.abs(bias)
    return 2 * (k + 2) * np.finfo(F).eps * s + np.finfo(F).tiny


def layout(draw, rng, bdims, rows, cols):
    """An f32 operand of shape bdims + (rows, cols) stored row-major, transposed, as
    a stepped slice, reversed (negative strides) or broadcast over its batch dims."""
    kind = draw(st.sampled_from(["row", "transposed", "stepped", "reversed", "broadcast"]))
    shape = bdims + (rows, cols)
    if kind == "transposed":
        return np.swapaxes(rng.uniform(-1, 1, bdims + (cols, rows)).astype(F), -1, -2)
    if kind == "stepped":
        return rng.uniform(-1, 1, bdims + (rows, 2 * cols + 1)).astype(F)[..., 1::2][..., :cols]
    if kind == "reversed":
        return rng.uniform(-1, 1, shape).astype(F)[..., ::-1, ::-1]
    if kind == "broadcast" and bdims:
        return np.broadcast_to(rng.uniform(-1, 1, (rows, cols)).astype(F), shape)
    return rng.uniform(-1, 1, shape).astype(F)


@st.composite
def products(draw, sizes=st.sampled_from(EDGE_SIZES) | st.integers(0, 70)):
    m, n, k = draw(sizes), draw(sizes), draw(sizes)
    batch = draw(st.sampled_from([(), (1,), (3,), (2, 3)]))
    if m * n * k * max(1, int(np.prod(batch))) > 20_000_000:
        batch = ()
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    a_batch = tuple(d if draw(st.booleans()) else 1 for d in batch)
    b_batch = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, len(batch))):]
    return layout(draw, rng, a_batch, m, k), layout(draw, rng, b_batch, k, n), rng


@pytest.fixture(autouse=True)
def always_native(monkeypatch):
    """Every f32 product on the native kernel, split or not (the dispatch rule itself
    is tested on its own below)."""
    monkeypatch.setattr(gemm, "native_wins_alone", lambda m, n, k, work: True)
    monkeypatch.setattr(gemm, "SPLIT_MIN", 1 << 62)  # the BLAS path would never split


@pytest.fixture
def two_threads():
    """Two threads, every product split when it has two units (load check off)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two usable CPUs")
    before, split_min = tl.utils.get_num_threads(), G.split_min()
    tl.utils.set_num_threads(2)
    G.set_split_min(0)
    W.set_load_check(False)
    yield
    W.set_load_check(True)
    G.set_split_min(split_min)
    tl.utils.set_num_threads(before)


@SETTINGS
@given(p=products(), bias=st.booleans())
def test_matmul_matches_numpy(p, bias):
    a, b, rng = p
    n = b.shape[-1]
    bv = rng.uniform(-1, 1, n).astype(F) if bias else None
    out = gemm.matmul(a, b, bias=bv)
    expected = reference(a, b, bias=bv)
    assert out.shape == expected.shape and out.dtype == F
    assert np.all(np.abs(out - expected) <= bound(a, b, bias=bv))


@SETTINGS
@given(p=products(), bias=st.booleans())
def test_accumulate_into_out(p, bias):
    """out = out + a @ b (+ bias), through the module's own entry (3-D at most)."""
    a, b, rng = p
    if a.ndim > 3 or b.ndim > 3:  # one batch dim: merge (copies)
        full = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        count = int(np.prod(full))
        a = np.broadcast_to(a, full + a.shape[-2:]).reshape((count,) + a.shape[-2:])
        b = np.broadcast_to(b, full + b.shape[-2:]).reshape((count,) + b.shape[-2:])
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    c0 = rng.uniform(-1, 1, shape).astype(F)
    bv = rng.uniform(-1, 1, b.shape[-1]).astype(F) if bias else None
    out = c0.copy()
    G.gemm(a, b, out, True, bv)
    assert np.all(np.abs(out - reference(a, b, c0, bv)) <= bound(a, b, c0, bv))


@SETTINGS
@given(p=products())
def test_split_results_are_bit_identical_to_one_thread(two_threads, p):
    a, b, _ = p
    jobs = W.stats()["jobs"]
    split = gemm.matmul(a, b)
    np.testing.assert_array_equal(split, _one_thread(a, b))
    if split.size and a.shape[-1] and max(G.plan(a.shape[-2], b.shape[-1], a.shape[-1], 1, 2)[1::2]) > 1:
        assert W.stats()["jobs"] > jobs  # it was split


def _one_thread(a, b):
    before = tl.utils.get_num_threads()
    tl.utils.set_num_threads(1)
    try:
        return gemm.matmul(a, b)
    finally:
        tl.utils.set_num_threads(before)


@pytest.mark.parametrize("m,k,n,batch", [(64, 256, 256, 1), (256, 64, 256, 1), (16, 27, 784, 8),
                                         (300, 600, 530, 1), (7, 5, 3000, 1)])
def test_mid_sized_products_split_and_stay_bit_identical(two_threads, m, k, n, batch):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(F)
    b = rng.standard_normal((batch, k, n)).astype(F)[0 if batch == 1 else slice(None)]
    jobs = W.stats()["jobs"]
    split = gemm.matmul(a, b)
    assert W.stats()["jobs"] == jobs + 1
    np.testing.assert_array_equal(split, _one_thread(a, b))
    assert np.all(np.abs(split - reference(a, b)) <= bound(a, b))


def test_a_contended_machine_keeps_the_product_on_the_caller_with_the_same_result(two_threads, tmp_path):
    """The load check says no CPU is spare: no split, and the same bits as a split."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 256)).astype(F), rng.standard_normal((256, 256)).astype(F).T
    split = gemm.matmul(a, b)
    fake = tmp_path / "loadavg"
    fake.write_text(f"0.00 0.00 0.00 {len(os.sched_getaffinity(0)) + 6}/300 4242\n")
    W.set_load_check(True)
    W.set_load_file(str(fake))
    try:
        deadline = time.monotonic() + 10
        while not W.load()[0] and time.monotonic() < deadline:  # the average settles
            gemm.matmul(a, b)
            time.sleep(0.011)
        assert W.load()[0]
        jobs = W.stats()["jobs"]
        kept = gemm.matmul(a, b)
        assert W.stats()["jobs"] == jobs
    finally:
        W.set_load_file("/proc/loadavg")
    np.testing.assert_array_equal(kept, split)


def test_nan_and_inf_propagate_like_numpy():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((20, 40)).astype(F)
    b = rng.standard_normal((40, 35)).astype(F)
    a[3, 7] = np.nan
    a[5, 2] = np.inf
    b[9, 30] = -np.inf
    b[11, 4] = np.nan
    a[8, 9] = 0.0  # 0 * -inf
    out = gemm.matmul(a, b)
    expected = reference(a, b)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(expected))
    finite = np.isfinite(expected)
    assert np.all(np.abs(out[finite] - expected[finite]) <= bound(a, b)[finite])
    assert np.isnan(out).any() and np.isinf(out).any()


def test_an_uninitialised_out_is_overwritten_not_read():
    a, b = np.ones((13, 300), F), np.ones((300, 21), F)
    out = np.full((13, 21), np.nan, F)
    assert gemm.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.full((13, 21), 300, F))


def test_empty_inner_dimension_gives_zeros_or_the_bias():
    a, b = np.ones((3, 0), F), np.ones((0, 4), F)
    np.testing.assert_array_equal(gemm.matmul(a, b), np.zeros((3, 4), F))
    bias = np.arange(4, dtype=F)
    np.testing.assert_array_equal(gemm.matmul(a, b, bias=bias), np.broadcast_to(bias, (3, 4)))
    out = np.ones((3, 4), F)
    G.gemm(a, b, out, True, bias)
    np.testing.assert_array_equal(out, 1 + np.broadcast_to(bias, (3, 4)))


def test_the_portable_kernel_matches_numpy():
    was = G.simd()
    G.set_simd(False)
    try:
        rng = np.random.default_rng(5)
        for m, k, n in [(1, 1, 1), (7, 300, 17), (130, 20, 600)]:
            a = rng.standard_normal((k, m)).astype(F).T
            b = rng.standard_normal((k, n)).astype(F)[::-1]
            bias = rng.standard_normal(n).astype(F)
            out = gemm.matmul(a, b, bias=bias)
            assert np.all(np.abs(out - reference(a, b, bias=bias)) <= bound(a, b, bias=bias))
    finally:
        G.set_simd(was)


def test_environment_switches():
    """TALLOW_NO_NATIVE_GEMM sends f32 products to BLAS; TALLOW_NATIVE_ISA=scalar picks
    the portable kernel."""
    code = ("from tallow.backends.cpu import gemm; "
            "print(gemm.native_available(), gemm._native.simd())")
    env = dict(os.environ, TALLOW_NO_NATIVE_GEMM="1")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split()[0] == "False"
    env = dict(os.environ, TALLOW_NATIVE_ISA="scalar")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split() == ["True", "False"]


def test_the_blas_path_stays_reachable(monkeypatch):
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = np.ones((8, 8), F)
    gemm.matmul(a, a)
    assert not calls  # native
    previous = gemm.set_native(False)
    try:
        np.testing.assert_array_equal(gemm.matmul(a, a), np.full((8, 8), 8, F))
        assert calls
    finally:
        gemm.set_native(previous)


@pytest.mark.parametrize("shape,native_expected", [
    (((64, 256), (256, 256)), True), (((256, 64), (64, 256)), True),
    (((16, 27), (27, 5000)), True),  # thin, but splittable: the kernel at any thread count
    (((4, 9), (9, 30)), False), (((64, 64), (64, 63)), False),  # tiny: BLAS
    (((64, 576), (576, 2048)), True),  # a convolution layer's: the kernel's split
    (((256, 2304), (2304, 49)), True),  # a 7x7 image's 49 columns: computed transposed
    (((16384, 64), (64, 32)), False), (((1024, 1024), (1024, 1024)), False),  # the BLAS path's split
])
def test_the_path_depends_on_the_shape_alone(monkeypatch, shape, native_expected):
    """The same path at 1 and 2 threads, split or not (so the kernel's bits)."""
    monkeypatch.undo()  # the real rule
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(shape[0]).astype(F), rng.standard_normal(shape[1]).astype(F)
    before = tl.utils.get_num_threads()
    results = []
    try:
        for threads in sorted({1, min(2, len(os.sched_getaffinity(0)))}):
            tl.utils.set_num_threads(threads)
            calls.clear()
            results.append(gemm.matmul(a, b))
            assert (not calls) == native_expected, (shape, threads)
    finally:
        tl.utils.set_num_threads(before)
    if native_expected:  # (OpenBLAS's row blocks need not give its one-call bits)
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])


def test_products_the_blas_path_splits_stay_there(two_threads, monkeypatch):
    monkeypatch.undo()  # the real rule
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    small = np.ones((64, 256), F), np.ones((256, 256), F)  # under 2 * SPLIT_MIN: the kernel, split
    jobs = W.stats()["jobs"]
    np.testing.assert_array_equal(gemm.matmul(*small), np.full((64, 256), 256, F))
    assert not calls and W.stats()["jobs"] == jobs + 1
    for m, k, n in [(640, 640, 640), (16384, 64, 32)]:  # past NATIVE_MAX; thin (32 columns)
        calls.clear()
        large = np.ones((m, k), F), np.ones((k, n), F)  # the BLAS path's own split
        np.testing.assert_array_equal(gemm.matmul(*large), np.full((m, n), k, F))
        assert len(calls) >= 2


def test_convolution_sized_products_go_to_the_kernel_and_split(two_threads, monkeypatch):
    """From 2 * SPLIT_MIN to NATIVE_MAX, wide products (a convolution layer's) take the
    kernel's split, not the BLAS path's."""
    monkeypatch.undo()  # the real rule
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(12)
    a = rng.standard_normal((1, 64, 576)).astype(F)  # a kernel, broadcast over the batch
    b = rng.standard_normal((4, 576, 512)).astype(F)  # im2col columns of 4 images
    assert 4 * 64 * 576 * 512 >= 2 * gemm.SPLIT_MIN
    jobs = W.stats()["jobs"]
    got = gemm.matmul(a, b)
    assert not calls and W.stats()["jobs"] == jobs + 1
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_f64_and_mixed_products_use_blas():
    a = np.ones((4, 5))
    np.testing.assert_array_equal(gemm.matmul(a, a.T.astype(F)), np.full((4, 4), 5.0))
    assert gemm.matmul(a, a.T.astype(F)).dtype == np.float64


def test_bad_operands_are_rejected_before_any_write():
    out = np.zeros((3, 4), F)
    with pytest.raises(TypeError, match="float32"):
        G.gemm(np.ones((3, 5)), np.ones((5, 4), F), out)
    with pytest.raises(ValueError, match="do not match"):
        G.gemm(np.ones((3, 5), F), np.ones((6, 4), F), out)
    with pytest.raises(ValueError, match="bias"):
        G.gemm(np.ones((3, 5), F), np.ones((5, 4), F), out, False, np.ones(3, F))
    assert not out.any()


def test_tensor_matmul_and_linear_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 256)).astype(F)
    w = rng.standard_normal((128, 256)).astype(F)
    got = tl.Tensor(x).matmul(tl.Tensor(w).t()).numpy()
    expected = (torch.from_numpy(x).double() @ torch.from_numpy(w).double().T).numpy()
    assert np.all(np.abs(got - expected) <= bound(x, w.T))


def test_concurrent_callers_get_their_own_results(two_threads):
    """Python threads multiplying at once (each with its own packing buffers; the pool
    runs one caller's split at a time, the others on their own thread)."""
    import threading

    rng = np.random.default_rng(8)
    pairs = [(rng.standard_normal((70, 300)).astype(F), rng.standard_normal((300, 90)).astype(F)) for _ in range(4)]
    expected = [gemm.matmul(a, b) for a, b in pairs]
    errors = []

    def worker(i):
        a, b = pairs[i]
        for _ in range(30):
            if not np.array_equal(gemm.matmul(a, b), expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("batch", [(), (3,)])
def test_narrow_tall_products_are_computed_transposed(monkeypatch, batch):
    """48-63 columns and 64+ rows from 2 * SPLIT_MIN: the kernel computes (B^T A^T)^T
    (its 6-row tiles fit 49 rows better than 16-column panels fit 49 columns); the
    values, a bias and an ``out`` array as on the ordinary path, the same bits at 1
    and 2 threads."""
    monkeypatch.undo()  # the real rule
    monkeypatch.setattr(gemm, "SPLIT_MIN", 1 << 14)  # small operands past the threshold
    rng = np.random.default_rng(21)
    a = rng.standard_normal(batch + (96, 80)).astype(F)
    b = rng.standard_normal(batch + (80, 49)).astype(F)[..., ::-1, :]  # a reversed view too
    bias = rng.standard_normal(49).astype(F)
    assert gemm._narrow_and_tall(96, 49) and gemm.native_takes(96, 49, 80, max(1, int(np.prod(batch))))
    calls = []
    real = G.gemm
    monkeypatch.setattr(G, "gemm", lambda a_, b_, c_, *rest: calls.append(c_.shape) or real(a_, b_, c_, *rest))
    before = tl.utils.get_num_threads()
    results = []
    try:
        for threads in sorted({1, min(2, len(os.sched_getaffinity(0)))}):
            tl.utils.set_num_threads(threads)
            out = np.full(batch + (96, 49), np.nan, F)
            results.append(gemm.matmul(a, b, out=out, bias=bias))
            assert results[-1] is out
    finally:
        tl.utils.set_num_threads(before)
    assert calls and all(shape[-2:] == (49, 96) for shape in calls)  # the transposed product
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias
    np.testing.assert_allclose(results[0], want, rtol=1e-5, atol=1e-4)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@given(n=st.integers(1, 5), groups=st.integers(1, 3), m=st.integers(1, 20), k=st.integers(1, 70),
       p=st.integers(1, 40), transposed=st.booleans(), seed=st.integers(0, 2**16))
@SETTINGS
def test_sum_of_products_adds_each_product_in_order(n, groups, m, k, p, transposed, seed):
    """``sum_of_products``: ``sum_i a[i] @ b[i]`` into ``out`` (whatever it held), over
    a leading batch and group dims, with a column-major ``b`` (a convolution's
    columns read transposed); the bits of accumulating the kernel's products one by one."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, groups, m, k)).astype(F)
    b = rng.standard_normal((n, groups, p, k)).astype(F).swapaxes(-1, -2) if transposed \
        else rng.standard_normal((n, groups, k, p)).astype(F)
    out = np.full((groups, m, p), np.nan, F)
    gemm.sum_of_products(a, b, out)
    want = reference(a, b).sum(0)
    err = np.abs(out.astype(np.float64) - want).max()
    assert err <= 4 * n * k * np.finfo(F).eps * max(1.0, np.abs(want).max())
    one_by_one = np.zeros((groups, m, p), F)
    for i in range(n):
        G.gemm(a[i], b[i], one_by_one, True)
    np.testing.assert_array_equal(out, one_by_one)


def test_a_layer_s_kernel_gradient_is_summed_in_parts_in_c(monkeypatch):
    """The kernel gradient of an ungrouped layer adds a product per image in C
    (``kernel_grad_parts``: no transposed copies, no ``sum_of_products`` from Python)
    for a 1x1 layer of stride 1 (its images read in place), a strided 3x3 one, a
    strided 1x1 one and a single image. Values against PyTorch."""
    import torch
    from tallow.backends.cpu import conv as cpu_conv

    calls = []
    real = gemm.sum_of_products
    monkeypatch.setattr(gemm, "sum_of_products", lambda *a: calls.append("sum") or real(*a))
    rng = np.random.default_rng(4)
    for b, c, co, n, k, stride, pad in ((3, 24, 20, 16, 1, 1, 0), (3, 24, 20, 8, 1, 1, 0), (2, 16, 24, 33, 3, 2, 1),
                                        (1, 24, 20, 16, 1, 1, 0), (2, 16, 24, 33, 1, 2, 0), (3, 24, 20, 16, 1, 2, 0)):
        x = rng.standard_normal((b, c, n, n)).astype(F)
        kern = rng.standard_normal((co, c, k, k)).astype(F)
        oh = (n + 2 * pad - k) // stride + 1
        g = rng.standard_normal((b, co, oh, oh)).astype(F)
        got = cpu_conv._conv2d_kernel_grad(x, g, kern.shape, (pad, pad), (stride, stride), (1, 1), 1)
        pk = torch.zeros(kern.shape, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.conv2d(torch.from_numpy(x).double(), pk, stride=stride, padding=pad).backward(
            torch.from_numpy(g).double())
        np.testing.assert_allclose(got, pk.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert calls == []


# Thin products (fewer columns than a panel, few rows, both operands contiguous along
# k): a few-channel layer's kernel gradient g (c_out, positions) @ cols^T, a narrow
# last layer h @ w.t(); they are dot products of contiguous runs in the kernel.
THIN_SHAPES = [(8, 9, 676), (64, 10, 256), (3, 1, 33), (7, 15, 1000), (1, 1, 40), (5, 4, 39)]


@pytest.mark.parametrize("m,n,k", THIN_SHAPES)
def test_thin_products_match_float64_in_every_build_and_thread_count(m, n, k):
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(F)
    b = rng.standard_normal((n, k)).astype(F).T  # (k, n), each column contiguous
    c0 = rng.standard_normal((m, n)).astype(F)
    bias = rng.standard_normal(n).astype(F)
    results = []
    for _ in each_build_and_thread_count(G):
        out = c0.copy()
        G.gemm(a[None], b[None], out[None], True, bias)
        assert np.all(np.abs(out - reference(a, b, c0, bias)) <= bound(a, b, c0, bias))
        results.append(out)
    for out in results[1:]:
        np.testing.assert_array_equal(out, results[0])
