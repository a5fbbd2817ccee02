"""The one rule of docs/semantics.md: Python operators behave as NumPy/PyTorch.

Integer inference, true/floored division, Python's remainder, bitwise ops, boolean
masks (reading and writing) and u8 sums, each against NumPy or PyTorch on every
device (the ``device`` fixture runs the CPU and the GPU).
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.differential import assert_close, shapes

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
INT_NP = {"u8": np.uint8, "u32": np.uint32, "i64": np.int64}


# -- the silent-wrong answers that started it -------------------------------------------------
def test_mask_index_on_2x2_selects_like_numpy(device):
    arr = np.array([[1.0, -2.0], [-3.0, 4.0]], dtype=np.float32)
    x = tl.tensor(arr, device=device)
    got = x[x > 0]
    assert got.shape == (2,)
    np.testing.assert_array_equal(got.numpy(), arr[arr > 0])


def test_u8_sum_of_300_ones_is_300(device):
    total = (tl.ones((300,), device=device) > 0).sum_all()
    assert total.item() == 300
    assert total.dtype == tl.i64


def test_int_list_minus_five_is_negative_i64(device):
    out = tl.tensor([1, 2, 3], device=device) - 5
    assert out.dtype == tl.i64
    assert out.values() == [-4, -3, -2]


def test_int_arange_divided_by_two_is_true_division(device):
    out = tl.arange(0, 5, device=device) / 2
    assert out.dtype == tl.f32
    assert out.values() == [0.0, 0.5, 1.0, 1.5, 2.0]


# -- integer inference -------------------------------------------------------------------------
@pytest.mark.parametrize("data", [[1, 2, 3], 7, [[0, 1], [2, 3]], [-1, 2**40], [0]])
def test_python_ints_infer_to_i64_as_torch(data):
    t = tl.tensor(data)
    assert t.dtype == tl.i64
    ref = torch.tensor(data)
    assert ref.dtype == torch.int64
    assert t.shape == tuple(ref.shape)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_u32_only_when_asked():
    assert tl.tensor([1, 2], dtype=tl.u32).dtype == tl.u32
    assert tl.arange(0, 4, dtype=tl.u32).dtype == tl.u32
    assert tl.arange(0, 4).dtype == tl.i64
    assert tl.arange(0, 4, 0.5).dtype == tl.f32
    assert tl.tensor(np.arange(3, dtype=np.uint32)).dtype == tl.u32  # arrays keep theirs
    assert tl.tensor([True, False]).dtype == tl.bool
    assert tl.tensor([1, 2.5]).dtype == tl.f32
    assert tl.tensor([]).dtype == tl.f32  # no element to infer from: float, as torch.tensor([])


def test_int_beyond_i64_overflows():
    with pytest.raises(OverflowError):
        tl.tensor([2**63])


# -- arithmetic operators against NumPy -------------------------------------------------------
def _int_pair(draw, dtype, shape, nonzero_rhs):
    np_t = INT_NP[dtype]
    lo, hi = (-50, 50) if dtype == "i64" else (0, 100)
    a = np.array(draw(st.lists(st.integers(lo, hi), min_size=int(np.prod(shape)),
                               max_size=int(np.prod(shape)))), dtype=np_t).reshape(shape)
    b = np.array(draw(st.lists(st.integers(lo, hi).filter(lambda v: v != 0 or not nonzero_rhs),
                               min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                 dtype=np_t).reshape(shape)
    return a, b


@SETTINGS
@given(data=st.data())
def test_int_floordiv_mod_truediv_match_numpy(device, data):
    dtype = data.draw(st.sampled_from(["u8", "u32", "i64"]))
    shape = data.draw(shapes(max_rank=3, max_side=5))
    a, b = _int_pair(data.draw, dtype, shape, nonzero_rhs=True)
    ta, tb = tl.tensor(a, device=device), tl.tensor(b, device=device)
    assert (ta // tb).dtype == ta.dtype
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)
    true = ta / tb
    assert true.dtype == tl.f32
    np.testing.assert_allclose(true.numpy(), (a / b).astype(np.float32), rtol=1e-6)
    # With a Python int on either side.
    s = data.draw(st.integers(1, 9))
    np.testing.assert_array_equal((ta // s).numpy(), a // INT_NP[dtype](s))
    np.testing.assert_array_equal((ta % s).numpy(), a % INT_NP[dtype](s))
    nz = np.where(a == 0, 1, a).astype(a.dtype)
    tnz = tl.tensor(nz, device=device)
    np.testing.assert_array_equal((s // tnz).numpy(), INT_NP[dtype](s) // nz)
    np.testing.assert_array_equal((s % tnz).numpy(), INT_NP[dtype](s) % nz)


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (-1, 5), (6, -3)])
def test_signed_floordiv_and_mod_follow_python(device, a, b):
    ta = tl.tensor([a], device=device)
    assert (ta // b).values() == [a // b]
    assert (ta % b).values() == [a % b]
    assert (a // tl.tensor([b], device=device)).values() == [a // b]
    assert (a % tl.tensor([b], device=device)).values() == [a % b]


@pytest.mark.parametrize("dtype", [tl.f32, tl.f64, tl.f16], ids=str)
def test_float_floordiv_and_mod_match_torch(device, dtype):
    if not device.supports_dtype(dtype):
        pytest.skip(f"{device} has no {dtype}")
    # Values whose quotients are not within rounding of an integer (where a GPU's
    # division may legitimately differ from an exact fmod by one step).
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, 5.25, -3.0, 1e3, -0.75], dtype=np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -1.5, 4.0, 7.0, 0.5], dtype=np.float64)
    ta, tb = tl.tensor(a, dtype=dtype, device=device), tl.tensor(b, dtype=dtype, device=device)
    torch_dtype = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16}[dtype.name]
    ra, rb = torch.tensor(a).to(torch_dtype), torch.tensor(b).to(torch_dtype)
    assert_close(ta // tb, (ra // rb).float().numpy(), dtype, device)
    assert_close(ta % tb, torch.remainder(ra, rb).float().numpy(), dtype, device)
    assert_close(ta % 2.0, torch.remainder(ra, 2.0).float().numpy(), dtype, device)


def test_float_mod_by_zero_is_nan_and_int_by_zero_raises(device):
    assert np.isnan((tl.tensor([1.0], device=device) % 0.0).item())
    with pytest.raises(ZeroDivisionError):
        tl.tensor([1, 2], device=device) // tl.tensor([1, 0], device=device)
    with pytest.raises(ZeroDivisionError):
        tl.tensor([1, 2], device=device) % 0


def test_float_scalar_with_int_tensor_computes_in_f32(device):
    t = tl.tensor([1, 2, 3], device=device)
    for out, ref in [(t * 0.5, [0.5, 1.0, 1.5]), (t + 0.25, [1.25, 2.25, 3.25]),
                     (1.5 - t, [0.5, -0.5, -1.5]), (t ** 0.5, list(np.sqrt([1.0, 2.0, 3.0])))]:
        assert out.dtype == tl.f32
        np.testing.assert_allclose(out.values(), ref, rtol=1e-6)
    # Tensors of two dtypes promote as torch.result_type: i64 + f32 is f32.
    mixed = t + tl.tensor([1.0, 2.0, 3.0], device=device)
    assert mixed.dtype == tl.f32 and mixed.values() == [2.0, 4.0, 6.0]


def test_int_power_is_exact(device):
    t = tl.tensor([-3, -1, 0, 2, 5], device=device)
    np.testing.assert_array_equal((t ** 3).numpy(), np.array([-3, -1, 0, 2, 5]) ** 3)
    assert (t ** 0).values() == [1] * 5
    with pytest.raises(ValueError):
        t ** -1


def test_div_method_keeps_candles_truncation(device):
    a = tl.tensor([-7, 7], device=device)
    b = tl.tensor([2, 2], device=device)
    assert a.div(b).values() == [-3, 3]   # candle: toward zero
    assert (a // b).values() == [-4, 3]   # Python: floored
    assert (a / b).values() == [-3.5, 3.5]


# -- bitwise -----------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_bitwise_ops_match_numpy(device, data):
    dtype = data.draw(st.sampled_from(["u8", "u32", "i64"]))
    shape = data.draw(shapes(max_rank=2, max_side=6))
    a, b = _int_pair(data.draw, dtype, shape, nonzero_rhs=False)
    ta, tb = tl.tensor(a, device=device), tl.tensor(b, device=device)
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta | tb).numpy(), a | b)
    np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
    np.testing.assert_array_equal((ta & 6).numpy(), a & INT_NP[dtype](6))
    np.testing.assert_array_equal((3 | ta).numpy(), a | INT_NP[dtype](3))
    if dtype != "u8":
        np.testing.assert_array_equal((~ta).numpy(), ~a)


def test_invert_of_a_mask_is_logical_not(device):
    x = tl.tensor([[1.0, -2.0], [-3.0, 4.0]], device=device)
    m = x > 0
    assert (~m).values() == [[0, 1], [1, 0]]
    assert x[~m].values() == [-2.0, -3.0]
    assert ((x > 0) & (x < 2)).values() == [[1, 0], [0, 0]]
    assert ((x > 3) | (x < -2)).values() == [[0, 0], [1, 1]]
    assert ((x > 0) ^ True).values() == [[0, 1], [1, 0]]


def test_bitwise_on_floats_is_refused(device):
    x = tl.tensor([1.0, 2.0], device=device)
    with pytest.raises(tl.UnsupportedDTypeError):
        x & x
    with pytest.raises(tl.UnsupportedDTypeError):
        ~x


# -- boolean masks: reading ------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_mask_selection_matches_numpy(device, data):
    shape = data.draw(shapes(max_rank=3, max_side=5))
    arr = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=int(np.prod(shape)),
                                      max_size=int(np.prod(shape)))), dtype=np.float32).reshape(shape)
    x = tl.tensor(arr, device=device)
    np.testing.assert_array_equal(x[x > 0].numpy(), arr[arr > 0])
    # A mask over the leading dims selects rows.
    lead = arr[(slice(None),) + (0,) * (arr.ndim - 1)] > 0
    got = x[x[(slice(None),) + (0,) * (arr.ndim - 1)] > 0]
    np.testing.assert_array_equal(got.numpy(), arr[lead])
    # NumPy bool arrays and bool lists are masks too; a mask after a slice.
    np.testing.assert_array_equal(x[arr > 1].numpy(), arr[arr > 1])
    np.testing.assert_array_equal(x[lead.tolist()].numpy(), arr[lead])
    if arr.ndim >= 2:
        inner = arr[0] < 0
        np.testing.assert_array_equal(x[:, tl.tensor(inner, device=device)].numpy(), arr[:, inner])


def test_mask_on_strided_views_and_empty_result(device):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tl.tensor(arr, device=device).t()
    np.testing.assert_array_equal(x[x > 4].numpy(), arr.T[arr.T > 4])
    out = x[x > 100]
    assert out.shape == (0,)


def test_mask_of_wrong_shape_is_an_index_error(device):
    x = tl.zeros((2, 3), device=device)
    with pytest.raises(IndexError, match="mask"):
        x[tl.tensor([1, 0, 1], dtype=tl.u8, device=device)]


def test_u32_and_i64_index_tensors_stay_ids(device):
    x = tl.tensor([10.0, 20.0, 30.0], device=device)
    assert x[tl.tensor([0, 1, 0], dtype=tl.u32, device=device)].values() == [10.0, 20.0, 10.0]
    assert x[tl.tensor([2, -1], device=device)].values() == [30.0, 30.0]
    # index_select keeps candle's meaning for a u8 tensor: ids.
    assert x.index_select(tl.tensor([0, 1, 0], dtype=tl.u8, device=device), 0).values() == [10.0, 20.0, 10.0]


def test_mask_selection_has_gradients():
    w = tl.Var([1.0, -2.0, 3.0])
    picked = w[w > 0]
    grads = (picked * picked).sum_all().backward()
    np.testing.assert_allclose(grads[w].values(), [2.0, 0.0, 6.0])


# -- boolean masks and indices: writing -------------------------------------------------------
def test_setitem_matches_numpy(device):
    base = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    cases = [
        (lambda i: i < 0, 0.0),
        (lambda i: i > 2, "vals"),
        (lambda i: 1, 9.0),
        (lambda i: (slice(None), 2), "col"),
        (lambda i: (slice(0, 3, 2), slice(1, None)), 7.0),
        (lambda i: [2, 0], -1.0),
        (lambda i: (Ellipsis, -1), 5.0),
        (lambda i: (slice(None, None, -1), 0), "col"),
        (lambda i: (i[:, 0] > -3, slice(1, 3)), "vals"),
    ]
    for make_index, value in cases:
        ref = base.copy()
        x = tl.tensor(base, device=device)
        ridx, tidx = make_index(ref), make_index(x)
        if value == "vals":
            v = np.arange(100, 100 + ref[ridx].size, dtype=np.float32).reshape(ref[ridx].shape)
            ref[ridx] = v
            x[tidx] = tl.tensor(v, device=device)
        elif value == "col":
            v = np.array([1.5, 2.5, 3.5], dtype=np.float32)
            ref[ridx] = v
            x[tidx] = tl.tensor(v, device=device)
        else:
            ref[ridx] = value
            x[tidx] = value
        np.testing.assert_array_equal(x.numpy(), ref)


def test_setitem_writes_through_views_and_casts(device):
    x = tl.zeros((2, 3), device=device)
    view = x[1]
    view[x[1] == 0] = 4.0          # a mask on a view writes into the base
    assert x.values() == [[0.0] * 3, [4.0] * 3]
    xt = tl.zeros((3, 2), device=device).t()  # non-contiguous target
    xt[xt == 0] = tl.tensor([1, 2, 3, 4, 5, 6], device=device)  # i64 values cast to f32
    np.testing.assert_array_equal(xt.numpy(), np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    x[0] = [7, 8, 9]
    assert x.values()[0] == [7.0, 8.0, 9.0]


def test_setitem_refuses_a_var_and_a_broadcast_view(device):
    v = tl.Var([1.0, 2.0], device=device)
    with pytest.raises(tl.InplaceOnTrackedError, match="Var"):
        v[0] = 3.0
    # On a result computed from a Var the write is recorded, as PyTorch records it
    # (tests/semantics/test_tracked_writes.py compares the gradients with torch's).
    y = v * 2
    y[y > 3] = 0.0
    assert y.values() == [2.0, 0.0]
    assert y.sum().backward()[v].values() == [2.0, 0.0]
    b = tl.zeros((1, 3), device=device).broadcast_as((2, 3))
    with pytest.raises(tl.OverlappingWriteError):
        b[0] = 1.0
    assert v.values() == [1.0, 2.0]


# -- bool and u8 sums and means never wrap ----------------------------------------------------
def test_u8_sums_at_a_million_elements(device, rng):
    n = 10**6
    mask = rng.random(n) < 0.7
    t = tl.tensor(mask, device=device)
    assert t.dtype == tl.bool
    assert t.sum_all().item() == int(mask.sum())
    assert t.sum().item() == int(mask.sum())
    assert t.sum(0).dtype == tl.i64
    ones = tl.ones((n,), dtype=tl.u8, device=device)
    assert ones.sum_all().item() == n
    np.testing.assert_allclose(ones.mean().item(), 1.0)
    np.testing.assert_allclose(t.mean().item(), mask.mean(), rtol=1e-6)
    full = tl.full((1000, 1000), 255, dtype=tl.u8, device=device)
    assert full.sum_all().item() == 255 * n
    np.testing.assert_array_equal(full.sum(1).numpy(), np.full(1000, 255 * 1000))


def test_u8_reductions_match_torch(device, rng):
    arr = rng.integers(0, 256, size=(4, 70), dtype=np.uint8)
    t = tl.tensor(arr, device=device)
    ref = torch.from_numpy(arr)
    np.testing.assert_array_equal(t.sum(1).numpy(), ref.sum(1).numpy())
    np.testing.assert_array_equal(t.sum_keepdim(0).numpy(), ref.sum(0, keepdim=True).numpy())
    np.testing.assert_array_equal(t.cumsum(1).numpy(), ref.cumsum(1).numpy())
    assert t.cumsum(1).dtype == tl.i64
    np.testing.assert_allclose(t.mean(1).numpy(), ref.double().mean(1).numpy(), rtol=1e-6)
    assert t.mean(1).dtype == tl.f32


def test_remainder_gradients_match_torch(device):
    a = np.array([7.5, -7.5, 3.25, -0.5], dtype=np.float32)
    b = np.array([2.0, 2.0, -1.5, 3.0], dtype=np.float32)
    va, vb = tl.Var(a, device=device), tl.Var(b, device=device)
    grads = ((va % vb) * tl.tensor([1.0, 2.0, 3.0, 4.0], device=device)).sum().backward()
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    (torch.remainder(ta, tb) * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_allclose(grads[va].numpy(), ta.grad.numpy())
    np.testing.assert_allclose(grads[vb].numpy(), tb.grad.numpy())
    g_left = (5.0 % vb).sum().backward()[vb]
    tb.grad = None
    torch.remainder(torch.tensor(5.0), tb).sum().backward()
    np.testing.assert_allclose(g_left.numpy(), tb.grad.numpy())
    assert np.allclose(((va % 2.0).sum().backward()[va]).numpy(), 1.0)


def test_ints_on_a_gpu_without_int64_say_to_ask_for_u32(gpu):
    from tallow.backends.gpu import new_device_state

    dev = tl.Device.of(new_device_state(0, disable_features=("shader-int64",)))
    with pytest.raises(tl.UnsupportedDTypeError, match="dtype=tl.u32"):
        tl.tensor([1, 2, 3], device=dev)
    with pytest.raises(tl.UnsupportedDTypeError, match="dtype=tl.u32"):
        tl.arange(0, 5, device=dev)
    t = tl.tensor([1, 2, 3], dtype=tl.u32, device=dev)
    assert (t > 1).sum_all().values() == 2            # the mask sum falls back to u32
    assert (t > 1).sum_all().dtype == tl.u32
    x = tl.tensor([[1.0, 3.0], [4.0, 2.0]], device=dev)
    assert x.argmax(1).dtype == tl.u32 and x.argmax(1).values() == [1, 0]
    assert x[x > 2].values() == [3.0, 4.0]


@pytest.mark.parametrize("dtype", [tl.u8, tl.u32, tl.i64, tl.f16, tl.bf16, tl.f32, tl.f64], ids=str)
def test_masks_and_setitem_on_every_dtype(device, dtype):
    if not device.supports_dtype(dtype):
        pytest.skip(f"{device} has no {dtype}")
    base = np.arange(24).reshape(4, 6).astype(dtype.np)
    x = tl.tensor(base, device=device)
    ref = base.copy()
    x[x > 10] = 3
    ref[ref > 10] = 3
    x[1, ::2] = 7
    ref[1, ::2] = 7
    x[[0, 3], 1:3] = 9
    ref[[0, 3], 1:3] = 9
    x.t()[2] = 1
    ref.T[2] = 1
    np.testing.assert_array_equal(x.numpy().astype(np.float64), ref.astype(np.float64))
    mask = x > 2
    assert mask.sum().item() == int((ref > 2).sum())
    np.testing.assert_array_equal(x[mask].numpy().astype(np.float64), ref[ref > 2].astype(np.float64))
