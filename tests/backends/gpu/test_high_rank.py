"""GPU ops on layouts no kernel reads directly: more dims than the kernels take
(MAX_RANK, MAX_BATCH_RANK) that do not merge. The backend runs them on a compact
copy; the results must equal NumPy's."""

import numpy as np
import pytest

import tallow as tl
from tallow.backends.gpu import indexing, matmul, reduce
from tallow.backends.gpu.kernel_args import MAX_RANK
from tallow.backends.gpu.matmul import MAX_BATCH_RANK

pytestmark = pytest.mark.gpu

RANK = MAX_RANK + 2


@pytest.fixture
def compactions(monkeypatch):
    """Counts the compact copies the backend makes, so that each test checks it
    ran the path it is about."""
    calls = []

    def counting(module, name):
        real = getattr(module, name)

        def wrapper(*args):
            calls.append(name)
            return real(*args)
        monkeypatch.setattr(module, name, wrapper)

    counting(reduce, "compact_via_host")
    counting(matmul, "compact_via_host")
    counting(indexing, "_compact")
    return calls


def unmergeable(shape, seed, device):
    """(tensor, NumPy twin) of ``shape`` whose dims cannot merge: a reversed
    permutation of a contiguous buffer (strides grow left to right)."""
    arr = np.random.default_rng(seed).standard_normal(shape[::-1]).astype(np.float32)
    perm = tuple(range(len(shape)))[::-1]
    t = tl.from_numpy(arr).to_device(device).permute(perm)
    return t, arr.transpose(perm)


def test_reductions(gpu, compactions):
    shape = (2, 3) * (RANK // 2)
    t, a = unmergeable(shape, 1, gpu)
    for d in (0, RANK - 1, 4):
        np.testing.assert_allclose(t.sum(d).numpy(), a.sum(d), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(t.max(d).values.numpy(), a.max(d))
        np.testing.assert_array_equal(t.argmin(d).numpy(), a.argmin(d))
    assert compactions


def test_cumsum_and_sort(gpu, compactions):
    shape = (2,) * (RANK - 1) + (5,)
    t, a = unmergeable(shape, 2, gpu)
    for d in (0, RANK - 1):
        np.testing.assert_allclose(t.cumsum(d).numpy(), np.cumsum(a, d), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(t.argsort(-1).numpy(), np.argsort(a, -1, kind="stable"))
    np.testing.assert_array_equal(t.sort(-1, descending=True).values.numpy(), -np.sort(-a, -1))
    assert len(compactions) >= 3  # two scans and a sort


def test_index_select_and_gather(gpu, compactions):
    shape = (2,) * (RANK - 1) + (4,)
    t, a = unmergeable(shape, 3, gpu)
    ids = np.array([3, 0, 3], np.int64)
    np.testing.assert_array_equal(t.index_select(tl.tensor(ids, device=gpu), RANK - 1).numpy(),
                                  np.take(a, ids, RANK - 1))
    assert compactions == ["_compact"]
    gids = np.random.default_rng(4).integers(0, 4, shape).astype(np.int64)
    np.testing.assert_array_equal(t.gather(tl.tensor(gids, device=gpu), RANK - 1).numpy(),
                                  np.take_along_axis(a, gids, RANK - 1))
    assert compactions == ["_compact"] * 3  # the source, then the source and the ids


def test_matmul_with_many_batch_dims(gpu, compactions):
    batch = (2,) * (MAX_BATCH_RANK + 1)
    lhs, a = unmergeable(batch + (3, 4), 5, gpu)
    rhs, b = unmergeable(batch + (4, 2), 6, gpu)
    np.testing.assert_allclose(lhs.matmul(rhs).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    assert compactions == ["compact_via_host"] * 2
    vec, v = unmergeable(batch + (4, 1), 7, gpu)  # the matrix-vector kernel
    np.testing.assert_allclose(lhs.matmul(vec).numpy(), a @ v, rtol=1e-5, atol=1e-5)
