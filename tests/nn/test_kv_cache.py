"""KvCache and RotatingKvCache against a reference: NumPy concatenation of everything
appended (the last ``max_seq_len`` positions of it for the rotating cache)."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl
from tallow.nn.kv_cache import KvCache, RotatingKvCache

rng = np.random.default_rng(3)


def _chunks(lengths, heads=2, d=4, dv=3):
    return [(rng.standard_normal((1, heads, n, d)).astype(np.float32),
             rng.standard_normal((1, heads, n, dv)).astype(np.float32)) for n in lengths]


@pytest.mark.parametrize("lengths", [[5, 1, 1, 1], [1] * 20, [7, 250, 3, 40, 1], [300, 1]])
def test_kv_cache_returns_the_concatenation_so_far(lengths):
    cache = KvCache(2, 600)
    ks, vs = [], []
    for k, v in _chunks(lengths):
        ks.append(k)
        vs.append(v)
        got_k, got_v = cache.append(tl.Tensor(k), tl.Tensor(v))
        np.testing.assert_array_equal(got_k.numpy(), np.concatenate(ks, axis=2))
        np.testing.assert_array_equal(got_v.numpy(), np.concatenate(vs, axis=2))
        assert cache.current_seq_len == sum(len_ for len_ in lengths[:len(ks)])
    np.testing.assert_array_equal(cache.k().numpy(), np.concatenate(ks, axis=2))
    cache.reset()
    assert cache.current_seq_len == 0 and cache.k() is None


def test_kv_cache_grows_with_use_and_stops_at_max_seq_len():
    cache = KvCache(2, 1000)
    (k, v), = _chunks([10])
    cache.append(tl.Tensor(k), tl.Tensor(v))
    assert cache.k_cache.all_data.shape[2] == 256  # not the 1000 it may reach
    (k, v), = _chunks([300])
    cache.append(tl.Tensor(k), tl.Tensor(v))
    assert cache.k_cache.all_data.shape[2] == 512
    (k, v), = _chunks([690])
    cache.append(tl.Tensor(k), tl.Tensor(v))
    assert cache.k_cache.all_data.shape[2] == 1000 and cache.current_seq_len == 1000
    with pytest.raises(tl.ShapeMismatchError, match="max_seq_len 1000"):
        cache.append(tl.Tensor(k[:, :, :1]), tl.Tensor(v[:, :, :1]))


def test_kv_cache_truncate_rewrites_from_a_position():
    cache = KvCache(2, 64)
    (k1, v1), (k2, v2) = _chunks([6, 2])
    cache.append(tl.Tensor(k1), tl.Tensor(v1))
    cache.truncate(4)
    got_k, _ = cache.append(tl.Tensor(k2), tl.Tensor(v2))
    np.testing.assert_array_equal(got_k.numpy(), np.concatenate([k1[:, :, :4], k2], axis=2))
    with pytest.raises(tl.ShapeMismatchError, match="outside"):
        cache.truncate(7)


def test_kv_cache_refuses_a_new_batch_size_mid_sequence():
    cache = KvCache(2, 64)
    (k, v), = _chunks([3])
    cache.append(tl.Tensor(k), tl.Tensor(v))
    k2 = np.concatenate([k, k])
    with pytest.raises(tl.ShapeMismatchError, match="reset"):
        cache.append(tl.Tensor(k2), tl.Tensor(np.concatenate([v, v])))


@pytest.mark.parametrize("window,lengths", [(8, [3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
                                            (8, [5, 5, 5, 2, 7]), (4, [1] * 9),
                                            (6, [6, 1, 2]), (5, [2, 9, 1, 3])])
def test_rotating_cache_returns_the_last_window_in_order(window, lengths):
    cache = RotatingKvCache(2, window)
    ks, vs = [], []
    for k, v in _chunks(lengths):
        ks.append(k)
        vs.append(v)
        got_k, got_v = cache.append(tl.Tensor(k), tl.Tensor(v))
        all_k, all_v = np.concatenate(ks, axis=2), np.concatenate(vs, axis=2)
        if k.shape[2] >= window:  # a long append attends to all of itself (candle's rule)
            np.testing.assert_array_equal(got_k.numpy(), k)
        else:
            np.testing.assert_array_equal(got_k.numpy(), all_k[:, :, -window:])
            np.testing.assert_array_equal(got_v.numpy(), all_v[:, :, -window:])
        np.testing.assert_array_equal(cache.k().numpy(), all_k[:, :, -window:])
        assert cache.current_seq_len == all_k.shape[2]
    cache.reset()
    assert cache.current_seq_len == 0 and cache.k() is None
