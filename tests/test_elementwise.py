"""Element-wise ops against NumPy and PyTorch, over dtypes and strided layouts."""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import erf as sp_erf

import tallow as tl
from support.differential import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close, np_values, strided

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def f64(x):
    return np.asarray(x).astype(np.float64)


def round_half_even(x):
    return np.rint(x)


FLOAT_REFS = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "exp": np.exp,
    "log": lambda x: np.log(np.abs(x) + 0.5),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sqr": np.square,
    "sqrt": lambda x: np.sqrt(np.abs(x)),
    "recip": lambda x: 1.0 / (np.abs(x) + 0.5),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + sp_erf(x / math.sqrt(2))),
    "erf": sp_erf,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "floor": np.floor,
    "ceil": np.ceil,
    "round": round_half_even,
    "sign": np.sign,
}
# Inputs adjusted so the reference is defined (log of positives, ...).
PREPARE = {
    "log": lambda t: t.abs() + 0.5,
    "sqrt": lambda t: t.abs(),
    "recip": lambda t: t.abs() + 0.5,
}


@pytest.mark.parametrize("op", sorted(FLOAT_REFS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_unary_float(op, dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    x = np_values((5, 7), dtype, rng)
    t = tl.Tensor(x, device=device)
    prep = PREPARE.get(op)
    out = getattr(prep(t) if prep else t, op)()
    assert out.dtype == dtype and out.shape == (5, 7)
    # The reference in f64 on the (rounded) input, then rounded to the dtype.
    expected = FLOAT_REFS[op](f64(x)).astype(dtype.np)
    assert_close(out, expected, dtype, device, loose=op in ("gelu", "silu"))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_unary_float_on_rank0_tensors(dtype, device):
    # A 0-d NumPy operand makes scalars, not arrays, which in-place kernels cannot write.
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    for op, ref in sorted(FLOAT_REFS.items()):
        x = np.array(0.75, dtype.np)
        prep = PREPARE.get(op, lambda t: t)  # the reference includes the preparation
        out = getattr(prep(tl.Tensor(x, device=device)), op)()
        assert out.shape == () and out.dtype == dtype, op
        assert_close(out, ref(f64(x)).astype(dtype.np), dtype, device, loose=True)
        view = tl.Tensor(np.full((2, 3), 0.75, dtype.np), device=device).t()[1, 0]
        assert_close(getattr(prep(view), op)(), ref(f64(x)).astype(dtype.np), dtype, device, loose=True)
    assert_close(tl.Tensor(np.array(-0.5, dtype.np), device=device).elu(0.5),
                 np.array(0.5 * np.expm1(-0.5)), dtype, device, loose=True)


@given(data=st.data())
@SETTINGS
def test_unary_on_strided_layouts(data, device):
    dtype = data.draw(st.sampled_from([tl.f32, tl.f64]))
    if not device.supports_dtype(dtype):
        return
    t, arr = data.draw(strided(dtype, device))
    op = data.draw(st.sampled_from(["exp", "tanh", "neg", "sqr", "relu", "sigmoid"]))
    out = getattr(t, op)()
    assert out.is_contiguous()
    assert_close(out, FLOAT_REFS[op](f64(arr)).astype(dtype.np), dtype, device)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_unary_int(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    x = np_values((4, 5), dtype, rng)
    t = tl.Tensor(x, device=device)
    np.testing.assert_array_equal(t.abs().numpy(), np.abs(x))
    np.testing.assert_array_equal(t.sqr().numpy(), np.square(x))
    np.testing.assert_array_equal(t.relu().numpy(), np.maximum(x, 0))
    np.testing.assert_array_equal(t.sign().numpy(), np.sign(x))
    if dtype == tl.i64:
        np.testing.assert_array_equal(t.neg().numpy(), -x)
    else:
        with pytest.raises(tl.UnsupportedDTypeError):
            t.neg()
    with pytest.raises(tl.UnsupportedDTypeError):
        t.exp()


def test_round_is_torch_half_to_even(device):
    values = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, 8388609.0,
              float("inf"), float("-inf")]
    t = tl.Tensor(values, device=device)
    assert t.round().values() == torch.tensor(values).round().tolist()
    assert math.isnan(tl.Tensor([float("nan")], device=device).round().values()[0])


def test_round_to_keeps_candles_halves_away_from_zero(device):
    t = tl.Tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997], device=device)
    assert t.round_to().values() == [-3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 0.0]
    assert tl.Tensor([1.2345, -1.2355], device=device).round_to(2).values() == pytest.approx([1.23, -1.24], abs=1e-6)


def test_gelu_erf_matches_torch(device):
    x = torch.linspace(-6, 6, 301, dtype=torch.float32)
    out = tl.Tensor(x.numpy(), device=device).gelu_erf()
    np.testing.assert_allclose(out.numpy(), torch.nn.functional.gelu(x).numpy(), atol=1e-6)
    out = tl.Tensor(x.numpy(), device=device).gelu()
    np.testing.assert_allclose(out.numpy(), torch.nn.functional.gelu(x, approximate="tanh").numpy(),
                               atol=2e-6)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_affine_powf_elu_clamp(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    x = np_values((3, 4), dtype, rng)
    t = tl.Tensor(x, device=device)
    xf = f64(x)
    assert_close(t.affine(2.5, -1.0), (xf * 2.5 - 1.0).astype(dtype.np), dtype, device, loose=True)
    assert_close(t.abs().powf(1.7), (np.abs(xf) ** 1.7).astype(dtype.np), dtype, device, loose=True)
    tx = torch.from_numpy(xf)
    assert_close(t.elu(0.7), torch.nn.functional.elu(tx, 0.7).numpy().astype(dtype.np), dtype, device, loose=True)
    assert_close(t.clamp(-1.0, 0.5), np.clip(xf, -1.0, 0.5).astype(dtype.np), dtype, device)
    assert_close(t.clamp(low=0.0), np.maximum(xf, 0).astype(dtype.np), dtype, device)


def test_integer_affine_wraps(device):
    t = tl.Tensor(np.array([0, 1, 250], np.uint8), device=device)
    np.testing.assert_array_equal(t.affine(2, 10).numpy(), np.array([10, 12, (500 + 10) % 256], np.uint8))
    np.testing.assert_array_equal(t.clamp(2, 100).numpy(), [2, 2, 100])


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_binary_same_shape(op, dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    a = np_values((4, 6), dtype, rng)
    b = np_values((4, 6), dtype, rng)
    if op == "div" and dtype.is_int:
        b = np.where(b == 0, 1, b).astype(dtype.np)
    ta, tb = tl.Tensor(a, device=device), tl.Tensor(b, device=device)
    out = getattr(ta, op)(tb)
    assert out.dtype == dtype
    if dtype.is_int:
        if op == "div":
            expected = np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(dtype.np)
        else:
            with np.errstate(over="ignore"):
                expected = BINARY[op](a, b)
        np.testing.assert_array_equal(out.numpy(), expected)
    else:
        expected = BINARY[op](f64(a), f64(b)).astype(dtype.np)
        assert_close(out, expected, dtype, device)


def test_integer_division_truncates_and_refuses_zero(device):
    if not device.supports_dtype(tl.i64):
        pytest.skip("no i64")
    a = tl.Tensor(np.array([7, -7, 7, -7], np.int64), device=device)
    b = tl.Tensor(np.array([2, 2, -2, -2], np.int64), device=device)
    # candle's div truncates; ``/`` is true division (docs/semantics.md, arithmetic).
    assert a.div(b).values() == [3, -3, -3, 3]
    assert a.broadcast_div(b).values() == [3, -3, -3, 3]
    assert (a / b).values() == [3.5, -3.5, -3.5, 3.5]
    if device.kind == "cpu":
        with pytest.raises(ZeroDivisionError):
            a.div(tl.zeros(4, dtype=tl.i64, device=device))


def test_pow_handles_negative_bases(device):
    # candle computes pow as exp(log(x) * y): NaN for negative bases. tallow does not.
    a = tl.Tensor([-2.0, 3.0, -1.5], device=device)
    b = tl.Tensor([2.0, 0.5, 3.0], device=device)
    np.testing.assert_allclose(a.pow(b).numpy(), [4.0, math.sqrt(3.0), -3.375], rtol=1e-6)
    np.testing.assert_allclose((a ** 2).numpy(), [4.0, 9.0, 2.25], rtol=1e-6)
    np.testing.assert_allclose((2.0 ** a).numpy(), [0.25, 8.0, 2 ** -1.5], rtol=1e-6)


@given(data=st.data())
@SETTINGS
def test_binary_on_strided_layouts(data, device):
    dtype = data.draw(st.sampled_from([tl.f32, tl.u32, tl.f64]))
    if not device.supports_dtype(dtype):
        return
    ta, a = data.draw(strided(dtype, device))
    seed = data.draw(st.integers(0, 1000))
    b = np_values(a.shape, dtype, np.random.default_rng(seed))
    tb = tl.Tensor(b, device=device)
    if data.draw(st.booleans()) and a.ndim >= 2:
        tb, b = tl.Tensor(np.ascontiguousarray(b.swapaxes(-1, -2)), device=device).t(), b
    op = data.draw(st.sampled_from(["add", "sub", "mul", "maximum"]))
    out = getattr(ta, op)(tb)
    with np.errstate(over="ignore"):
        expected = BINARY[op](a, b)
    if dtype.is_int:
        np.testing.assert_array_equal(out.numpy(), expected)
    else:
        assert_close(out, expected, dtype, device)


@given(data=st.data())
@SETTINGS
def test_broadcasting_binary_ops(data, device):
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.integers(1, 5)) for _ in range(rank))
    other = tuple(n if data.draw(st.booleans()) else 1 for n in shape)
    other = other[data.draw(st.integers(0, rank)):]
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(other).astype(np.float32)
    ta, tb = tl.Tensor(a, device=device), tl.Tensor(b, device=device)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        out = getattr(ta, "broadcast_" + op)(tb)
        assert_close(out, BINARY[op](a, b), tl.f32, device)
        rev = getattr(tb, "broadcast_" + op)(ta)
        assert_close(rev, BINARY[op](b, a), tl.f32, device)
    assert_close(ta + tb, a + b, tl.f32, device)
    assert_close(tb * ta, b * a, tl.f32, device)


def test_methods_without_broadcast_require_equal_shapes(device):
    a = tl.zeros((2, 3), device=device)
    b = tl.zeros((3,), device=device)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        with pytest.raises(tl.ShapeMismatchError, match=op):
            getattr(a, op)(b)
    assert (a + b).shape == (2, 3)
    with pytest.raises(tl.ShapeMismatchError):
        a.broadcast_add(tl.zeros((4,), device=device))


def test_scalar_operators(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = tl.Tensor(x, device=device)
    assert_close(t + 2.0, x + 2.0, tl.f32, device)
    assert_close(2.0 + t, 2.0 + x, tl.f32, device)
    assert_close(t - 1.5, x - 1.5, tl.f32, device)
    assert_close(1.5 - t, 1.5 - x, tl.f32, device)
    assert_close(t * 3, x * 3, tl.f32, device)
    assert_close(3 * t, 3 * x, tl.f32, device)
    assert_close(t / 4.0, x / 4.0, tl.f32, device)
    assert_close(4.0 / (t.abs() + 1), 4.0 / (np.abs(x) + 1), tl.f32, device)
    assert_close(-t, -x, tl.f32, device)
    assert_close(abs(t), np.abs(x), tl.f32, device)
    assert_close(t.maximum(0.5), np.maximum(x, 0.5), tl.f32, device)
    assert_close(t.minimum(0.5), np.minimum(x, 0.5), tl.f32, device)
    assert (t + 1.0).dtype == tl.f32


def test_scalar_operators_on_integers(device):
    # Python ints infer to i64; a float scalar computes in f32 (docs/semantics.md).
    t = tl.Tensor([1, 2, 3], device=device)
    assert t.dtype == tl.i64
    u = tl.Tensor([1, 2, 3], dtype=tl.u32, device=device)
    assert (u + 1).values() == [2, 3, 4]
    assert (u + 1).dtype == tl.u32
    assert (u * 2.0).values() == [2.0, 4.0, 6.0]
    assert (u * 2.0).dtype == tl.f32
    assert (t * 2.5).values() == [2.5, 5.0, 7.5]
    # A float scalar promotes the integer tensor to f32, as torch.clamp(u, min=2.5).
    m = u.maximum(2.5)
    assert m.dtype == tl.f32 and m.values() == [2.5, 2.5, 3.0]
    with pytest.raises(OverflowError):
        tl.Tensor(np.array([1], np.uint8), device=device) + 300


def test_candle_names_refuse_mixed_dtypes(device):
    # The operators promote (tests/semantics/test_promotion.py); candle's own names refuse.
    a = tl.zeros(3, dtype=tl.f32, device=device)
    b = tl.zeros(3, dtype=tl.f64, device=device) if device.supports_dtype(tl.f64) else tl.zeros(3, dtype=tl.u32, device=device)
    with pytest.raises(tl.DTypeMismatchError, match="f32"):
        a.broadcast_add(b)
    with pytest.raises(tl.DTypeMismatchError):
        a.reshape((1, 3)).matmul(b.reshape((3, 1)))


CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_comparisons_return_bool(dtype, device, rng):
    if not device.supports_dtype(dtype):
        pytest.skip(f"no {dtype} on {device}")
    a = np_values((3, 5), dtype, rng)
    b = a.copy()
    b[0] = np_values((5,), dtype, rng)
    ta, tb = tl.Tensor(a, device=device), tl.Tensor(b, device=device)
    for name, f in CMP.items():
        out = getattr(ta, name)(tb)
        assert out.dtype == tl.bool
        np.testing.assert_array_equal(out.numpy(), f(a, b))
    np.testing.assert_array_equal((ta == tb).numpy(), a == b)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_array_equal((ta >= 1).numpy(), a >= 1)


def test_comparison_broadcasts_like_candle_pyo3(device):
    mask_cond = tl.Tensor([0, 1, 2], device=device)
    mask = mask_cond < (mask_cond + 1).reshape((3, 1))
    assert mask.shape == (3, 3)
    assert mask.values() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_integer_comparison_with_unrepresentable_scalars(dtype, device):
    """inf, nan, fractions and ints beyond the dtype compare exactly (Python's answer)."""
    lo, hi = int(dtype.min), int(dtype.max)
    values = [lo, lo + 1, 7, hi - 1, hi]
    t = tl.Tensor(np.array(values, dtype=dtype.np), device=device)
    ops = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
    scalars = [math.inf, -math.inf, math.nan, 7.5, -0.5, hi + 1, lo - 1, hi + 0.5,
               2**64, -(2**64), float(hi - 1) if dtype is not tl.i64 else 2.0**62 + 0.5]
    for c in scalars:
        for name, f in ops.items():
            want = [int(f(v, c)) for v in values]
            assert getattr(t, name)(c).values() == want, (dtype, name, c)


def test_where_cond_needs_one_tensor_branch(device):
    c = tl.Tensor(np.array([1, 0], np.uint8), device=device)
    with pytest.raises(TypeError, match="where_cond"):
        c.where_cond(1.0, 0.0)


def test_where_cond(device, rng):
    c = (rng.random((4, 5)) > 0.5).astype(np.uint8)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((1, 5)).astype(np.float32)
    tc = tl.Tensor(c, device=device)
    out = tc.where_cond(tl.Tensor(a, device=device), tl.Tensor(b, device=device))
    np.testing.assert_array_equal(out.numpy(), np.where(c != 0, a, b))
    out = tc.where_cond(tl.Tensor(a, device=device), 0.0)
    np.testing.assert_array_equal(out.numpy(), np.where(c != 0, a, 0.0))
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.Tensor(a, device=device).where_cond(tl.Tensor(a, device=device), tl.Tensor(a, device=device))


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dst", ALL_DTYPES, ids=str)
def test_to_dtype_matches_rust_casts(src, dst, device, rng):
    if not (device.supports_dtype(src) and device.supports_dtype(dst)):
        pytest.skip("dtype not on this device")
    x = np_values((17,), src, rng, low=-300, high=300)
    t = tl.Tensor(x, device=device).to_dtype(dst)
    assert t.dtype == dst
    xf = x.astype(np.float64)
    if src.is_float and dst.is_int:
        # Rust's `as`: truncate toward zero, saturate at the bounds.
        expected = np.clip(np.trunc(xf), float(dst.min), float(dst.max)).astype(dst.np)
    else:
        expected = x.astype(dst.np)
    if dst.is_int:
        np.testing.assert_array_equal(t.numpy(), expected)
    else:
        assert_close(t, expected, dst, device)


def test_float_to_int_saturates_and_zeroes_nan():
    t = tl.Tensor(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.9, -2.9], np.float32))
    assert t.to_dtype(tl.u8).values() == [0, 255, 0, 255, 0, 2, 0]
    assert t.to_dtype(tl.i64).values() == [0, 2**63 - 1, -2**63, 2**63 - 1, -2**63, 2, -2]


