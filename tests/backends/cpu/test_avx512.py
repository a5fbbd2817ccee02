"""The AVX-512 kernels against the AVX2 ones they widen: the f32 product's 6x32
tile computes every output with the same operations in the same order, so it must
give the AVX2 kernel's bits (and so PyTorch's values, which the AVX2 kernel's own
tests check). It runs where the CPU has AVX-512F; ``TALLOW_NATIVE_ISA=avx2``
switches it off.
"""

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import gemm, native

try:
    from tallow.backends.cpu.native import _gemm
except ImportError:  # pragma: no cover - without a compiler
    _gemm = None


def _has_avx512() -> bool:
    # (TALLOW_NATIVE_ISA=scalar or avx2 switches the kernels off when tallow first loads
    # them, which may come after this module's collection)
    if _gemm is None or not _gemm.simd() or native.isa_wanted() in ("scalar", "avx2"):
        return False
    was = _gemm.avx512()
    try:
        _gemm.set_avx512(True)
    except ValueError:
        return False
    _gemm.set_avx512(was)
    return True


pytestmark = pytest.mark.skipif(not _has_avx512(), reason="the CPU has no AVX-512 (or the kernels are not built)")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def avx512(module, on):
    was = module.avx512()
    module.set_avx512(on)
    try:
        yield
    finally:
        module.set_avx512(was)


def _both(module, fn):
    """fn() with the module's AVX-512 kernels off, then on."""
    out = []
    for on in (False, True):
        with avx512(module, on):
            assert module.avx512() == on
            out.append(fn())
    return out


def _both_at(threads, module, fn):
    """``_both`` with tallow (and the compiled pool) at ``threads`` threads."""
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(threads)
        native.sync_threads()
        return _both(module, fn)
    finally:
        tl.utils.set_num_threads(before)


@given(m=st.integers(1, 80), k=st.integers(1, 300), n=st.integers(1, 140), batch=st.integers(1, 3),
       transposed=st.booleans(), accumulate=st.booleans(), bias=st.booleans(), seed=st.integers(0, 99))
@SETTINGS
def test_the_product_s_avx512_tile_gives_the_avx2_bits(m, k, n, batch, transposed, accumulate, bias, seed):
    """Every panel pairing: full and partial pairs of 16-column panels, a lone last
    panel, edge rows, a transposed (packed) and a row-major (read in place) B, a
    K over one chunk, accumulation and a bias row."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = (rng.standard_normal((batch, n, k)).astype(np.float32).transpose(0, 2, 1) if transposed
         else rng.standard_normal((batch, k, n)).astype(np.float32))
    c0 = rng.standard_normal((batch, m, n)).astype(np.float32)
    row = rng.standard_normal(n).astype(np.float32) if bias else None

    def product():
        c = c0.copy()
        _gemm.gemm(a, b, c, accumulate, row, False)
        return c

    plain, wide = _both(_gemm, product)
    np.testing.assert_array_equal(wide, plain)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (c0 if accumulate else 0) + (row if bias else 0)
    np.testing.assert_allclose(wide, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("m", [2, 7, 8, 10, 12, 15, 20, 30, 64, 70, 100, 127, 128, 129, 136, 250])
@pytest.mark.parametrize("n", [16, 40, 80, 130])
@pytest.mark.parametrize("a_transposed", [False, True])
def test_the_8_row_tiles_give_the_6_row_tiles_bits(m, n, a_transposed):
    """The AVX-512 product's 8-row tiles against its 6-row ones and the AVX2 kernel's:
    every plan of 8-row and 6-row tiles (``eight_rows``): 8-row tiles only (8, 64,
    a last one of 7 rows: 7, 15, 127), 6-row ones only (2, 10, 12), both (20, 30, 70,
    100), blocks of 120 rows and the rest (128-250), A read in place and packed in
    panels of each tile's height (a transposed A of 64 columns or more), one panel read
    twice (16 and 80 columns: a lone last panel), with a bias row and accumulation."""
    rng = np.random.default_rng(m * n)
    k = 200
    a = (rng.standard_normal((k, m)).astype(np.float32).T if a_transposed
         else rng.standard_normal((m, k)).astype(np.float32))
    b = rng.standard_normal((k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    row = rng.standard_normal(n).astype(np.float32)

    def product():
        c = c0.copy()
        _gemm.gemm(a, b, c, True, row, False)
        return c

    plain, wide = _both(_gemm, product)
    assert _gemm.tile8()
    try:
        _gemm.set_tile8(False)
        assert not _gemm.tile8()
        six = product()  # the AVX-512 kernel's 6-row tiles
    finally:
        _gemm.set_tile8(True)
    np.testing.assert_array_equal(wide, plain)
    np.testing.assert_array_equal(wide, six)
    want = a.astype(np.float64) @ b + c0 + row
    np.testing.assert_allclose(wide, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_the_product_through_the_split_and_the_python_entry():
    """gemm.matmul (the pool's split at two threads) with and without the tile."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((130, 257)).astype(np.float32)
    b = rng.standard_normal((257, 600)).astype(np.float32)
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(2)
        plain, wide = _both(_gemm, lambda: gemm.matmul(a, b))
    finally:
        tl.utils.set_num_threads(before)
    np.testing.assert_array_equal(wide, plain)
    np.testing.assert_allclose(wide, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_the_conv_layer_end_to_end_with_and_without_avx512():
    """A first layer and a 32-channel one (their products on the kernel) through conv2d
    and autograd."""
    rng = np.random.default_rng(6)
    runs = []
    for on in (False, True):
        with avx512(_gemm, on):
            outs = []
            for c, co in ((3, 16), (32, 32)):
                x = tl.Var(rng.standard_normal((4, c, 12, 12)).astype(np.float32))
                k = tl.Var(rng.standard_normal((co, c, 3, 3)).astype(np.float32))
                y = x.conv2d(k, padding=1)
                grads = (y * y).sum_all().backward()
                outs += [y.numpy(), grads[x].numpy(), grads[k].numpy()]
            runs.append(outs)
        rng = np.random.default_rng(6)
    for p, q in zip(*runs):
        np.testing.assert_array_equal(q, p)


def test_native_isa_avx2_switches_them_off():
    code = ("import numpy as np\n"
            "from tallow.backends.cpu import gemm\n"
            "gemm.native_available()\n"
            "from tallow.backends.cpu.native import loader\n"
            "print(gemm._native.avx512(), loader.built('_transpose').avx512())\n")
    for isa, want in (("avx2", ["False", "False"]), (None, ["True", "True"])):
        env = dict(os.environ)
        env.pop("TALLOW_NATIVE_ISA", None)
        if isa:
            env["TALLOW_NATIVE_ISA"] = isa
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want


def test_switching_on_needs_the_cpu_feature():
    """set_avx512(True) is refused where the CPU lacks AVX-512F (here it has it: accepted)."""
    with avx512(_gemm, True):
        assert _gemm.avx512()
    with pytest.raises(TypeError):
        _gemm.set_avx512()
