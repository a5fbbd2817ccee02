"""Reductions, cumsum, sorting against NumPy and PyTorch."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import ALL_DTYPES, FLOAT_DTYPES, assert_close, np_values, strided

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@given(data=st.data())
@SETTINGS
def test_sum_max_min_over_strided_layouts(data, device):
    dtype = data.draw(st.sampled_from([tl.f32, tl.f64, tl.i64, tl.u32]))
    if not device.supports_dtype(dtype):
        return
    t, arr = data.draw(strided(dtype, device))
    rank = arr.ndim
    dims = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    out = t.sum_keepdim(dims)
    expected = np.sum(arr, axis=tuple(dims), keepdims=True, dtype=dtype.np)
    assert_close(out, expected, dtype, device)
    assert_close(t.sum(dims), np.sum(arr, axis=tuple(dims), dtype=dtype.np), dtype, device)
    d = dims[0]
    assert_close(t.max_keepdim(d), np.max(arr, axis=d, keepdims=True), dtype, device)
    # min(dim) returns (values, indices) and argmax i64, as PyTorch (docs/semantics.md).
    assert_close(t.min(d).values, np.min(arr, axis=d), dtype, device)
    np.testing.assert_array_equal(t.min(d).indices.numpy(), np.argmin(arr, axis=d))
    am = t.argmax(d)
    assert am.dtype == tl.i64
    np.testing.assert_array_equal(am.numpy(), np.argmax(arr, axis=d))
    np.testing.assert_array_equal(t.argmin_keepdim(d).numpy(), np.argmin(arr, axis=d, keepdims=True))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_means_and_alls(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    x = np_values((4, 5, 6), dtype, rng)
    t = tl.Tensor(x, device=device)
    xf = x.astype(np.float64)
    assert_close(t.mean_keepdim(1), xf.mean(axis=1, keepdims=True).astype(dtype.np), dtype, device)
    assert_close(t.mean((0, 2)), xf.mean(axis=(0, 2)).astype(dtype.np), dtype, device)
    assert t.sum_all().shape == ()
    assert_close(t.sum_all(), np.asarray(xf.sum()).astype(dtype.np), dtype, device, loose=True)
    assert_close(t.mean_all(), np.asarray(xf.mean()).astype(dtype.np), dtype, device, loose=True)
    assert_close(t.max_all(), np.asarray(x.max()), dtype, device)
    assert_close(t.min_all(), np.asarray(x.min()), dtype, device)


def test_var_matches_torch(device, rng):
    x = rng.standard_normal((4, 7)).astype(np.float32)
    t = tl.Tensor(x, device=device)
    tx = torch.from_numpy(x)
    assert_close(t.var_keepdim(1), tx.var(1, keepdim=True).numpy(), tl.f32, device)
    assert_close(t.var(0), tx.var(0).numpy(), tl.f32, device)


def test_integer_sums_wrap_in_their_dtype(device):
    # u8 sums accumulate in i64 and never wrap (docs/semantics.md, comparisons and masks);
    # u32 sums keep candle's wrapping.
    t = tl.Tensor(np.array([200, 100, 10], np.uint8), device=device)
    assert t.sum_all().values() == 310
    assert t.sum_all().dtype == tl.i64
    u = tl.Tensor(np.array([2**32 - 1, 2], np.uint32), device=device)
    assert u.sum_all().values() == 1
    assert u.sum_all().dtype == tl.u32


def test_half_sums_accumulate_in_f32(device):
    if not device.supports_dtype(tl.f16):
        pytest.skip("no f16")
    x = np.full(4096, 0.1, np.float16)
    s = tl.Tensor(x, device=device).sum_all().values()
    assert abs(s - 4096 * float(np.float16(0.1))) < 1.0  # f16 accumulation would stall at 256


@pytest.mark.parametrize("dtype", [tl.f16, tl.bf16], ids=str)
def test_half_means_and_variances_do_not_overflow_like_torch(dtype, device):
    # The f32 sum is fine; scaling it only after rounding it to f16 gave inf.
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    big = 100.0 if dtype is tl.f16 else 1e33
    x = np.full((40, 1000), big, np.float32)
    x[:, ::2] *= 0.5
    tx = torch.from_numpy(x).to(torch.float16 if dtype is tl.f16 else torch.bfloat16)
    t = tl.Tensor(x, device=device).to_dtype(dtype)
    assert_close(t.mean_all(), tx.mean().float().numpy(), dtype, device)
    assert_close(t.mean(1), tx.mean(1).float().numpy(), dtype, device)
    assert_close(t.mean_keepdim(1), tx.mean(1, keepdim=True).float().numpy(), dtype, device)
    assert_close(t.mean((0, 1)), tx.mean((0, 1)).float().numpy(), dtype, device)
    if dtype is tl.f16:
        y = np.linspace(0, 300, 4000).astype(np.float32)
        ty = torch.from_numpy(y).half()
        assert_close(tl.Tensor(y, device=device).to_dtype(dtype).var(0), ty.var(0).float().numpy(),
                     dtype, device)


def test_log_sum_exp_of_infinite_rows_matches_torch(device):
    # A fully masked row (all -inf) is -inf in PyTorch, not nan (inf - inf).
    inf = np.inf
    x = np.array([[-inf, -inf, -inf], [inf, 1.0, 2.0], [-inf, 0.0, 1.0]], np.float32)
    t = tl.Tensor(x, device=device)
    assert_close(t.log_sum_exp(1), torch.logsumexp(torch.from_numpy(x), dim=1).numpy(), tl.f32, device)
    row = tl.Tensor(x[[0]], device=device)
    assert_close(row.log_sum_exp((0, 1)), torch.logsumexp(torch.from_numpy(x[[0]]), dim=(0, 1)).numpy(),
                 tl.f32, device)
    y = x[[0, 2]]
    assert_close(tl.Tensor(y, device=device).log_sum_exp(0),
                 torch.logsumexp(torch.from_numpy(y), dim=0).numpy(), tl.f32, device)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cumsum(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    x = np_values((3, 8), dtype, rng)
    t = tl.Tensor(x, device=device)
    # u8 cumsums accumulate in and return i64, as PyTorch's (docs/semantics.md).
    out_np = np.int64 if dtype == tl.u8 else dtype.np
    for d in (0, 1, -1):
        acc = np.float32 if dtype in (tl.f16, tl.bf16) else out_np
        assert_close(t.cumsum(d), np.cumsum(x, axis=d, dtype=acc).astype(out_np), dtype, device,
                     loose=True)
    assert_close(t.t().cumsum(0), np.cumsum(x.T, axis=0, dtype=out_np if dtype.is_int else np.float64).astype(out_np), dtype, device, loose=True)


def test_log_sum_exp_is_stable(device):
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]], np.float32)
    t = tl.Tensor(x, device=device)
    expected = torch.logsumexp(torch.from_numpy(x), dim=1).numpy()
    assert_close(t.log_sum_exp(1), expected, tl.f32, device)
    assert_close(t.log_sum_exp((0, 1)), torch.logsumexp(torch.from_numpy(x), dim=(0, 1)).numpy(), tl.f32, device)


def test_norm(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    assert tl.Tensor(x, device=device).norm().values() == pytest.approx(float(np.linalg.norm(x)), rel=1e-5)


@pytest.mark.parametrize("dtype", [tl.f32, tl.u32, tl.i64], ids=str)
def test_sorting_is_stable_both_ways(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype}")
    x = rng.integers(0, 5, size=(4, 9)).astype(dtype.np)  # many ties
    t = tl.Tensor(x, device=device)
    idx = t.arg_sort_last_dim(True)
    assert idx.dtype == tl.u32
    np.testing.assert_array_equal(idx.numpy(), np.argsort(x, axis=-1, kind="stable"))
    vals, idx = t.sort_last_dim(False)
    expected_idx = torch.sort(torch.from_numpy(x.astype(np.int64)), dim=-1, descending=True, stable=True).indices
    np.testing.assert_array_equal(idx.numpy(), expected_idx.numpy())
    np.testing.assert_array_equal(vals.numpy(), -np.sort(-x.astype(np.int64), axis=-1))


def test_reduction_errors(device):
    t = tl.zeros((2, 3), device=device)
    with pytest.raises(tl.DimOutOfRangeError):
        t.sum_keepdim(2)
    with pytest.raises(tl.DimOutOfRangeError):
        t.max(-3)
    with pytest.raises(tl.ShapeMismatchError):
        t.sum_keepdim([0, 0])
    with pytest.raises(tl.TallowError):
        tl.zeros((0, 3), device=device).max(0)
