"""Every op of the backend protocol on the GPU against the CPU backend, for every
dtype the op takes, on contiguous and strided layouts (transposed, narrowed,
stepped, broadcast)."""

import numpy as np
import pytest

import tallow as tl
from support.gpu import VIEWS, both, check, on, skip_unless, values
from support.differential import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close
from support.exact_bf16 import bf16_bits
from tallow.backends.base import BINARY_OPS, CMP_OPS, INT_UNARY_OPS, UNARY_OPS

pytestmark = pytest.mark.gpu
IDS = [str(d) for d in ALL_DTYPES]
FIDS = [str(d) for d in FLOAT_DTYPES]
LAYOUTS = list(VIEWS)


def _domain(op, arr):
    if op in ("log", "sqrt"):
        return np.abs(arr) + 0.1
    return arr


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=FIDS)
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_float(gpu, op, dtype):
    skip_unless(gpu, dtype)
    x = _domain(op, values((6, 5), dtype, 1))
    for view in LAYOUTS:
        check(lambda t: getattr(t, op)(), [x], dtype, gpu, view, loose=op in ("gelu_erf", "erf"))


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=[str(d) for d in INT_DTYPES])
def test_unary_int(gpu, dtype):
    skip_unless(gpu, dtype)
    x = values((6, 5), dtype, 2)
    for op in UNARY_OPS:
        runs = op in INT_UNARY_OPS and not (op == "neg" and dtype is not tl.i64)
        if runs:
            for view in LAYOUTS:
                check(lambda t: getattr(t, op)(), [x], dtype, gpu, view)
        else:
            for dev in (tl.cpu, gpu):
                with pytest.raises(tl.UnsupportedDTypeError):
                    getattr(on(x, dtype, dev), op)()


def test_unary_special_values(gpu):
    v = np.array([np.nan, 1.0, -np.inf, np.inf, 0.0, -0.0, 2.5, -2.5, 0.5, -1.5, 30.0, -30.0,
                  88.0, -100.0, 1e-6, 65519.0, 65520.0, 1e30])
    for dtype in FLOAT_DTYPES:
        if not gpu.supports_dtype(dtype):
            continue
        for op in UNARY_OPS:
            if op in ("sin", "cos"):
                continue  # huge arguments: GPU sin/cos are not correctly reduced there
            with np.errstate(all="ignore"):
                check(lambda t: getattr(t, op)(), [v], dtype, gpu)
        with np.errstate(all="ignore"):
            check(lambda t: t.sin(), [v[np.abs(v) < 100]], dtype, gpu)
            check(lambda t: t.cos(), [v[np.abs(v) < 100]], dtype, gpu)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_scalar_param_ops(gpu, dtype):
    skip_unless(gpu, dtype)
    x = values((4, 7), dtype, 3)
    for view in LAYOUTS:
        if dtype.is_float:
            check(lambda t: t.affine(1.7, -0.3), [x], dtype, gpu, view)
            check(lambda t: t.powf(1.3), [np.abs(x)], dtype, gpu, view)
            check(lambda t: t.powf(2.0), [x], dtype, gpu, view)
            check(lambda t: t.elu(0.8), [x], dtype, gpu, view)
            check(lambda t: t.clamp(-1.2, 0.7), [x], dtype, gpu, view)
            check(lambda t: t.clamp(None, 0.7), [x], dtype, gpu, view)
        else:
            check(lambda t: t.affine(3, 5), [x], dtype, gpu, view)
            check(lambda t: t.clamp(50, 120), [x], dtype, gpu, view)
            check(lambda t: t.clamp(low=7), [x], dtype, gpu, view)
            for dev in (tl.cpu, gpu):
                with pytest.raises(tl.UnsupportedDTypeError):
                    on(x, dtype, dev).powf(2.0)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary(gpu, op, dtype):
    skip_unless(gpu, dtype)
    a = values((5, 6), dtype, 4)
    b = values((5, 6), dtype, 5)
    if dtype.is_int and op in ("div", "rem", "floor_div"):
        b = np.maximum(b, 1).astype(dtype.np)
    if (dtype.is_int and op == "pow") or (dtype.is_float and op.startswith("bit_")):
        for dev in (tl.cpu, gpu):
            with pytest.raises(tl.UnsupportedDTypeError):
                on(a, dtype, dev)._binop(op, on(b, dtype, dev), False)
        return
    if op == "pow":
        a = np.abs(a).astype(dtype.np)
    # The ops behind Python's operators (%, //, &, |, ^) have no same-shape method.
    for view in LAYOUTS:
        check(lambda x, y: x._binop(op, y, False), [a, b], dtype, gpu, view)
    # broadcasting a row and a column
    check(lambda x, y: x._binop(op, y[:1], True), [a, b], dtype, gpu)
    check(lambda x, y: x._binop(op, y[:, :1], True), [a, b], dtype, gpu)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_binary_scalar(gpu, dtype):
    skip_unless(gpu, dtype)
    a = values((5, 6), dtype, 6)
    if dtype.is_int:
        a = np.maximum(a, 1).astype(dtype.np)
    scalar = 3 if dtype.is_int else 1.37
    for op in ("add", "sub", "mul", "div", "maximum", "minimum") + (("pow",) if dtype.is_float else ()):
        for left in (False, True):
            x = np.abs(a).astype(dtype.np) if op == "pow" else a
            check(lambda t: t._scalar(op, scalar, left), [x], dtype, gpu, "transposed")
    check(lambda t: 2 * t + 1, [a], dtype, gpu)


