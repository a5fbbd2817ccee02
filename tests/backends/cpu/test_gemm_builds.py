"""Each build of tallow's f32 product (native/_gemm.c: the baseline, AVX2+FMA and AVX-512
builds of _gemm_body.h) against a NumPy model of the summation it promises, bit for bit:
an output element is acc = acc + a * b over k in order (one K chunk at a time, the chunks
added to C in order, then the bias), with a * b + acc rounded once in the builds with FMA
and twice (product, then sum) in the baseline build. The operands carry 14-bit mantissas
within a few binades, so that float64 holds every fused step exactly: the model
is exact, and a product that is not exact in float32 tells the two roundings apart."""

import numpy as np
import pytest

import tallow as tl
from tallow.backends.cpu import gemm, native

pytestmark = pytest.mark.skipif(not gemm.native_available(), reason="the native gemm module is not built")

G = gemm._native
W = native._workers
F = np.float32
KC = G.KC


def _builds():
    """(name, simd, avx512) for the builds this CPU has."""
    out = [("baseline", False, False)]
    if G.simd():
        out.append(("avx2", True, False))
    try:
        was = G.avx512()
        G.set_avx512(True)
        G.set_avx512(was)
        out.append(("avx512", True, True))
    except ValueError:
        pass
    return out


def operand(rng, shape):
    """Values i / 2^12 with |i| < 2^14 (14 significant bits, |x| < 4): their products
    need 28 bits, and a sum of them stays within float64's 53 from 2^-24 up."""
    return (rng.integers(-(2**14) + 1, 2**14, shape) / 2.0**12).astype(F)


def model(a, b, c0, bias, fused):
    """The product's summation in NumPy: per K chunk (kc_of's even cut), a fresh chain
    acc = acc + a_p * b_p, added to C; then the bias."""
    m, k = a.shape
    chunks = -(-k // KC)
    kc = -(-k // chunks)
    c = c0.copy() if c0 is not None else None
    for p0 in range(0, k, kc):
        acc = np.zeros((m, b.shape[1]), F)
        for p in range(p0, min(k, p0 + kc)):
            if fused:  # exact in float64 for these operands: one rounding
                acc = (acc.astype(np.float64) + np.outer(a[:, p].astype(np.float64), b[p])).astype(F)
            else:
                acc = acc + np.outer(a[:, p], b[p]).astype(F)
        c = acc if c is None else c + acc
    return c + bias if bias is not None else c


SHAPES = [(1, 1, 1), (6, 16, 7), (7, 17, 33), (8, 32, 64), (13, 40, 256), (21, 50, 300), (64, 33, 100), (3, 70, 513)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("layout", ["rows", "transposed"])
@pytest.mark.parametrize("extra", ["none", "accumulate+bias"])
def test_each_build_gives_its_model_s_bits_at_each_thread_count(m, n, k, layout, extra):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a, b = operand(rng, (m, k)), operand(rng, (k, n))
    if layout == "transposed":  # a Linear layer's weight (b packed by register transposes) and a packed a
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    c0 = operand(rng, (m, n)) if extra != "none" else None
    bias = operand(rng, (n,)) if extra != "none" else None
    simd, zmm, before, split_min = G.simd(), G.avx512(), tl.utils.get_num_threads(), G.split_min()
    G.set_split_min(0)  # (split even these small products)
    try:
        for name, build_simd, build_zmm in _builds():
            G.set_simd(build_simd)
            G.set_avx512(build_zmm)
            want = model(a, b, c0, bias, fused=build_simd)
            for threads in (1, 2):
                tl.utils.set_num_threads(threads)
                native.sync_threads()
                W.set_load_check(False)
                out = c0.copy() if c0 is not None else np.full((m, n), np.nan, F)
                G.gemm(a, b, out, c0 is not None, bias)
                np.testing.assert_array_equal(out, want, err_msg=f"{name} build, {threads} threads")
    finally:
        G.set_simd(simd)
        G.set_avx512(zmm)
        W.set_load_check(True)
        G.set_split_min(split_min)
        tl.utils.set_num_threads(before)
        native.sync_threads()


def test_the_roundings_tell_the_builds_apart():
    """The model's two roundings differ on these operands (else the test above could not
    tell a fused baseline build or an unfused FMA build from the right one)."""
    rng = np.random.default_rng(0)
    a, b = operand(rng, (8, 64)), operand(rng, (64, 16))
    assert not np.array_equal(model(a, b, None, None, True), model(a, b, None, None, False))
