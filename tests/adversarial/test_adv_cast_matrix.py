"""Every (from, to) dtype cast on boundary values: CPU and GPU against NumPy's rule.

The rule (docs/differences.md): int -> int wraps and int/float -> float rounds to
nearest, as NumPy's ``astype``; float -> int truncates toward zero and saturates at
the target's bounds, NaN -> 0 (Rust's ``as``; NumPy leaves those cases undefined).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tallow as tl
from support.adversarial import ALL

_INT_BOUNDARIES = [0, 1, 2, 127, 128, 254, 255, 256, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1,
                   2**32, 2**53 + 1, 2**63 - 2, 2**63 - 1, -1, -2, -(2**31), -(2**63)]
_FLOAT_BOUNDARIES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 254.9, 255.0, 255.5, 256.0,
                     2.0**31, 2.0**32 - 1, 2.0**32, 2.0**53 + 2, 2.0**63, -(2.0**63), 1e30, -1e30,
                     65504.0, 65520.0, 3.4e38, 1e300, 1e-40, -1e-40, 1e-310, 6e-8, 1e-45,
                     float("nan"), float("inf"), float("-inf")]


def source_values(dtype) -> np.ndarray:
    """The boundary values a ``dtype`` can hold (ints: those in range, wrapped no further)."""
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        vals = sorted({v for v in _INT_BOUNDARIES if info.min <= v <= info.max}
                      | {info.max, info.max - 1, info.min})
        return np.array(vals, dtype=dtype.np)
    with np.errstate(over="ignore"):
        vals = np.array(_FLOAT_BOUNDARIES, dtype=np.float64).astype(dtype.np)
    return vals


def numpy_rule(x: np.ndarray, to) -> np.ndarray:
    """What a cast of ``x`` to ``to`` must give."""
    if to.is_int and x.dtype.kind == "f" or (to.is_int and x.dtype == ml_dtypes.bfloat16):
        x64 = x.astype(np.float64)
        info = np.iinfo(to.np)
        out = np.zeros(x64.shape, dtype=to.np)
        for i, v in enumerate(x64):
            if np.isnan(v):
                out[i] = 0
            elif v >= float(info.max):
                out[i] = info.max
            elif v <= float(info.min):
                out[i] = info.min
            else:
                out[i] = int(np.trunc(v))
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype.kind in "iu" and to.is_int:
            # Wrapping (two's complement), as astype does for ints.
            return np.array([int(v) % (1 << (8 * to.np.itemsize)) for v in x], dtype=np.uint64) \
                .astype(to.np)
        return x.astype(to.np)


def same(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Bit-identical, except that every NaN equals every NaN."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.dtype != e.dtype or a.shape != e.shape:
        return False
    if a.dtype.kind in "iu" or a.dtype.itemsize == 1:
        return bool(np.array_equal(a, e))
    af, ef = a.astype(np.float64), e.astype(np.float64)
    both_nan = np.isnan(af) & np.isnan(ef)
    bits_equal = a.view(f"u{a.dtype.itemsize}") == e.view(f"u{e.dtype.itemsize}")
    return bool(np.all(both_nan | bits_equal))


PAIRS = [(a, b) for a in ALL for b in ALL]


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_cast_matrix_cpu(src, dst):
    x = source_values(src)
    got = tl.tensor(x, dtype=src).to_dtype(dst).numpy()
    want = numpy_rule(x, dst)
    assert same(got, want), f"{src}->{dst}\n in   {x}\n got  {got}\n want {want}"


@pytest.mark.gpu
@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_cast_matrix_gpu(src, dst):
    from support.adversarial import gpu_or_skip

    gpu = gpu_or_skip()
    if not (gpu.supports_dtype(src) and gpu.supports_dtype(dst)):
        pytest.skip(f"{gpu} lacks {src} or {dst}")
    x = source_values(src)
    # Subnormals stay in the matrix: drivers may flush them in arithmetic, but a cast
    # must keep every value the target can hold.
    got = tl.tensor(x, dtype=src).to_device(gpu).to_dtype(dst).numpy()
    want = numpy_rule(x, dst)
    assert same(got, want), f"{src}->{dst}\n in   {x}\n got  {got}\n want {want}"


def test_u32_to_i64_above_2_31_on_gpu():
    from support.adversarial import gpu_or_skip

    gpu = gpu_or_skip()
    t = tl.tensor([2**31, 4294967295], dtype=tl.u32).to_device(gpu).to_dtype(tl.i64)
    assert t.numpy().tolist() == [2**31, 4294967295]