def test_integer_division(gpu):
    a = np.array([7, -7, 9, -9, 0, 100], np.int64)
    b = np.array([2, 2, -4, -4, 3, 7], np.int64)
    check(lambda x, y: x.div(y), [a, b], tl.i64, gpu)
    # candle's integer division by a scalar (``/`` is true division: docs/semantics.md).
    check(lambda x: x._scalar("div", 3, False), [a], tl.i64, gpu)
    check(lambda x, y: x // y, [a, b], tl.i64, gpu)
    check(lambda x, y: x % y, [a, b], tl.i64, gpu)
    for dtype in (tl.u8, tl.u32, tl.i64):
        x = tl.Tensor(np.array([4, 2]), device=gpu).to_dtype(dtype)
        z = tl.Tensor(np.array([2, 0]), device=gpu).to_dtype(dtype)
        with pytest.raises(ZeroDivisionError):
            x.div(z)
        with pytest.raises(ZeroDivisionError):
            x._scalar("div", 0, False)
        with pytest.raises(ZeroDivisionError):
            x // 0
        with pytest.raises(ZeroDivisionError):
            x % z
        with pytest.raises(ZeroDivisionError):
            z._scalar("div", 6, True)
        with pytest.raises(ZeroDivisionError):
            6 // z


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_comparisons_and_where(gpu, dtype):
    skip_unless(gpu, dtype)
    a = values((6, 5), dtype, 7)
    b = np.where(np.random.default_rng(8).random((6, 5)) < 0.4, a, values((6, 5), dtype, 9))
    scalar = 5 if dtype.is_int else 0.5
    for op in CMP_OPS:
        for view in ("contiguous", "transposed", "broadcast"):
            check(lambda x, y: getattr(x, op)(y), [a, b], dtype, gpu, view)
        check(lambda x: getattr(x, op)(scalar), [a], dtype, gpu)
    for cond_dtype in (tl.u8, tl.u32, tl.i64):
        if not gpu.supports_dtype(cond_dtype):
            continue
        c = (np.random.default_rng(10).random((6, 5)) < 0.5).astype(np.int64)
        for view in ("contiguous", "transposed"):
            check(lambda m, x, y: m.to_dtype(cond_dtype).where_cond(x, y), [c, a, b], dtype, gpu, view)
    check(lambda x: (x > 0).where_cond(x, 0), [a], dtype, gpu)


def test_comparisons_with_nan(gpu):
    v = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0, np.inf])
    w = np.array([np.nan, np.nan, 1.0, -np.inf, 2.0, 1.0])
    for dtype in FLOAT_DTYPES:
        if gpu.supports_dtype(dtype):
            for op in CMP_OPS:
                check(lambda x, y: getattr(x, op)(y), [v, w], dtype, gpu)
                check(lambda x: getattr(x, op)(float("nan")), [v], dtype, gpu)
            for op in ("maximum", "minimum"):
                check(lambda x, y: getattr(x, op)(y), [v, w], dtype, gpu)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=IDS)
