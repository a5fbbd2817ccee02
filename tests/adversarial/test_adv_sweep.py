"""A differential sweep: ~70 ops x 7 dtypes x strided/broadcast layouts, CPU and GPU.

Each op runs on hypothesis-drawn shapes, dtypes and views (contiguous, transposed,
narrowed, stepped, permuted, broadcast) and is compared with PyTorch (floats,
computed in the same dtype) or NumPy with wrapping (integers). Sized for CI: a few
examples per (op, device), derandomized so a failure reproduces.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from support.adversarial import ALL, FLOATS, INTS, device_of
from support.differential import make_view
from tallow.nn import ops as F

SWEEP = settings(max_examples=2, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))

TORCH = {"u8": torch.uint8, "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16,
         "f32": torch.float32, "f64": torch.float64}
TOL = {"f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2), "f32": (1e-4, 1e-5), "f64": (1e-10, 1e-12)}
NO_U8_SUM = [tl.u32, tl.i64]  # u8 sums widen in PyTorch; tallow's u8 sum rule differs by design


# -- values and views ----------------------------------------------------------------------

def values(shape, dtype, rng, domain):
    if dtype.is_int:
        hi = {"u8": 256, "u32": 2**32, "i64": 2**40}[dtype.name]
        lo = -(2**40) if dtype is tl.i64 else 0
        if domain == "small":
            lo, hi = (0, 8) if dtype is not tl.i64 else (-8, 8)
        return rng.integers(lo, hi, size=shape, dtype=np.int64).astype(dtype.np)
    if domain == "pos":
        x = rng.uniform(0.25, 3.0, size=shape)
    elif domain == "unit":
        x = rng.uniform(-0.9, 0.9, size=shape)
    else:
        x = rng.uniform(-3.0, 3.0, size=shape)
    return x.astype(dtype.np)


@st.composite
def view_of(draw, dtype, device, domain="any", min_rank=1, shape=None):
    """(tallow tensor, NumPy twin) with a drawn layout."""
    rank = draw(st.integers(min_rank, 3)) if shape is None else len(shape)
    base = shape or tuple(draw(st.integers(1, 5)) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    arr = values(base, dtype, rng, domain)
    t = tl.Tensor(arr, device=device)
    kind = draw(st.sampled_from(["contiguous", "transpose", "narrow", "step", "permute",
                                 "broadcast"])) if shape is None else "contiguous"
    return make_view(t, arr, kind, draw)


def twin_like(draw, t, arr, dtype, device, domain):
    """A second operand of the same shape, itself transposed in memory half the time."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    b = values(arr.shape, dtype, rng, domain)
    if arr.ndim >= 2 and draw(st.booleans()):
        bt = np.ascontiguousarray(np.swapaxes(b, -1, -2))
        return tl.Tensor(bt, device=device).t(), b
    return tl.Tensor(b, device=device), b


# -- references ------------------------------------------------------------------------------

def to_torch(a):
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a)


def from_torch(t):
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def check(got, want, dtype):
    got = np.asarray(got.numpy() if isinstance(got, tl.Tensor) else got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind in "iub" or want.dtype.kind in "iub":
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
        return
    rtol, atol = TOL[dtype.name] if dtype.name in TOL else TOL["f32"]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)


def wrap(x64, dtype):
    """Integer results wrapped to ``dtype`` (tallow's integer arithmetic wraps)."""
    return np.asarray(x64).astype(np.int64).astype(dtype.np)


# -- the op table ------------------------------------------------------------------------------
# name -> (kind, dtypes, domain, tallow fn, reference fn). Reference fns take NumPy arrays
# and the dtype; "t" refs go through PyTorch in the same dtype.

def _t(f):
    return lambda dtype, *arrs: from_torch(f(*[to_torch(a) for a in arrs]))


