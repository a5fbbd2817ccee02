"""Matrix products on the GPU: the tiled GEMM (128 x 128 tiles, loads ordered by
transposition, k-slices by dtype), the matrix-vector path, and every batch-stride
pattern, against the CPU backend."""

import numpy as np
import pytest

import tallow as tl
from support.gpu import check, skip_unless, values
from support.differential import ALL_DTYPES

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (1, 7, 9), (9, 7, 1), (1, 300, 1), (3, 1, 4), (16, 16, 16), (64, 64, 64),
          (65, 33, 17), (128, 16, 130), (31, 257, 5), (2, 600, 3), (300, 40, 1), (1, 40, 300)]


@pytest.mark.parametrize("m,k,n", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_matmul_shapes_and_transpositions(gpu, m, k, n):
    a = values((m, k), tl.f32, m * 7 + k)
    b = values((k, n), tl.f32, n * 11 + k)
    check(lambda x, y: x.matmul(y), [a, b], tl.f32, gpu)
    # transposed operands: same values, other strides
    check(lambda x, y: x.t().contiguous().t().matmul(y), [a, b], tl.f32, gpu)
    check(lambda x, y: x.matmul(y.t().contiguous().t()), [a, b], tl.f32, gpu)
    check(lambda x, y: x.t().contiguous().t().matmul(y.t().contiguous().t()), [a, b], tl.f32, gpu)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=[str(d) for d in ALL_DTYPES])
def test_matmul_dtypes(gpu, dtype):
    skip_unless(gpu, dtype)
    for m, k, n in ((33, 20, 47), (64, 32, 64), (1, 20, 9), (9, 20, 1), (2, 3, 2)):
        a = values((3, m, k), dtype, m)
        b = values((3, k, n), dtype, n)
        if dtype.is_int:  # keep integer products exact in every dtype
            a = (a % 7).astype(dtype.np)
            b = (b % 5).astype(dtype.np)
        check(lambda x, y: x.matmul(y), [a, b], dtype, gpu, loose=True)


def test_seed_narrowed_batch_matmul(gpu):
    # candle's Metal backend took one batch stride and read the wrong elements here.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    y = rng.standard_normal((2, 2, 5, 6)).astype(np.float32)
    xg = tl.Tensor(x, device=gpu).narrow(1, 0, 2)
    yg = tl.Tensor(y, device=gpu)
    assert xg.stride == (60, 15, 5, 1)
    got = xg.matmul(yg)
    ref = xg.contiguous().matmul(yg)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got.numpy(), x[:, :2] @ y, atol=1e-5, rtol=1e-5)
    for b0 in range(2):
        for b1 in range(2):
            diff = np.abs(got.numpy()[b0, b1] - x[b0, b1] @ y[b0, b1]).max()
            assert diff < 1e-5


BATCH_VIEWS = {
    "narrowed": lambda x, y: (x.narrow(1, 1, 2), y.narrow(1, 0, 2)),
    "broadcast_lhs": lambda x, y: (x.narrow(1, 0, 1).broadcast_as((2, 3) + x.shape[2:]), y.narrow(1, 0, 3)),
    "broadcast_rhs": lambda x, y: (x.narrow(1, 0, 3), y.narrow(0, 0, 1).broadcast_as((2,) + y.shape[1:]).narrow(1, 0, 3)),
    "permuted": lambda x, y: (x.permute((1, 0, 2, 3)).narrow(0, 0, 3), y.permute((1, 0, 2, 3)).narrow(0, 0, 3)),
    "transposed_batch": lambda x, y: (x.narrow(1, 0, 3).transpose(2, 3).transpose(2, 3),
                                      y.narrow(1, 0, 3).transpose(0, 1)),
}


@pytest.mark.parametrize("view", list(BATCH_VIEWS))
@pytest.mark.parametrize("mkn", [(3, 5, 6), (40, 33, 70), (1, 9, 8), (8, 9, 1)], ids=str)
def test_batch_stride_patterns(gpu, view, mkn):
    m, k, n = mkn
    x = values((2, 4, m, k), tl.f32, 1)
    y = values((2, 4, k, n), tl.f32, 2)
    f = BATCH_VIEWS[view]

    def run(a, b):
        a, b = f(a, b)
        if view == "transposed_batch":
            b = b.transpose(0, 1)
        return a.matmul(b)

    check(run, [x, y], tl.f32, gpu)