def test_casts(gpu, src):
    skip_unless(gpu, src)
    if src.is_float:
        x = np.array([0.0, 1.5, -1.5, 2.5, 255.9, 256.0, -300.0, 70000.0, 3e9, 5e9, -5e9, 1e19,
                      np.nan, np.inf, -np.inf, 0.1, 65519.0, 65520.0, 1e-8])
    else:
        x = values((40,), src, 11)
    for dst in ALL_DTYPES:
        if not gpu.supports_dtype(dst):
            continue
        with np.errstate(all="ignore"):
            check(lambda t: t.to_dtype(dst), [x], src, gpu)
            check(lambda t: t[::3].to_dtype(dst), [x], src, gpu)


def test_cast_rounding_is_exact(gpu):
    # f32 -> f16 / bf16 rounding (ties to even, subnormals, overflow) bit for bit.
    rng = np.random.default_rng(12)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000),
                        np.arange(-70000, 70000, 7.125)]).astype(np.float32)
    for dst in (tl.f16, tl.bf16):
        with np.errstate(over="ignore"):
            c, g = both(lambda t: t.to_dtype(dst), [x], tl.f32, gpu)
            back = both(lambda t: t.to_dtype(dst).to_dtype(tl.f32), [x], tl.f32, gpu)
        np.testing.assert_array_equal(g.numpy().view(np.uint16), c.numpy().view(np.uint16))
        np.testing.assert_array_equal(back[1].numpy(), back[0].numpy())



def test_f64_to_half_rounds_once(gpu):
    # NumPy rounds f64 to f16 / bf16 once; through f32 the values just past a tie
    # (or past the overflow threshold) would round twice, one ulp off.
    skip_unless(gpu, tl.f64)
    rng = np.random.default_rng(13)
    x = np.concatenate([
        [1 + 2**-11 + 2**-30, 1 + 3 * 2**-11 - 2**-30, -(1 + 2**-11 + 2**-30), 2**-25 + 2**-60,
         65519.99999, -65519.99999, 1 + 2**-8 + 2**-30, 1 + 3 * 2**-8 - 2**-30,
         2**-134 + 2**-160, 1e-300, -1e-300, np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0],
        rng.uniform(0, 5, 4001)])
    for dst in (tl.f16, tl.bf16):
        with np.errstate(all="ignore"):
            c, g = both(lambda t: t.to_dtype(dst), [x], tl.f64, gpu)
        np.testing.assert_array_equal(g.numpy().view(np.uint16), c.numpy().view(np.uint16))
        want = bf16_bits(x) if dst is tl.bf16 else x.astype(dst.np).view(np.uint16)
        np.testing.assert_array_equal(c.numpy().view(np.uint16), want)

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_reductions(gpu, dtype):
    skip_unless(gpu, dtype)
    x = values((4, 5, 6), dtype, 13)
    for view in ("contiguous", "transposed", "narrowed", "broadcast"):
        for dims in ((0,), (1,), (2,), (0, 2), (0, 1, 2)):
            check(lambda t: t.sum_keepdim(dims), [x], dtype, gpu, view, loose=True)
        for d in (0, 1, 2):
            check(lambda t: t.max_keepdim(d), [x], dtype, gpu, view)
            check(lambda t: t.min_keepdim(d), [x], dtype, gpu, view)
            check(lambda t: t.argmax_keepdim(d), [x], dtype, gpu, view)
            check(lambda t: t.argmin_keepdim(d), [x], dtype, gpu, view)
    check(lambda t: t.max_all(), [x], dtype, gpu)
    check(lambda t: t.min_all(), [x], dtype, gpu)
    if dtype.is_float:
        check(lambda t: t.mean_keepdim(1), [x], dtype, gpu, loose=True)
        check(lambda t: t.var_keepdim(2), [x], dtype, gpu, loose=True)
        check(lambda t: t.log_sum_exp((1, 2)), [x], dtype, gpu, loose=True)


@pytest.mark.parametrize("dtype", [tl.f32, tl.f64, tl.bf16, tl.u32, tl.i64],
                         ids=["f32", "f64", "bf16", "u32", "i64"])