UNARY = {
    "abs": (FLOATS + [tl.i64], "any", lambda t: t.abs(), _t(torch.abs)),
    "neg": (FLOATS + [tl.i64], "any", lambda t: t.neg(), _t(torch.neg)),
    "exp": (FLOATS, "any", lambda t: t.exp(), _t(torch.exp)),
    "log": (FLOATS, "pos", lambda t: t.log(), _t(torch.log)),
    "sin": (FLOATS, "any", lambda t: t.sin(), _t(torch.sin)),
    "cos": (FLOATS, "any", lambda t: t.cos(), _t(torch.cos)),
    "tanh": (FLOATS, "any", lambda t: t.tanh(), _t(torch.tanh)),
    "sqrt": (FLOATS, "pos", lambda t: t.sqrt(), _t(torch.sqrt)),
    "sqr": (FLOATS, "any", lambda t: t.sqr(), _t(torch.square)),
    "recip": (FLOATS, "pos", lambda t: t.recip(), _t(torch.reciprocal)),
    "relu": (FLOATS, "any", lambda t: t.relu(), _t(torch.relu)),
    "gelu_tanh": (FLOATS, "any", lambda t: t.gelu(),
                  _t(lambda x: torch.nn.functional.gelu(x, approximate="tanh"))),
    "gelu_erf": (FLOATS, "any", lambda t: t.gelu_erf(), _t(torch.nn.functional.gelu)),
    "erf": (FLOATS, "any", lambda t: t.erf(), _t(torch.erf)),
    "silu": (FLOATS, "any", lambda t: t.silu(), _t(torch.nn.functional.silu)),
    "sigmoid": (FLOATS, "any", lambda t: t.sigmoid(), _t(torch.sigmoid)),
    "ceil": (FLOATS, "any", lambda t: t.ceil(), _t(torch.ceil)),
    "floor": (FLOATS, "any", lambda t: t.floor(), _t(torch.floor)),
    "round": (FLOATS, "any", lambda t: t.round(), _t(torch.round)),
    "sign": (FLOATS, "any", lambda t: t.sign(), _t(torch.sign)),
    "elu": (FLOATS, "any", lambda t: t.elu(1.0), _t(torch.nn.functional.elu)),
    "powf": (FLOATS, "pos", lambda t: t.powf(1.5), _t(lambda x: torch.pow(x, 1.5))),
    "affine": (FLOATS, "any", lambda t: t.affine(2.0, 0.5), _t(lambda x: x * 2.0 + 0.5)),
    "clamp": (FLOATS, "any", lambda t: t.clamp(-1.0, 1.0), _t(lambda x: x.clamp(-1.0, 1.0))),
    "copy": (ALL, "any", lambda t: t.contiguous(), lambda d, a: a),
    "flip": (ALL, "any", lambda t: t.flip([0]), lambda d, a: np.flip(a, 0)),
    "roll": (ALL, "any", lambda t: t.roll(1, 0), lambda d, a: np.roll(a, 1, 0)),
    "to_f32": (ALL, "small", lambda t: t.to_dtype(tl.f32), lambda d, a: a.astype(np.float32)),
    "to_i64": (FLOATS + INTS, "small", lambda t: t.to_dtype(tl.i64),
               lambda d, a: np.trunc(a.astype(np.float64)).astype(np.int64)),
    "softmax": (FLOATS, "any", lambda t: F.softmax(t, -1), _t(lambda x: torch.softmax(x, -1))),
    "log_softmax": (FLOATS, "any", lambda t: F.log_softmax(t, -1),
                    _t(lambda x: torch.log_softmax(x, -1))),
    "sum_keepdim": (FLOATS + NO_U8_SUM, "any", lambda t: t.sum_keepdim(0),
                    lambda d, a: wrap(a.astype(np.int64).sum(0, keepdims=True), d) if d.is_int
                    else from_torch(to_torch(a).sum(0, keepdim=True))),
    "sum_all": (FLOATS + NO_U8_SUM, "any", lambda t: t.sum_all(),
                lambda d, a: wrap(a.astype(np.int64).sum(), d) if d.is_int
                else from_torch(to_torch(a).sum())),
    "max_keepdim": (ALL, "any", lambda t: t.max_keepdim(0), lambda d, a: a.max(0, keepdims=True)),
    "min_keepdim": (ALL, "any", lambda t: t.min_keepdim(0), lambda d, a: a.min(0, keepdims=True)),
    "max_all": (ALL, "any", lambda t: t.max_all(), lambda d, a: a.max()),
    "argmax": (FLOATS, "any", lambda t: t.argmax_keepdim(0),
               lambda d, a: a.astype(np.float64).argmax(0)[None].astype(np.uint32)),
    "argmin": (FLOATS, "any", lambda t: t.argmin_keepdim(0),
               lambda d, a: a.astype(np.float64).argmin(0)[None].astype(np.uint32)),
    "mean_keepdim": (FLOATS, "any", lambda t: t.mean_keepdim(0),
                     _t(lambda x: x.mean(0, keepdim=True))),
    "var_keepdim": (FLOATS, "any", lambda t: t.var_keepdim(0),
                    _t(lambda x: x.var(0, keepdim=True))),
    "cumsum": (FLOATS, "any", lambda t: t.cumsum(0), _t(lambda x: x.cumsum(0))),
    "log_sum_exp": (FLOATS, "any", lambda t: t.log_sum_exp((0,)),
                    _t(lambda x: torch.logsumexp(x, 0))),
    "sort": (FLOATS, "any", lambda t: t.sort_last_dim(True)[0],
             _t(lambda x: torch.sort(x, dim=-1, stable=True).values)),
    "index_select": (ALL, "any", lambda t: t.index_select(tl.tensor([0, 0], dtype=tl.u32,
                                                                     device=t.device), 0),
                     lambda d, a: a[[0, 0]]),
    "narrow": (ALL, "any", lambda t: t.narrow(0, 0, 1), lambda d, a: a[:1]),
    "cat": (ALL, "any", lambda t: tl.Tensor.cat([t, t], 0), lambda d, a: np.concatenate([a, a], 0)),
}