def test_broadcast_matmul_and_operators(gpu):
    a = values((4, 1, 5, 7), tl.f32, 3)
    b = values((3, 7, 2), tl.f32, 4)
    check(lambda x, y: x.broadcast_matmul(y), [a, b], tl.f32, gpu)
    check(lambda x, y: x @ y, [a, b], tl.f32, gpu)
    v = values((7,), tl.f32, 5)
    check(lambda x, y: x[0, 0] @ y, [a, v], tl.f32, gpu)
    check(lambda x, y: x.mv(y), [values((5, 7), tl.f32, 6), v], tl.f32, gpu)
    check(lambda x, y: x.dot(y), [v, v[::-1].copy()], tl.f32, gpu)


def test_empty_and_zero_k(gpu):
    for m, k, n in ((0, 3, 4), (3, 0, 4), (3, 4, 0)):
        a = np.ones((m, k), np.float32)
        b = np.ones((k, n), np.float32)
        check(lambda x, y: x.matmul(y), [a, b], tl.f32, gpu)


def test_large_matmul_against_numpy(gpu):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((257, 300)).astype(np.float32)
    b = rng.standard_normal((300, 193)).astype(np.float32)
    got = (tl.Tensor(a, device=gpu) @ tl.Tensor(b, device=gpu)).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    h = (tl.Tensor(a, device=gpu).to_dtype("f16") @ tl.Tensor(b, device=gpu).to_dtype("f16")).numpy()
    ref = (a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(h.astype(np.float32), ref, rtol=2e-3, atol=3e-2)


@pytest.mark.parametrize("dtype", [tl.f32, tl.f16, tl.f64, tl.i64, tl.u32], ids=str)
def test_tiles_edges_and_transpositions(gpu, dtype):
    # Whole tiles (no bounds checks), ragged edges in m, n and k (k-slices of 16, or
    # 8 for the 8-byte types), several tiles, and every transposition of the loads.
    skip_unless(gpu, dtype)
    for m, k, n in ((128, 64, 128), (130, 70, 129), (17, 200, 300), (256, 16, 256), (5, 9, 3)):
        a = values((2, m, k), dtype, m)
        b = values((2, k, n), dtype, n)
        loose = dtype is tl.f16
        check(lambda x, y: x.matmul(y), [a, b], dtype, gpu, loose=loose)
        check(lambda x, y: x.transpose(1, 2).contiguous().transpose(1, 2).matmul(y.transpose(1, 2).contiguous().transpose(1, 2)),
              [a, b], dtype, gpu, loose=loose)


def test_matrix_vector_with_more_rows_than_two_grid_rows(gpu):
    # One workgroup per output row: 140000 rows are more workgroups than 2 x 65535,
    # the most one dispatch may have in a dimension; the grid must grow in y.
    a = values((140_000, 2), tl.f32, 3)
    b = values((2, 1), tl.f32, 4)
    check(lambda x, y: x.matmul(y), [a, b], tl.f32, gpu)


def test_grids_over_the_workgroup_limit(gpu, monkeypatch):
    # Pretend a dispatch may have 3 workgroups per dimension: the GEMM is then split
    # into several dispatches over tiles of m and n, the GEMV's grid laid out in 2-D.
    import tallow.backends.gpu.matmul as mm

    monkeypatch.setattr(mm, "max_groups", lambda state: 3)
    for m, k, n in ((520, 7, 400), (33, 16, 17)):  # 5 x 4 tiles, and one
        a = values((2, m, k), tl.f32, m)
        b = values((2, k, n), tl.f32, n)
        check(lambda x, y: x.matmul(y), [a, b], tl.f32, gpu)
    for m, k, n in ((300, 5, 1), (1, 5, 300), (1, 300, 700)):
        a = values((m, k), tl.f32, m)
        b = values((k, n), tl.f32, n)
        check(lambda x, y: x.matmul(y), [a, b], tl.f32, gpu)
        check(lambda x, y: x.t().contiguous().t().matmul(y), [a, b], tl.f32, gpu)