def test_reductions_long_rows(gpu, dtype):
    # long rows take the workgroup-tree kernel, many short rows the per-row one
    skip_unless(gpu, dtype)
    x = values((3, 5000), dtype, 14)
    for f in (lambda t: t.sum_keepdim(1), lambda t: t.max_keepdim(1), lambda t: t.argmin_keepdim(1),
              lambda t: t.t().contiguous().argmax_keepdim(0), lambda t: t.sum_keepdim(0)):
        check(f, [x], dtype, gpu, loose=True)
    # few rows longer than 32768: two passes (partials in the accumulation type)
    y = values((2, 70001), dtype, 15, low=0.0, high=1.0)
    for f in (lambda t: t.sum_keepdim(1), lambda t: t.max_keepdim(1), lambda t: t.min_keepdim(1),
              lambda t: t.sum_all(), lambda t: t.t().sum_keepdim(0), lambda t: t.argmax_keepdim(1)):
        check(f, [y], dtype, gpu, loose=True)


def test_reductions_nan_and_ties(gpu):
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    for dtype in FLOAT_DTYPES:
        if gpu.supports_dtype(dtype):
            for f in (lambda t: t.max_keepdim(1), lambda t: t.min_keepdim(1),
                      lambda t: t.argmax_keepdim(1), lambda t: t.argmin_keepdim(1)):
                check(f, [x], dtype, gpu)
    with pytest.raises(tl.TallowError):
        tl.zeros((3, 0), device=gpu).max_keepdim(1)
    assert tl.zeros((3, 0), device=gpu).sum_keepdim(1).values() == [[0.0], [0.0], [0.0]]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_cumsum(gpu, dtype):
    skip_unless(gpu, dtype)
    x = values((3, 4, 300), dtype, 15)
    for view in ("contiguous", "transposed", "narrowed"):
        for d in (0, 1, 2):
            check(lambda t: t.cumsum(d), [x], dtype, gpu, view, loose=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_sort(gpu, dtype):
    skip_unless(gpu, dtype)
    rng = np.random.default_rng(16)
    for n in (1, 5, 64, 1000, 1500):
        x = values((3, n), dtype, n)
        x[:, ::3] = x[:, :1]  # ties: the sort is stable
        for asc in (True, False):
            check(lambda t: t.arg_sort_last_dim(asc), [x], dtype, gpu)
            check(lambda t: t.sort_last_dim(asc), [x], dtype, gpu, "transposed" if n > 1 else "contiguous")
    if dtype.is_float:
        x = rng.standard_normal((2, 9))
        x[0, [1, 4]] = np.nan
        x[1, [0, 8]] = [np.inf, -np.inf]
        for asc in (True, False):
            check(lambda t: t.arg_sort_last_dim(asc), [x], dtype, gpu)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_index_ops(gpu, dtype):
    skip_unless(gpu, dtype)
    rng = np.random.default_rng(17)
    x = values((6, 5, 4), dtype, 18)
    for ids_dtype in INT_DTYPES:
        if not gpu.supports_dtype(ids_dtype):
            continue

        def ids(arr):
            return lambda dev: tl.Tensor(np.asarray(arr), device=dev).to_dtype(ids_dtype)

        sel = ids([0, 3, 1, 3, 4])
        for view in ("contiguous", "transposed", "narrowed"):
            for d in (0, 1, 2):
                check(lambda t: t.index_select(sel(t.device).narrow(0, 0, min(4, t.shape[d])), d),
                      [x], dtype, gpu, view)
        g = ids(rng.integers(0, 5, (6, 3, 4)))
        check(lambda t: t.gather(g(t.device), 1), [x], dtype, gpu)
        si = ids(rng.integers(0, 6, (4, 5, 4)))
        src = values((4, 5, 4), dtype, 19)
        check(lambda t, s: t.scatter_add(si(t.device), s, 0), [x, src], dtype, gpu, loose=True)
        check(lambda t, s: t.scatter(si(t.device)[:, :1].contiguous(), s[:, :1], 0), [x, src], dtype, gpu)
        ai = ids([5, 0, 0, 2])
        check(lambda t, s: t.index_add(ai(t.device), s, 0), [x, src], dtype, gpu, loose=True)
        emb = ids(rng.integers(0, 6, (3, 2)))
        check(lambda t: t.reshape((6, 20)).embedding(emb(t.device)), [x], dtype, gpu)



def test_index_ops_on_views_of_many_unmergeable_dims(gpu):
    # Ten dims of size 2, permuted: no two merge, more than a kernel's 8. The gather's
    # virtual layout (the indexed dim's stride moved out) must never be compacted.
    perm = (9, 0, 8, 1, 7, 2, 6, 3, 5, 4)
    x = values((2,) * 10, tl.f32, 21)
    ids = np.array([1, 0, 1], np.uint32)
    gi = np.resize(ids, (2,) * 10).astype(np.uint32)

    def on(arr, dev):
        return tl.Tensor(arr, device=dev).permute(perm)

    check(lambda t: t.permute(perm).index_select(tl.Tensor(ids, device=t.device), 3), [x],
          tl.f32, gpu)
    check(lambda t: t.permute(perm).gather(on(gi, t.device), 3), [x], tl.f32, gpu)
    check(lambda t: tl.zeros((2,) * 10, device=t.device).scatter_add(on(gi, t.device),
                                                                    t.permute(perm), 3),
          [x], tl.f32, gpu)
    check(lambda t: tl.zeros((2,) * 10, device=t.device).index_add(
        tl.Tensor(ids, device=t.device), t.permute(perm).narrow(3, 0, 1).broadcast_as(
            (2,) * 3 + (3,) + (2,) * 6), 3), [x], tl.f32, gpu)

def test_index_sentinels_and_errors(gpu):
    t = tl.Tensor(np.arange(10.0), device=gpu)
    none = np.uint32(0xFFFFFFFF)
    assert t.index_select(tl.Tensor(np.array([none, 2], np.uint32), device=gpu), 0).values() == [0.0, 2.0]
    big = np.int64(np.iinfo(np.int64).max)
    assert t.index_select(tl.Tensor(np.array([3, big]), device=gpu), 0).values() == [3.0, 0.0]
    for ids in ([1, 10], [-1]):
        for dev in (tl.cpu, gpu):
            x = tl.Tensor(np.arange(10.0), device=dev)
            with pytest.raises(tl.errors.IndexOutOfRangeError, match="out of range"):
                x.index_select(tl.Tensor(np.array(ids), device=dev), 0)
    dst = tl.zeros((3, 2), device=gpu)
    before = dst.numpy().copy()
    with pytest.raises(tl.errors.IndexOutOfRangeError):
        dst.scatter_set(tl.Tensor(np.array([[0, 1], [3, 0]]), device=gpu), tl.ones((2, 2), device=gpu), 0)
    np.testing.assert_array_equal(dst.numpy(), before)  # checked before anything was written


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=IDS)
def test_copies_fills_and_slices(gpu, dtype):
    skip_unless(gpu, dtype)
    x = values((5, 6, 3), dtype, 20)
    for view in LAYOUTS:
        check(lambda t: t.contiguous(), [x], dtype, gpu, view)
        check(lambda t: t.copy(), [x], dtype, gpu, view)
    check(lambda t: tl.cat([t, t.narrow(1, 1, 2)], 1), [x], dtype, gpu)
    check(lambda t: tl.stack([t, t], 0), [x], dtype, gpu)
    check(lambda t: t.pad_with_zeros(1, 2, 1), [x], dtype, gpu)
    check(lambda t: t.pad_with_same(2, 1, 2), [x], dtype, gpu)
    check(lambda t: t.flip([0, 2]), [x], dtype, gpu)
    check(lambda t: t.roll(2, 1), [x], dtype, gpu)
    check(lambda t: t.repeat((2, 1, 2)), [x], dtype, gpu)
    check(lambda t: t.slice_assign([slice(1, 3)], t[0:2]), [x], dtype, gpu)
    check(lambda t: t.slice_scatter0(t[3:5], 0), [x], dtype, gpu)
    value = 7 if dtype.is_int else 0.625
    check(lambda t: tl.full((3, 5), value, dtype=dtype, device=t.device), [x], dtype, gpu)
    check(lambda t: tl.ones((7,), dtype=dtype, device=t.device), [x], dtype, gpu)
    check(lambda t: tl.zeros((3, 3), dtype=dtype, device=t.device), [x], dtype, gpu)
    check(lambda t: tl.arange(2, 30, 3, dtype=dtype, device=t.device), [x], dtype, gpu)
    check(lambda t: tl.eye(4, dtype=dtype, device=t.device), [x], dtype, gpu)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=FIDS)
