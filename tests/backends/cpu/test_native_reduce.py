"""The f32 sum of native/_reduce.c (``Tensor.sum_all`` of a large contiguous f32
tensor): one fixed order of additions, so the same bits with the scalar, AVX2 and
AVX-512 builds and at any thread count; float64's value within NumPy's accuracy;
NumPy's and PyTorch's special values (infinities, NaN, negative zeros)."""

import contextlib

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.backends.cpu import native, reduce

try:
    from tallow.backends.cpu.native import _reduce
except ImportError:  # pragma: no cover - without a compiler
    _reduce = None

pytestmark = pytest.mark.skipif(_reduce is None or not native.available(),
                                reason="the native reduce module is not built")

BLOCK = 2048
# Around a lane row (128), a block (2048), 16 blocks and the Tensor path's threshold
# (2^15).
SIZES = [0, 1, 2, 127, 128, 129, BLOCK - 1, BLOCK, BLOCK + 1, 16 * BLOCK - 1, 16 * BLOCK + 5,
         (1 << 15) + 3, 100_003, (1 << 20) + 7]


@contextlib.contextmanager
def isa(simd, avx512):
    was = (_reduce.simd(), _reduce.avx512())
    _reduce.set_simd(simd)
    if avx512 or was[1]:
        _reduce.set_avx512(avx512)
    try:
        yield
    finally:
        _reduce.set_simd(was[0])
        if avx512 or was[1]:
            _reduce.set_avx512(was[1])


def _builds():
    out = [(False, False)]
    if _reduce.simd() or native.isa_wanted() is None:
        out.append((True, False))
    try:
        with isa(True, True):
            out.append((True, True))
    except ValueError:  # no AVX-512 on this CPU
        pass
    return out


def _at_threads(n, fn):
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(n)
        native.sync_threads()
        return fn()
    finally:
        tl.utils.set_num_threads(before)


@pytest.mark.parametrize("n", SIZES)
def test_every_build_gives_the_same_bits_and_float64_s_value(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * rng.uniform(0.1, 100.0, n)).astype(np.float32)
    sums = set()
    for simd, avx512 in _builds():
        with isa(simd, avx512):
            sums.add(_reduce.sum_f32(x))
    assert len(sums) == 1, sums
    got = sums.pop()
    want = float(np.sum(x.astype(np.float64)))
    # NumPy's float32 pairwise sum is the accuracy to meet
    numpy_error = abs(float(np.add.reduce(x)) - want)
    scale = float(np.sum(np.abs(x.astype(np.float64))))
    assert abs(got - want) <= max(4 * numpy_error, 1e-6 * scale), (got, want, numpy_error)


def test_any_shape_of_a_contiguous_buffer_and_the_refusals():
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    assert _reduce.sum_f32(x) == float(x.sum())
    assert _reduce.sum_f32(np.zeros(0, np.float32)) == 0.0
    with pytest.raises(TypeError):
        _reduce.sum_f32(x.astype(np.float64))
    with pytest.raises((TypeError, ValueError, BufferError)):
        _reduce.sum_f32(x[:, ::2])  # not contiguous


@pytest.mark.parametrize("values, want", [
    ([np.inf, 1.0], np.inf), ([-np.inf, 1.0], -np.inf), ([np.inf, -np.inf], np.nan),
    ([np.nan, 1.0], np.nan), ([-0.0, -0.0], 0.0), ([3.0e38, 3.0e38], np.inf),
])
def test_special_values_as_numpy_and_pytorch(values, want):
    n = (1 << 15) + 11
    x = np.zeros(n, np.float32)
    x[[5, n - 3]] = values
    if want == 0.0:
        x[:] = -0.0
    got = tl.Tensor(x).sum_all().numpy()
    np.testing.assert_array_equal(got, np.float32(want))
    np.testing.assert_array_equal(got, torch.from_numpy(x).sum().numpy())
    if want == 0.0:  # negative zeros sum to +0.0
        assert not np.signbit(got)


def test_sum_all_takes_it_from_the_threshold_with_the_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 256, 64)).astype(np.float32)
    t = tl.Tensor(x)
    ones, twos = _at_threads(1, lambda: t.sum_all().numpy()), _at_threads(2, lambda: t.sum_all().numpy())
    assert ones.shape == () and ones.dtype == np.float32
    np.testing.assert_array_equal(ones, twos)
    assert ones == np.float32(_reduce.sum_f32(x))
    np.testing.assert_allclose(ones, x.astype(np.float64).sum(), rtol=1e-5)
    # below the threshold: NumPy's own sum, its bits
    small = x[0, :100]
    assert tl.Tensor(small).sum_all().numpy() == np.add.reduce(small, axis=None)
    assert small.size < reduce.NATIVE_SUM_MIN <= x.size


def test_views_and_broadcasts_keep_their_values():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    t = tl.Tensor(x)
    # a strided view: NumPy's path
    np.testing.assert_allclose(t[:, ::2].sum_all().numpy(), x[:, ::2].astype(np.float64).sum(), rtol=1e-5)
    # a broadcast of a large row: its copies collapsed, the row summed here
    row = tl.Tensor(x.reshape(-1)[: (1 << 16)]).reshape((1, 1 << 16)).broadcast_as((3, 1 << 16))
    np.testing.assert_allclose(row.sum_all().numpy(), 3 * x.reshape(-1)[: (1 << 16)].astype(np.float64).sum(),
                               rtol=1e-5)
    # the gradient of a sum is still ones
    v = tl.Var(x)
    g = v.sum_all().backward()[v].numpy()
    assert g.shape == x.shape and np.all(g == 1.0)
