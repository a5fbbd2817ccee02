"""Fused element-wise chains against eager on IEEE special values: +-0, +-inf, NaN,
subnormals and the extremes, every pair of them, bit for bit (the sign of a zero and
a NaN's bits included). Eager runs NumPy's loops, which never raise on a division by
zero and pick the second operand of ``maximum``/``minimum`` between equal values."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl


def special_values(dtype):
    info = np.finfo(dtype)
    tiny_sub = np.nextafter(dtype(0), dtype(1))
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny_sub, -tiny_sub,
                     info.tiny / 2, info.tiny, info.max, -info.max, 1.0, -1.0, 0.5, -2.5],
                    dtype=dtype)


def every_pair(dtype):
    v = special_values(dtype)
    return np.repeat(v, len(v)), np.tile(v, len(v))


# Each chain has at least two fusable ops (a lone op is not fused); ``* 1.`` keeps a
# value as it is, sign of zero and NaN included.
CHAINS = {
    "add": lambda x, y: (x * 1.0) + y,
    "sub": lambda x, y: (x * 1.0) - y,
    "mul": lambda x, y: (x * 1.0) * y,
    "div then scale": lambda x, y: (x / y) * 2.0,
    "maximum": lambda x, y: (x * 1.0).maximum(y * 1.0),
    "minimum": lambda x, y: (x * 1.0).minimum(y * 1.0),
    "maximum swapped": lambda x, y: (y * 1.0).maximum(x * 1.0),
    "neg": lambda x, y: (x * 1.0).neg() + y * 0.0,
    "abs": lambda x, y: (x * 1.0).abs() * y,
    "sqr": lambda x, y: (x * 1.0).sqr() - y,
    "sqrt": lambda x, y: (x * 1.0).sqrt() * y,
    "recip": lambda x, y: (x * 1.0).recip() + y,
    "relu": lambda x, y: (x * 1.0).relu() * 1.0,
    "relu of a product": lambda x, y: (x * y).relu() * 1.0,
    "affine": lambda x, y: (x * 1.0).affine(-0.0, 0.0) + y * 0.0,
    "clamp": lambda x, y: (x * 1.0).clamp(-0.0, 0.0) * 1.0,
    "scalar div": lambda x, y: (x / 0.0) * 1.0,
    "scalar rdiv": lambda x, y: (0.0 / (x * 1.0)) * 1.0,
    "scalar max": lambda x, y: (x * 1.0).maximum(0.0) * 1.0,
    "mask": lambda x, y: x * x.gt(0.0).to_dtype(x.dtype) + y,
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_chain_equals_eager_bit_for_bit(name, dtype):
    fn = CHAINS[name]
    a, b = every_pair(dtype)
    x, y = tl.Tensor.from_vec(a, None), tl.Tensor.from_vec(b, None)
    with np.errstate(all="ignore"):
        want = fn(x, y).numpy()
    compiled = tl.compile(fn)
    for _ in range(3):  # the first call records, later ones replay the fused kernel
        got = compiled(x, y).numpy()
        bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
        differ = np.flatnonzero(got.view(bits) != want.view(bits))
        assert differ.size == 0, (
            f"{name}: compiled {got[differ[:4]]} != eager {want[differ[:4]]} for "
            f"x={a[differ[:4]]}, y={b[differ[:4]]}")
    assert compiled.stats()["fused_groups"] >= 1, "the chain was not fused: nothing was tested"


def test_division_by_zero_replays_without_raising():
    compiled = tl.compile(lambda x, y: (x / y) * 2.0)
    x = tl.Tensor.from_vec(np.array([1.0, -1.0, 0.0], np.float32), None)
    ok = tl.Tensor.from_vec(np.array([2.0, 4.0, 1.0], np.float32), None)
    zero = tl.Tensor.from_vec(np.array([0.0, 0.0, 0.0], np.float32), None)
    np.testing.assert_array_equal(compiled(x, ok).numpy(), [1.0, -0.5, 0.0])
    got = compiled(x, zero).numpy()
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_gpu_fused_chain_equals_eager_on_special_values(gpu, name):
    """On the GPU the fused shader gives eager's values, the sign of a zero included;
    only a NaN's payload bits may differ (WGSL leaves them to the device). Constants
    travel as uniforms, so the shader compiler cannot fold ``x * 0.0`` or ``0.0 / x``
    to 0 where eager gives NaN."""
    fn = CHAINS[name]
    a, b = every_pair(np.float32)
    x, y = tl.Tensor.from_vec(a, None, device=gpu), tl.Tensor.from_vec(b, None, device=gpu)
    want = fn(x, y).numpy()
    compiled = tl.compile(fn)
    for _ in range(3):
        got = compiled(x, y).numpy()
        same = ((got == want) & (np.signbit(got) == np.signbit(want))) | \
            (np.isnan(got) & np.isnan(want))
        bad = np.flatnonzero(~same)
        assert bad.size == 0, (f"{name}: compiled {got[bad[:4]]} != eager {want[bad[:4]]} "
                               f"for x={a[bad[:4]]}, y={b[bad[:4]]}")
    assert compiled.stats()["fused_groups"] >= 1, "the chain was not fused: nothing was tested"
