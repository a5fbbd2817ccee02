"""The compiled f32 / f16 weight products of the decode path against NumPy (float64 oracle)."""

import numpy as np
import pytest

from tallow.models import llama_decode

pytestmark = pytest.mark.skipif(llama_decode._ops is None, reason="the C extension is not built")
ops = llama_decode._ops


@pytest.fixture(params=[True, False], ids=["simd", "scalar"])
def simd(request):
    before = ops.simd()
    if request.param and not before:
        pytest.skip("this CPU has no AVX2/FMA/F16C")
    ops.set_simd(request.param)
    yield request.param
    ops.set_simd(before)


@pytest.mark.parametrize("half", [True, False], ids=["f16", "f32"])
@pytest.mark.parametrize("m,n,k", [(1, 7, 576), (1, 33, 37), (3, 16, 1536), (2, 5, 8), (1, 9, 31)])
def test_matvec_float_matches_numpy(half, m, n, k, simd):
    rng = np.random.default_rng(n * k + m)
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16 if half else np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    ops.matvec_float(w.view(np.uint16) if half else w, half, x, out, m, n, k, 0, n)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    # f32 accumulation of k products: a few ulps of the sum of |terms|
    bound = 4 * k * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w.astype(np.float64)).T)
    assert np.all(np.abs(out - want) <= bound + 1e-30)


def test_matvec_float_writes_only_its_row_range():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((10, 64)).astype(np.float16)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    out = np.zeros((1, 10), np.float32)
    ops.matvec_float(w.view(np.uint16), True, x, out, 1, 10, 64, 3, 7)
    assert np.all(out[0, :3] == 0) and np.all(out[0, 7:] == 0)
    np.testing.assert_allclose(out[0, 3:7], (x @ w.astype(np.float32).T)[0, 3:7], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("half", [True, False], ids=["f16", "f32"])
@pytest.mark.parametrize("m", [1, 4, 5, 70])
@pytest.mark.parametrize("threads", [1, 2])
def test_float_projection_prompt_product_matches_numpy(half, m, threads, monkeypatch):
    """The prompt form: pieces of the weight's rows (f16 converted to f32), BLAS, the pieces
    split across threads."""
    import tallow as tl
    from tallow.backends.cpu import native

    monkeypatch.setattr(native, "MIN_WORK_PER_THREAD", 1)  # split even this small product
    old = tl.utils.get_num_threads()
    tl.utils.set_num_threads(threads)
    rng = np.random.default_rng(m)
    n, k = 300, 96
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16 if half else np.float32)
    proj = llama_decode._FloatProj.__new__(llama_decode._FloatProj)
    proj.n, proj.k, proj.half = n, k, half
    proj.w = w.view(np.uint16) if half else w
    monkeypatch.setattr(llama_decode, "_PIECE_BYTES", 4 * k * 64)  # several pieces, one short
    x = rng.standard_normal((m, k)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    try:
        got = proj.matmul(x)
    finally:
        tl.utils.set_num_threads(old)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("half", [True, False], ids=["f16", "f32"])
def test_float_prompt_product_is_the_same_at_one_and_two_threads(half, monkeypatch):
    """A prompt's float product gives the same bits whatever the thread count (a
    SmolLM2-135M q|k|v shape): the pieces do not depend on it."""
    import tallow as tl
    from tallow.backends.cpu import native

    monkeypatch.setattr(native, "MIN_WORK_PER_THREAD", 1)
    rng = np.random.default_rng(7)
    m, n, k = 256, 960, 576
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16 if half else np.float32)
    proj = llama_decode._FloatProj.__new__(llama_decode._FloatProj)
    proj.n, proj.k, proj.half = n, k, half
    proj.w = w.view(np.uint16) if half else w
    x = rng.standard_normal((m, k)).astype(np.float32)
    old = tl.utils.get_num_threads()
    try:
        got = {}
        for threads in (1, 2):
            tl.utils.set_num_threads(threads)
            got[threads] = proj.matmul(x)
    finally:
        tl.utils.set_num_threads(old)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_allclose(got[1], x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("half", [True, False], ids=["f16", "f32"])
def test_a_large_float_matvec_split_across_threads_matches_numpy(half, monkeypatch):
    import tallow as tl
    from tallow.backends.cpu import native

    monkeypatch.setattr(native, "MIN_WORK_PER_THREAD", 1000)
    rng = np.random.default_rng(5)
    n, k = 1000, 40
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16 if half else np.float32)
    proj = llama_decode._FloatProj.__new__(llama_decode._FloatProj)
    proj.n, proj.k, proj.half = n, k, half
    proj.w = w.view(np.uint16) if half else w
    x = rng.standard_normal(k).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    old = tl.utils.get_num_threads()
    tl.utils.set_num_threads(2)
    try:
        proj.matvec(x, out)
    finally:
        tl.utils.set_num_threads(old)
    np.testing.assert_allclose(out, w.astype(np.float64) @ x.astype(np.float64), rtol=1e-4, atol=1e-5)


