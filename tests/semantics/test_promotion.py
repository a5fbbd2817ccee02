"""Type promotion against PyTorch: every pair of the dtypes PyTorch computes in, every
binary operator, tensors of rank >= 1 and rank 0 and Python scalars, CPU and GPU.

For each case the result's dtype and values must equal PyTorch's, or both must raise.
u32, which PyTorch does not promote, is checked against NumPy's table instead.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch

import tallow as tl

TORCH = {"bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16,
         "i32": torch.int32, "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16,
         "f32": torch.float32, "f64": torch.float64}
NAMES = list(TORCH)
TORCH_NAME = {v: k for k, v in TORCH.items()}

OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "ge": operator.ge,
}
# PyTorch-named functions with two tensors.
FUNCS = {"maximum": (lambda a, b: a.maximum(b), torch.maximum),
         "minimum": (lambda a, b: a.minimum(b), torch.minimum),
         "where": (lambda a, b: tl.where(a.ne(0), a, b), lambda a, b: torch.where(a != 0, a, b))}

A = [1, 2, 3, 0, 5, 7]
B = [2, 1, 3, 4, 1, 2]   # no zero: integer division and remainder by zero raise


def _pair(name_a, name_b, device, rank_b=1):
    ta = torch.tensor(A).to(TORCH[name_a]).reshape(2, 3)
    tb = torch.tensor(B[:3]).to(TORCH[name_b])
    if rank_b == 0:
        tb = tb[0]
    xa = tl.tensor(ta.to(torch.float64).numpy(), device=device).to_dtype(name_a)
    xb = tl.tensor(tb.to(torch.float64).numpy(), device=device).to_dtype(name_b)
    return ta, tb, xa, xb


def _outcome_torch(f, *args):
    try:
        return f(*args), None
    except (RuntimeError, TypeError) as e:
        return None, e


def _check(expected, err, got_fn, what, failures):
    if err is not None:
        try:
            got = got_fn()
        except Exception:
            return
        failures.append(f"{what}: PyTorch raises ({err}), tallow gives {got.dtype}")
        return
    try:
        got = got_fn()
    except Exception as e:  # noqa: BLE001 (collected, reported below)
        failures.append(f"{what}: PyTorch gives {expected.dtype}, tallow raises {e!r}")
        return
    want_dtype = TORCH_NAME[expected.dtype]
    if str(got.dtype) != want_dtype:
        failures.append(f"{what}: dtype {got.dtype}, PyTorch {want_dtype}")
        return
    want = expected.to(torch.float64).numpy()
    have = got.to_dtype(tl.f64 if got.device.supports_dtype(tl.f64) else tl.f32).numpy()
    if got.shape != tuple(expected.shape) or not np.allclose(have, want, rtol=1e-2, equal_nan=True):
        failures.append(f"{what}: values {have.tolist()}, PyTorch {want.tolist()}")


def _skip_missing(device, *names):
    for n in names:
        if not device.supports_dtype(tl.DType.parse(n)):
            pytest.skip(f"no {n} on {device}")


@pytest.mark.parametrize("op", list(OPS) + list(FUNCS))
@pytest.mark.parametrize("rank_b", [1, 0])
def test_tensor_pairs_promote_as_torch(op, rank_b, device):
    failures = []
    for na in NAMES:
        for nb in NAMES:
            if not (device.supports_dtype(tl.DType.parse(na)) and device.supports_dtype(tl.DType.parse(nb))):
                continue
            ta, tb, xa, xb = _pair(na, nb, device, rank_b)
            if op in OPS:
                f = OPS[op]
                expected, err = _outcome_torch(f, ta, tb)
                _check(expected, err, lambda: f(xa, xb), f"{na} {op} {nb} (rank {rank_b})", failures)
            else:
                # Equal shapes: candle's maximum/minimum need them (the API's contract).
                mine, theirs = FUNCS[op]
                xb, tb = xb.broadcast_as(xa.shape), tb.expand(ta.shape)
                expected, err = _outcome_torch(theirs, ta, tb)
                _check(expected, err, lambda: mine(xa, xb), f"{op}({na}, {nb}) (rank {rank_b})", failures)
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures[:40])


SCALARS = [2, 3.5, True, -1]


@pytest.mark.parametrize("op", list(OPS) + ["pow"])
def test_python_scalars_are_weak_as_in_torch(op, device):
    f = OPS.get(op, operator.pow)
    failures = []
    for na in NAMES:
        if not device.supports_dtype(tl.DType.parse(na)):
            continue
        ta, _, xa, _ = _pair(na, na, device)
        for s in SCALARS:
            if op == "pow" and s == -1:
                continue  # integers to negative powers: both raise, differently worded
            d = tl.DType.parse(na)
            if d.is_int and not isinstance(s, bool) and not float(d.min) <= s <= float(d.max) \
                    and op != "truediv":
                continue  # out of the dtype's range: PyTorch wraps it (a test below)
            for left in (False, True):
                g = (lambda a, s=s: f(s, a)) if left else (lambda a, s=s: f(a, s))
                expected, err = _outcome_torch(g, ta)
                if err is None and op == "pow" and left and not expected.dtype.is_floating_point:
                    continue  # int ** int tensor: tallow's backends raise (documented)
                _check(expected, err, lambda: g(xa), f"{s!r} {op} {na}" if left else f"{na} {op} {s!r}",
                       failures)
    assert not failures, f"{len(failures)} differences:\n" + "\n".join(failures[:40])


def test_the_issue_examples(device):
    x = tl.tensor([-1.0, 2.0, 3.0], device=device)
    assert ((x > 0) + 255).values() == [255, 256, 256]
    assert ((x > 0) + (x > 0)).values() == [False, True, True]
    assert ((x > 0) + (x > 0)).dtype == tl.bool
    assert (tl.tensor([1, 2], device=device) + 0.5).dtype == tl.f32
    assert (tl.tensor([1.0], device=device).half() + 2.0).dtype == tl.f16
    assert ((x > 0) + 1).dtype == tl.i64
    assert (tl.tensor([1], device=device) + x[:1]).dtype == tl.f32
    if device.supports_dtype(tl.f64):
        assert (x.half() + x.double()).dtype == tl.f64


def test_result_type_matches_torch_over_every_pair():
    for na in NAMES:
        for nb in NAMES:
            a, b = tl.DType.parse(na), tl.DType.parse(nb)
            assert str(tl.promote_types(a, b)) == TORCH_NAME[torch.promote_types(TORCH[na], TORCH[nb])]
            for s in (1, 1.5, False):
                want = torch.result_type(torch.zeros(2, dtype=TORCH[na]), s)
                assert str(tl.result_type((a, 1), s)) == TORCH_NAME[want], (na, s)
            want = torch.result_type(torch.zeros(2, dtype=TORCH[na]), torch.zeros((), dtype=TORCH[nb]))
            assert str(tl.result_type((a, 1), (b, 0))) == TORCH_NAME[want], (na, nb)


def test_u32_promotes_by_numpy_where_torch_refuses():
    for name in ("u8", "i8", "i16", "i32", "i64", "f16", "f32", "f64"):
        d = tl.DType.parse(name)
        assert tl.promote_types(tl.u32, d).np == np.promote_types(np.uint32, d.np) or d.is_float
    assert tl.promote_types(tl.u32, tl.f16) is tl.f16  # a float wins, as PyTorch's u32 + f16
    u = tl.tensor([1, 2], dtype=tl.u32)
    assert (u + tl.tensor([-3, 4])).values() == [-2, 6]
    assert (u + tl.tensor([-3, 4])).dtype == tl.i64


def test_small_floats_promote_with_nothing_as_torch():
    for small in tl.dtype.SMALL_FLOATS:
        with pytest.raises(tl.DTypeMismatchError, match="to_dtype"):
            tl.promote_types(small, tl.f32)
        with pytest.raises(RuntimeError):
            torch.promote_types(torch.float8_e4m3fn, torch.float32)
        t = tl.tensor([1.0, 2.0]).to_dtype(small)
        with pytest.raises(tl.DTypeMismatchError):
            t + tl.tensor([1.0, 2.0])


def test_candle_names_keep_refusing_mixed_dtypes(device):
    a = tl.tensor([1.0, 2.0], device=device)
    b = tl.tensor([1, 2], device=device)
    for name in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                 "broadcast_maximum", "broadcast_minimum"):
        with pytest.raises(tl.DTypeMismatchError):
            getattr(a, name)(b)
    assert (a + b).dtype == tl.f32 and a.add(b).values() == [2.0, 4.0]


def test_gradients_flow_through_promotion():
    w = tl.Var([1.0, 2.0])
    y = (w * tl.tensor([3, 4])).sum()   # i64 promoted to f32: recorded as a cast
    tw = torch.tensor([1.0, 2.0], requires_grad=True)
    (tw * torch.tensor([3, 4])).sum().backward()
    assert y.backward()[w].values() == tw.grad.tolist()


def test_out_of_range_int_scalars_raise_as_numpy_not_wrap_as_torch(device):
    # PyTorch wraps the scalar (u8 + 300 adds 44, u8 < -1 is True); NumPy 2 raises
    # for arithmetic and compares exactly, as tallow does (docs/differences.md).
    u = tl.tensor([1, 200], dtype=tl.u8, device=device)
    a = np.array([1, 200], np.uint8)
    for f in (lambda x: x + 300, lambda x: x + (-1), lambda x: x * -1, lambda x: x & 256):
        for x in (u, a):
            with pytest.raises(OverflowError):
                f(x)
    assert (u < -1).values() == (np.array([1, 200], np.uint8) < -1).tolist() == [False, False]
    assert (u == 300).values() == [False, False]


def test_cat_and_stack_promote_as_torch(device):
    pairs = [("i64", "f32"), ("bool", "u8"), ("u8", "i8"), ("f16", "bf16"), ("bool", "f16")]
    for na, nb in pairs:
        ta, tb = torch.tensor([1, 0]).to(TORCH[na]), torch.tensor([2, 3]).to(TORCH[nb])
        xa = tl.tensor(ta.to(torch.float32).numpy(), device=device).to_dtype(na)
        xb = tl.tensor(tb.to(torch.float32).numpy(), device=device).to_dtype(nb)
        for mine, theirs in ((tl.cat, torch.cat), (tl.stack, torch.stack)):
            got, want = mine([xa, xb]), theirs([ta, tb])
            assert str(got.dtype) == TORCH_NAME[want.dtype], (na, nb)
            assert got.to_dtype(tl.f32).values() == want.float().tolist()