def test_convolutions_and_pooling(gpu, dtype):
    skip_unless(gpu, dtype)
    img = values((2, 4, 9, 8), dtype, 21)
    ker = values((6, 2, 3, 3), dtype, 22)
    check(lambda a, k: a.conv2d(k, padding=1, stride=2, groups=2), [img, ker], dtype, gpu, loose=True)
    check(lambda a, k: a.conv2d(k, padding=(2, 1), dilation=2, groups=2), [img, ker], dtype, gpu, loose=True)
    check(lambda a, k: a.conv2d(k.narrow(1, 0, 1).broadcast_as(k.shape).contiguous()),
          [img[:, :2], ker], dtype, gpu, loose=True)
    kt = values((4, 3, 3, 3), dtype, 23)
    check(lambda a, k: a.conv_transpose2d(k, padding=1, output_padding=1, stride=2, groups=2),
          [img, kt], dtype, gpu, loose=True)
    check(lambda a, k: a.conv_transpose2d(k, dilation=2), [img, kt], dtype, gpu, loose=True)
    s1 = values((2, 4, 11), dtype, 24)
    k1 = values((3, 4, 3), dtype, 25)
    check(lambda a, k: a.conv1d(k, padding=1, stride=2), [s1, k1], dtype, gpu, loose=True)
    check(lambda a, k: a.transpose(1, 2).contiguous().transpose(1, 2).conv1d(k, dilation=2),
          [s1, k1], dtype, gpu, loose=True)
    k1t = values((4, 3, 3), dtype, 26)
    check(lambda a, k: a.conv_transpose1d(k, padding=1, stride=2), [s1, k1t], dtype, gpu, loose=True)
    check(lambda a: a.avg_pool2d(2), [img], dtype, gpu, loose=True)
    check(lambda a: a.avg_pool2d((3, 2), (1, 2)), [img], dtype, gpu, "transposed", loose=True)
    check(lambda a: a.max_pool2d(2), [img], dtype, gpu)
    check(lambda a: a.max_pool2d((2, 3), 1), [img], dtype, gpu, "narrowed")
    check(lambda a: a.upsample_nearest2d(13, 5), [img], dtype, gpu)
    check(lambda a: a.upsample_nearest1d(17), [s1], dtype, gpu)