def both_builds(fn):
    """fn() with the AVX2 build, then with the baseline one (the AVX2 result first)."""
    before = ops.simd()
    if not before:
        pytest.skip("this CPU has no AVX2/FMA/F16C")
    try:
        first = fn()
        ops.set_simd(False)
        return first, fn()
    finally:
        ops.set_simd(before)


@pytest.mark.parametrize("d,ctx,pos0", [(64, 40, 3), (64, 11, 10), (40, 9, 0)])
def test_the_builds_give_the_same_bits(d, ctx, pos0):
    """The kernels are one source compiled twice: attention (dot, exp, axpy), silu(g) * u
    and the weight rows give the same bits on both builds, and NumPy's values."""
    rng = np.random.default_rng(d + ctx)
    nh, nkv, s = 6, 2, ctx - pos0
    q = rng.standard_normal((s, nh, d)).astype(np.float32)
    kc = rng.standard_normal((nkv, ctx, d)).astype(np.float32)
    vc = rng.standard_normal((nkv, ctx, d)).astype(np.float32)
    scale = 1 / np.sqrt(d)

    def attention():
        out = np.empty((s, nh, d), np.float32)
        ops.attention(q, kc, vc, out, s, nh, nkv, d, ctx, pos0, scale, 0, nh)
        return out

    a, b = both_builds(attention)
    np.testing.assert_array_equal(a, b)
    scores = np.einsum("shd,htd->sht", q.astype(np.float64), np.repeat(kc, nh // nkv, 0).astype(np.float64)) * scale
    future = (np.arange(s)[:, None] + pos0 < np.arange(ctx)[None, :])[:, None, :]
    scores = np.where(future, -np.inf, scores)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = np.einsum("sht,htd->shd", p / p.sum(-1, keepdims=True), np.repeat(vc, nh // nkv, 0))
    np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-5)

    gu = (rng.standard_normal((3, 2 * 100)) * 4).astype(np.float32)  # 100: a part-vector tail

    def silu():
        out = np.empty((3, 100), np.float32)
        ops.silu_mul(gu, 3, 100, out)
        return out

    a, b = both_builds(silu)
    np.testing.assert_array_equal(a, b)
    g, u = gu[:, :100].astype(np.float64), gu[:, 100:].astype(np.float64)
    np.testing.assert_allclose(a, g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-6)

    w = (rng.standard_normal((7, 1000)) * 0.05).astype(np.float16)  # 1000: every loop's tail
    x = rng.standard_normal((2, 1000)).astype(np.float32)

    def rows():
        out = np.empty((2, 7), np.float32)
        ops.matvec_float(w.view(np.uint16), True, x, out, 2, 7, 1000, 0, 7)
        return out

    a, b = both_builds(rows)
    np.testing.assert_array_equal(a, b)
