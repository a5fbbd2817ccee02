"""candle's dtypes plus PyTorch's bool: names, casts (against NumPy and ml_dtypes),
bool results and masks (against PyTorch), storage and casts on the GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import tallow as tl

ALL = tl.dtype.ALL
SMALL = tl.dtype.SMALL_FLOATS


def test_names_as_candle_and_torch_spell_them():
    candle = ["bool", "u8", "u32", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
              "f8e4m3", "f6e2m3", "f6e3m2", "f4", "f8e8m0"]
    assert [str(d) for d in ALL] == candle
    for name in candle:
        assert tl.DType.parse(name) is getattr(tl, name)
    for alias, d in [("bool", tl.bool), ("int8", tl.i8), ("int16", tl.i16), ("int32", tl.i32),
                     ("int64", tl.i64), ("uint8", tl.u8), ("float8_e4m3fn", tl.f8e4m3),
                     ("float8_e8m0fnu", tl.f8e8m0), ("long", tl.i64)]:
        assert getattr(tl, alias) is d
        assert hasattr(torch, alias)  # the same spelling as PyTorch
    for name, np_type in [("f8e4m3", ml_dtypes.float8_e4m3fn), ("f6e2m3", ml_dtypes.float6_e2m3fn),
                          ("f6e3m2", ml_dtypes.float6_e3m2fn), ("f4", ml_dtypes.float4_e2m1fn),
                          ("f8e8m0", ml_dtypes.float8_e8m0fnu), ("i32", np.int32), ("bool", np.bool_)]:
        d = tl.DType.parse(name)
        assert d.np == np.dtype(np_type) and tl.DType.parse(np.dtype(np_type)) is d
        assert d.size_in_bytes == np.dtype(np_type).itemsize
    assert tl.bool.is_int and tl.bool.is_bool and not tl.bool.is_float
    assert all(d.is_float and d.is_small_float for d in SMALL)
    assert tl.DType.parse(float) is tl.f64 and tl.DType.parse(bool) is tl.bool
    assert tl.zeros(2, dtype=float).dtype == tl.f64 and torch.zeros(2, dtype=float).dtype == torch.float64


def _cast_values(src):
    """Values every dtype holds exactly (no wrap or saturation to disagree on)."""
    vals = [0, 1, 2, 3]
    if src.is_signed:
        vals += [-1, -2]
    if src.is_bool:
        vals = [0, 1, 1, 0]
    return np.array(vals, np.float64)


@pytest.mark.parametrize("src", ALL, ids=str)
def test_casts_between_every_pair_match_numpy(src, device):
    if not device.supports_dtype(src):
        pytest.skip(f"no {src} on {device}")
    vals = _cast_values(src)
    a = vals.astype(src.np)
    t = tl.tensor(a, device=device)
    assert t.dtype is src
    for dst in ALL:
        if not device.supports_dtype(dst):
            continue
        with np.errstate(invalid="ignore"):  # NaN to an integer, left out below
            if dst.is_bool:
                want = a != 0
            elif dst.is_small_float or src.is_small_float:
                want = a.astype(np.float32).astype(dst.np)  # tallow casts them through f32
            else:
                want = a.astype(dst.np)
        got = t.to_dtype(dst).numpy()
        assert got.dtype == dst.np
        if src.is_float and dst.is_int and not dst.is_signed and not dst.is_bool:
            # Negative floats to unsigned: candle's to_dtype saturates (Rust's `as`) at 0,
            # NumPy's cast is undefined; compared where both are defined.
            got, want = got[a >= 0], want[a >= 0]
        elif src.is_float and dst.is_int and not dst.is_bool:
            # NaN (f8e8m0 has no zero: 0 is NaN) to an integer: 0 as Rust's `as`; NumPy's
            # cast is undefined.
            keep = ~np.isnan(a.astype(np.float32))
            got, want = got[keep], want[keep]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{src} -> {dst}")


def test_gpu_casts_equal_the_cpu_bit_for_bit(gpu, rng):
    # Out-of-range and fractional values too: saturation, wrapping, NaN and rounding rules.
    floats = np.concatenate([rng.standard_normal(200) * 300, [0.5, -0.5, 1e10, -1e10, np.nan,
                            np.inf, -np.inf, 127.5, 128.0, -129.0, 32768.0, 2.0**31, -2.0**31 - 1e3]])
    for src in ALL:
        if not gpu.supports_dtype(src):
            continue
        host = tl.tensor(floats).to_dtype(src)
        dev = host.to_device(gpu)
        for dst in ALL:
            if not gpu.supports_dtype(dst):
                continue
            want = host.to_dtype(dst).numpy().view(np.uint8)
            got = dev.to_dtype(dst).numpy().view(np.uint8)
            if src is tl.f64 and dst.is_small_float:
                continue  # the GPU rounds f64 -> f32 -> small once (odd rounding); ml_dtypes twice
            np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst} on the GPU")


@pytest.mark.parametrize("small", SMALL, ids=str)
def test_gpu_small_float_codecs_match_ml_dtypes_exactly(small, gpu, rng):
    bits = {"f6e2m3": 6, "f6e3m2": 6, "f4": 4}.get(small.name, 8)
    codes = np.arange(2**bits, dtype=np.uint8).view(small.np)
    decoded = codes.astype(np.float32)
    got = tl.from_numpy(codes.copy()).to_device(gpu).to_dtype(tl.f32).numpy()
    np.testing.assert_array_equal(got, decoded)
    finite = np.unique(decoded[np.isfinite(decoded)])
    probes = np.concatenate([finite, (finite[:-1] + finite[1:]) / 2,
                             np.nextafter((finite[:-1] + finite[1:]) / 2, np.float32(np.inf)),
                             rng.standard_normal(3000) * 10, rng.standard_normal(1000) * 1e-3,
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-40]]).astype(np.float32)
    want = probes.astype(small.np).view(np.uint8)
    got = tl.tensor(probes, device=gpu).to_dtype(small).numpy().view(np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_every_dtype_round_trips_through_the_device(dtype, device):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    a = (np.arange(-7, 10) % 6).astype(np.float32).astype(dtype.np).reshape(1, 17)
    t = tl.tensor(a, device=device)
    def same(got, want):
        np.testing.assert_array_equal(np.ascontiguousarray(got.numpy()).view(np.uint8),
                                      np.ascontiguousarray(want).view(np.uint8))

    same(t, a)
    # Views of packed dtypes: a strided slice, a transpose, a copy.
    same(t[:, 1::3], a[:, 1::3])
    same(t.t().contiguous(), a.T)
    same(tl.cat([t, t], 1), np.concatenate([a, a], 1))


def test_comparisons_give_bool_and_masks_take_bool_or_u8(device):
    x = tl.tensor([[-1.0, 2.0], [3.0, -4.0]], device=device)
    tx = torch.tensor([[-1.0, 2.0], [3.0, -4.0]])
    for m, tm in [(x > 0, tx > 0), (x == 2.0, tx == 2.0), (x <= x, tx <= tx)]:
        assert m.dtype is tl.bool and m.values() == tm.tolist()
    mask_b, mask_u8 = x > 0, (x > 0).to_dtype(tl.u8)
    want = torch.where(tx > 0, tx, torch.zeros(()))
    for mask in (mask_b, mask_u8):
        assert tl.where(mask, x, 0.0).values() == want.tolist()
        assert mask.where_cond(x, tl.zeros_like(x)).values() == want.tolist()
        assert x.masked_fill(mask, 9.0).values() == tx.masked_fill(tx > 0, 9.0).tolist()
    assert x[mask_b].values() == tx[tx > 0].tolist()


def test_bool_logic_and_counts_as_torch(device):
    x = tl.tensor([-1.0, 2.0, 0.0, 5.0], device=device)
    tx = torch.tensor([-1.0, 2.0, 0.0, 5.0])
    m, tm = x > 0, tx > 0
    n, tn = x != 0, tx != 0
    for got, want in [(~m, ~tm), (m & n, tm & tn), (m | n, tm | tn), (m ^ n, tm ^ tn),
                      (m + n, tm + tn), (m * n, tm * tn), (m.sum(), tm.sum()),
                      (m.logical_not(), tm.logical_not()), (x.bool(), tx.bool()),
                      (m.any(), tm.any()), (m.all(), tm.all()), (m.cumsum(0), tm.cumsum(0)),
                      (m.to_dtype(tl.f32), tm.float()), (m / 2, tm / 2)]:
        assert str(got.dtype) == {torch.bool: "bool", torch.int64: "i64", torch.float32: "f32"}[want.dtype]
        assert got.values() == want.tolist()
    for f in (lambda a: a - a, lambda a: -a, lambda a: a // a, lambda a: a % a):
        with pytest.raises(tl.UnsupportedDTypeError):
            f(m)
        with pytest.raises(RuntimeError):
            f(tm)


@pytest.mark.parametrize("name", ["i8", "i16", "i32", "u8"])
def test_narrow_integers_compute_as_torch(name, device):
    d = tl.DType.parse(name)
    td = getattr(torch, {"i8": "int8", "i16": "int16", "i32": "int32", "u8": "uint8"}[name])
    a = [3, -7, 100, 0, 127] if d.is_signed else [3, 7, 100, 0, 255]
    b = [2, 3, -5, 9, 1] if d.is_signed else [2, 3, 5, 9, 1]
    x, y = tl.tensor(a, device=device).to_dtype(d), tl.tensor(b, device=device).to_dtype(d)
    tx, ty = torch.tensor(a).to(td), torch.tensor(b).to(td)
    for f in (lambda p, q: p + q, lambda p, q: p * q, lambda p, q: p - q, lambda p, q: p // q,
              lambda p, q: p % q, lambda p, q: p & q, lambda p, q: p ^ q, lambda p, q: ~p,
              lambda p, q: p.abs() if d.is_signed else p, lambda p, q: p.maximum(q),
              lambda p, q: p < q, lambda p, q: p.sum(), lambda p, q: p * 3, lambda p, q: p / q):
        got, want = f(x, y), f(tx, ty)
        assert got.values() == want.tolist(), (name, got.values(), want.tolist())
    assert x.sum().dtype is tl.i64  # PyTorch's sums of narrow integers are int64


def test_int_shorthands_are_torch_s(device):
    x = tl.tensor([-1.5, 0.0, 2.7, 300.0], device=device)
    tx = torch.tensor([-1.5, 0.0, 2.7, 300.0])
    assert x.int().dtype is tl.i32 and x.int().values() == tx.int().tolist()
    assert x.short().dtype is tl.i16 and x.short().values() == tx.short().tolist()
    assert x.char().dtype is tl.i8 and x.char().values()[:3] == tx.char().tolist()[:3]


_GPU_OPS = {
    "sum0": lambda t: t.sum(0), "max1": lambda t: t.max(1).values, "argmax": lambda t: t.argmax(1),
    "min": lambda t: t.min(), "cat": lambda t: tl.cat([t, t], 0), "narrow": lambda t: t.narrow(1, 1, 2),
    "index_select_i32": lambda t: t.index_select(tl.tensor([2, 0], device=t.device).to_dtype(tl.i32), 1),
    "gather_i16": lambda t: t.gather(tl.tensor([[0, 1, 2], [2, 1, 0], [1, 1, 1]], device=t.device).to_dtype(tl.i16), 1),
    "getitem_i8": lambda t: t[tl.tensor([1, 0], device=t.device).to_dtype(tl.i8)],
    "where": lambda t: tl.where(t.to_dtype(tl.i8) > 1, t, t), "sort": lambda t: t.sort(1).values,
    "cumsum": lambda t: t.cumsum(1), "mul3": lambda t: t * 3, "t": lambda t: t.t().contiguous(),
    "masked_fill": lambda t: t.masked_fill(t > 1, 0), "eq": lambda t: t == t, "mean": lambda t: t.mean(),
    "clamp": lambda t: t.clamp(0, 2), "matmul": lambda t: t @ t.t(),
    "zeros": lambda t: tl.zeros((2, 2), dtype=t.dtype, device=t.device),
}


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_gpu_ops_give_the_cpus_bits_for_every_dtype(dtype, gpu):
    if not gpu.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {gpu}")
    a = np.array([[1, 3, 2, 0], [2, 0, 3, 1], [0, 1, 1, 3]], np.float32).astype(dtype.np)
    cpu_t, gpu_t = tl.tensor(a), tl.tensor(a, device=gpu)
    for name, f in _GPU_OPS.items():
        try:
            want = f(cpu_t)
        except tl.TallowError as e:
            with pytest.raises(type(e)):
                f(gpu_t)
            continue
        got = f(gpu_t)
        assert got.dtype is want.dtype, name
        np.testing.assert_array_equal(np.ascontiguousarray(got.numpy()).view(np.uint8),
                                      np.ascontiguousarray(want.numpy()).view(np.uint8), err_msg=name)


def test_compiled_cpu_groups_fuse_bool_masks_and_keep_returned_ones():
    x = tl.tensor(np.linspace(-2, 2, 64, dtype=np.float32))

    def scaled(a):
        return ((a > 0).to_dtype(tl.f32) * a + 1.0) * 2.0

    f = tl.compile(scaled)
    f(x)
    np.testing.assert_array_equal(f(x).numpy(), scaled(x).numpy())
    assert f.stats()["fused_groups"] == 1 and f.stats()["calls"] == 0  # the mask's cast fused

    def with_mask(a):
        m = a > 0
        return (m.to_dtype(tl.f32) * a + 1.0) * 2.0, m

    g = tl.compile(with_mask)
    g(x)
    y, m = g(x)
    assert m.dtype is tl.bool and m.values() == (x > 0).values()  # a mask needed later is kept
    np.testing.assert_array_equal(y.numpy(), with_mask(x)[0].numpy())


def test_full_of_a_bool_is_bool_as_torch(device):
    assert tl.full((2,), True, device=device).dtype is tl.bool
    assert str(torch.full((2,), True).dtype) == "torch.bool"
    assert tl.full((2,), True, device=device).values() == [True, True]