def test_large_ops_split_over_threads_give_the_same_values():
    from tallow.backends.cpu import parallel

    before = tl.utils.get_num_threads()
    rng = np.random.default_rng(0)
    n = int(np.sqrt(parallel.MIN_ELEMENTS)) + 37  # above the threshold, rows not divisible evenly
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n,)).astype(np.float32)
    try:
        tl.utils.set_num_threads(3)
        ta, tb = tl.Tensor(a), tl.Tensor(b)
        np.testing.assert_array_equal((ta + ta).numpy(), a + a)
        np.testing.assert_array_equal(ta.t().contiguous().numpy(), a.T)
        np.testing.assert_array_equal((ta.t() * ta).numpy(), a.T * a)
        np.testing.assert_array_equal(ta.broadcast_add(tb).numpy(), a + b)
        np.testing.assert_array_equal((ta * 2.0).numpy(), a * 2.0)
        np.testing.assert_array_equal(ta.exp().numpy(), np.exp(a))
        np.testing.assert_allclose(ta.gelu_erf().numpy(), FLOAT_REFS["gelu_erf"](a.astype(np.float64)), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(ta.relu().numpy(), np.maximum(a, 0))
        np.testing.assert_array_equal(ta.abs().sqrt().numpy(), np.sqrt(np.abs(a)))
    finally:
        tl.utils.set_num_threads(before)