def test_pooling_and_upsampling_of_ints(gpu):
    img = values((1, 2, 6, 6), tl.u32, 27)
    check(lambda a: a.max_pool2d(2), [img], tl.u32, gpu)
    check(lambda a: a.upsample_nearest2d(9, 4), [img], tl.u32, gpu)
    for dev in (tl.cpu, gpu):
        with pytest.raises(tl.UnsupportedDTypeError):
            on(img, tl.u32, dev).avg_pool2d(2)
        with pytest.raises(tl.UnsupportedDTypeError):
            on(img, tl.u32, dev).conv2d(on(img[:, :, :2, :2], tl.u32, dev))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=FIDS)
def test_fused_row_kernels(gpu, dtype):
    skip_unless(gpu, dtype)
    import torch

    x = values((7, 300), dtype, 28)
    alpha = values((300,), dtype, 29)
    beta = values((300,), dtype, 30)
    t64 = torch.tensor(x.astype(np.float64))
    a64, b64 = torch.tensor(alpha.astype(np.float64)), torch.tensor(beta.astype(np.float64))
    g = on(x, dtype, gpu)
    ga, gb = on(alpha, dtype, gpu), on(beta, dtype, gpu)
    lay = g.layout
    out = g._storage.softmax_last_dim(lay).to_numpy(lay)
    assert_close(out, torch.softmax(t64, -1).numpy(), dtype, gpu, loose=True)
    out = g._storage.rms_norm(lay, ga._storage, ga.layout, 1e-5).to_numpy(lay)
    ref = t64 / torch.sqrt((t64 * t64).mean(-1, keepdim=True) + 1e-5) * a64
    assert_close(out, ref.numpy(), dtype, gpu, loose=True)
    out = g._storage.layer_norm(lay, ga._storage, ga.layout, gb._storage, gb.layout, 1e-5).to_numpy(lay)
    ref = torch.nn.functional.layer_norm(t64, (300,), a64, b64, 1e-5)
    assert_close(out, ref.numpy(), dtype, gpu, loose=True)
    tv = g.t()  # a strided view: rows are the columns of g
    out = tv._storage.softmax_last_dim(tv.layout).to_numpy(tl.Layout.contiguous_of(tv.shape))
    assert_close(out, torch.softmax(t64.t(), -1).numpy(), dtype, gpu, loose=True)
