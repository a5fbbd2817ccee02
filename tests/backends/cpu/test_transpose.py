"""Transposing copies (``native/_transpose.c``, through ``parallel.copy``): a view with
unit stride along a dim other than the last copied to row-major gives NumPy's copy,
for 1-, 2-, 4- and 8-byte items, any leading dims and sizes around the tiles, the
AVX2 and scalar tiles, split over the pool or not; the NumPy tiles (no extension)
agree; bad arguments are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import native, parallel

T = parallel._transpose_module()
pytestmark = pytest.mark.skipif(T is None, reason="the compiled kernels are not built")

DTYPES = [np.float32, np.float64, np.int16, np.uint8, np.int32, np.int64]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), lead=st.lists(st.integers(1, 3), max_size=2),
       rows=st.integers(1, 80), cols=st.integers(1, 80), avx2=st.booleans(), split=st.booleans(),
       seed=st.integers(0, 2**16))
def test_transpose_copy_equals_numpy_s_copy(dtype, lead, rows, cols, avx2, split, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(tuple(lead) + (cols, rows)) * 100).astype(dtype)
    view = np.swapaxes(x, -1, -2)  # (..., rows, cols), unit stride along rows
    out = np.full(view.shape, 7, dtype)
    before = T.simd()
    try:
        T.set_simd(avx2 and before)
        T.transpose_copy(view, out, split)
    finally:
        T.set_simd(before)
    np.testing.assert_array_equal(out, np.ascontiguousarray(view))


@pytest.mark.parametrize("shape,axes", [((300, 257), (1, 0)), ((5, 130, 70), (2, 0, 1)),
                                        ((4, 100, 90), (0, 2, 1)), ((40, 3, 200), (2, 1, 0))])
@pytest.mark.parametrize("threads", [1, 2])
def test_contiguous_copies_of_permuted_tensors(shape, axes, threads):
    """Tensor-level: permuted views made contiguous, at 1 and 2 threads, and the
    NumPy tiles the same."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    want = np.ascontiguousarray(x.transpose(axes))
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(threads)
        native.sync_threads()
        got = tl.Tensor(x).permute(axes).contiguous().numpy()
    finally:
        tl.utils.set_num_threads(before)
    np.testing.assert_array_equal(got, want)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel, "_transpose_module", lambda: None)
        np.testing.assert_array_equal(parallel.copy(x.transpose(axes)), want)


def test_refuses_what_it_cannot_copy():
    a = np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match="unit stride"):
        T.transpose_copy(a, np.zeros((8, 8), np.float32))  # the source is not transposed
    with pytest.raises(ValueError, match="shapes differ"):
        T.transpose_copy(np.zeros((8, 9), np.float32).T, np.zeros((8, 8), np.float32))
    with pytest.raises(ValueError, match="item size"):
        T.transpose_copy(a.T, np.zeros((8, 8), np.float64))
    with pytest.raises(ValueError, match="one shape"):
        T.transpose_copy(np.zeros(8, np.float32), np.zeros(8, np.float32))
    ro = np.zeros((8, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        T.transpose_copy(a.T, ro)
    with pytest.raises(TypeError):
        T.transpose_copy(a.T)


@pytest.mark.parametrize("shape,source,fill", [
    ((16, 32, 32, 32), (1, 32, 1, 1), True),     # a bias-like broadcast (once taken as a transpose)
    ((64, 256, 8, 8), (1, 1, 1, 1), True),       # a sum's gradient
    ((64, 256, 8, 8), (64, 256, 1, 1), True),
    ((512, 1024), (1, 1024), False),             # long rows: split over the threads
    ((512, 1024), (512, 1), True),
    ((4, 400, 200), (1, 400, 200), False),       # many distinct values
])
@pytest.mark.parametrize("threads", [1, 2])
def test_broadcast_copies(shape, source, fill, threads):
    """Broadcast views copied to row-major give NumPy's copy; those of few values, not
    in long rows, are one NumPy fill (the rule), whatever the threads."""
    x = np.broadcast_to(np.random.default_rng(1).standard_normal(source).astype(np.float32), shape)
    assert parallel._broadcast_fill(x) is fill
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(threads)
        native.sync_threads()
        got = parallel.copy(x)
        t = tl.Tensor(np.ascontiguousarray(x[(slice(0, 1),) * x.ndim]))
        through = t.broadcast_as(shape).contiguous().numpy() if source == (1,) * len(shape) else None
    finally:
        tl.utils.set_num_threads(before)
    np.testing.assert_array_equal(got, np.ascontiguousarray(x))
    if through is not None:
        np.testing.assert_array_equal(through, np.ascontiguousarray(x))


@pytest.mark.parametrize("shape", [(49, 2304), (3, 50, 70), (1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_transpose_into_writes_the_transpose_into_place(shape, threads):
    """parallel.transpose_into: a transposed view (unit stride along the second-to-last
    dim) copied into an existing C-contiguous array, as NumPy's copy would."""
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(threads)
        src = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        view = src.swapaxes(-1, -2)
        out = np.full(view.shape, np.nan, np.float32)
        parallel.transpose_into(out, view)
        np.testing.assert_array_equal(out, view)
    finally:
        tl.utils.set_num_threads(before)


def _builds():
    """(simd, avx512) for the builds of the 4-byte transposes this CPU has (4 x 4, 8 x 8
    and 16 x 16 register blocks)."""
    out = [(False, False)]
    if T.simd():
        out.append((True, False))
        was = T.avx512()
        try:
            T.set_avx512(True)
            out.append((True, True))
        except ValueError:
            pass
        T.set_avx512(was)
    return out


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 5), (4, 4), (8, 8), (16, 16), (17, 33), (32, 32), (100, 37), (64, 1031)])
@pytest.mark.parametrize("item", [np.uint32, np.float32])
def test_every_build_moves_each_4_byte_word_unchanged(rows, cols, item):
    """Each build gives NumPy's copy word for word, NaN payloads and signalling NaNs
    included (the blocks go through float registers: moves, never arithmetic)."""
    words = np.random.default_rng(rows * cols).integers(0, 2**32, (2, cols, rows), dtype=np.uint64).astype(np.uint32)
    words[0, ::3] = 0x7F800001 + np.arange(rows, dtype=np.uint32)  # signalling NaNs with payloads
    view = np.swapaxes(words.view(item), -1, -2)  # (2, rows, cols), unit stride along rows
    simd, zmm = T.simd(), T.avx512()
    try:
        for build in _builds():
            T.set_simd(build[0])
            T.set_avx512(build[1])
            out = np.zeros(view.shape, item)
            T.transpose_copy(view, out, False)
            np.testing.assert_array_equal(out.view(np.uint32), np.ascontiguousarray(view).view(np.uint32),
                                          err_msg=f"build {build}")
    finally:
        T.set_simd(simd)
        T.set_avx512(zmm)