BINARY = {
    "add": (FLOATS + INTS, "any", lambda a, b: a.add(b), lambda d, x, y: _bin(d, x, y, np.add, torch.add)),
    "sub": (FLOATS + INTS, "any", lambda a, b: a.sub(b), lambda d, x, y: _bin(d, x, y, np.subtract, torch.sub)),
    "mul": (FLOATS + INTS, "any", lambda a, b: a.mul(b), lambda d, x, y: _bin(d, x, y, np.multiply, torch.mul)),
    "div": (FLOATS, "pos", lambda a, b: a.div(b), lambda d, x, y: _bin(d, x, y, None, torch.div)),
    "maximum": (ALL, "any", lambda a, b: a.maximum(b), lambda d, x, y: np.maximum(x, y)),
    "minimum": (ALL, "any", lambda a, b: a.minimum(b), lambda d, x, y: np.minimum(x, y)),
    "pow": (FLOATS, "pos", lambda a, b: a.pow(b), lambda d, x, y: _bin(d, x, y, None, torch.pow)),
    "eq": (ALL, "small", lambda a, b: a.eq(b), lambda d, x, y: (x == y).astype(np.uint8)),
    "ne": (ALL, "small", lambda a, b: a.ne(b), lambda d, x, y: (x != y).astype(np.uint8)),
    "lt": (ALL, "small", lambda a, b: a.lt(b), lambda d, x, y: (x < y).astype(np.uint8)),
    "le": (ALL, "small", lambda a, b: a.le(b), lambda d, x, y: (x <= y).astype(np.uint8)),
    "gt": (ALL, "small", lambda a, b: a.gt(b), lambda d, x, y: (x > y).astype(np.uint8)),
    "ge": (ALL, "small", lambda a, b: a.ge(b), lambda d, x, y: (x >= y).astype(np.uint8)),
    "where_cond": (ALL, "any", lambda a, b: a.gt(b).where_cond(a, b),
                   lambda d, x, y: np.where(x > y, x, y)),
    "matmul_t": (FLOATS, "any", lambda a, b: a.flatten_all().reshape((1, -1)).matmul(
        b.flatten_all().reshape((-1, 1))),
        lambda d, x, y: from_torch(to_torch(x.reshape(1, -1)) @ to_torch(y.reshape(-1, 1)))),
}

BROADCAST = {
    "broadcast_add": (FLOATS + INTS, lambda a, b: a.broadcast_add(b), np.add, torch.add),
    "broadcast_sub": (FLOATS + INTS, lambda a, b: a.broadcast_sub(b), np.subtract, torch.sub),
    "broadcast_mul": (FLOATS + INTS, lambda a, b: a.broadcast_mul(b), np.multiply, torch.mul),
    "broadcast_div": (FLOATS, lambda a, b: a.broadcast_div(b), None, torch.div),
    "broadcast_maximum": (ALL, lambda a, b: a.broadcast_maximum(b), np.maximum, torch.maximum),
    "broadcast_minimum": (ALL, lambda a, b: a.broadcast_minimum(b), np.minimum, torch.minimum),
}


def _bin(dtype, x, y, np_op, torch_op):
    if dtype.is_int:
        return wrap(np_op(x.astype(np.int64), y.astype(np.int64)), dtype)
    return from_torch(torch_op(to_torch(x), to_torch(y)))


def _run(device, dtype):
    dev = device_of(device)
    if not dev.supports_dtype(dtype):
        pytest.skip(f"{dev} has no {dtype}")
    return dev


def _cases(table):
    return [pytest.param(n, d, id=f"{n}-{d}") for n in sorted(table) for d in table[n][0]]


DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,dtype", _cases(UNARY))
def test_unary_sweep(device, name, dtype):
    _, domain, ours, ref = UNARY[name]

    @SWEEP
    @given(data=st.data())
    def run(data):
        dev = _run(device, dtype)
        t, a = data.draw(view_of(dtype, dev, domain))
        check(ours(t), ref(dtype, a), dtype)

    run()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,dtype", _cases(BINARY))
def test_binary_sweep(device, name, dtype):
    _, domain, ours, ref = BINARY[name]

    @SWEEP
    @given(data=st.data())
    def run(data):
        dev = _run(device, dtype)
        t, a = data.draw(view_of(dtype, dev, domain))
        u, b = twin_like(data.draw, t, a, dtype, dev, domain)
        check(ours(t, u), ref(dtype, a, b), dtype)

    run()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,dtype", _cases(BROADCAST))
def test_broadcast_sweep(device, name, dtype):
    _, ours, np_op, torch_op = BROADCAST[name]

    @SWEEP
    @given(data=st.data())
    def run(data):
        dev = _run(device, dtype)
        domain = "pos" if name == "broadcast_div" else "any"
        t, a = data.draw(view_of(dtype, dev, domain, min_rank=2))
        # The other operand has size 1 along a drawn subset of dims.
        shape = tuple(1 if data.draw(st.booleans()) else n for n in a.shape)
        u, b = data.draw(view_of(dtype, dev, domain, shape=shape))
        if dtype.is_int:
            want = wrap(np_op(a.astype(np.int64), b.astype(np.int64)), dtype)
        else:
            want = from_torch(torch_op(to_torch(a), to_torch(b)))
        check(ours(t, u), want, dtype)

    run()


def test_the_sweep_covers_about_seventy_ops():
    assert len(UNARY) + len(BINARY) + len(BROADCAST) >= 65
