"""Element-wise kernels: unary, binary, scalar, comparison, where, casts.

f16 and bf16 are computed in f32 and rounded once (what candle's ``half``
arithmetic does per op); NumPy's own f16/bf16 loops already do this for the
basic arithmetic, so those run natively. The 8-, 6- and 4-bit float formats are
computed the same way. Comparisons give bool; bool takes the integer kernels
(NumPy's bool loops are PyTorch's: ``+`` is or, ``*`` is and).
"""

from __future__ import annotations

import numpy as np

from ... import bf16_numpy, dtype as dt
from ...errors import UnsupportedDTypeError
from ...op import INT_UNARY_OPS
from . import parallel

_MIN = parallel.MIN_ELEMENTS
_new = object.__new__


_F32 = np.float32
_BOOL = dt.bool_
# Float dtypes computed in f32 and rounded back once.
_HALF = (dt.f16, dt.bf16) + dt.SMALL_FLOATS


def _erf(x):
    """scipy's erf, exact to the last bit (NumPy has none); imported on first use,
    since scipy.special adds ~27 MiB to every process that imports tallow."""
    from scipy.special import erf

    return erf(x)


_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_INV_SQRT_2 = float(1.0 / np.sqrt(2.0))


# The in-place kernels below allocate their buffer with ``out=np.empty_like(x)``:
# ``x * x`` of a 0-d array is a NumPy scalar, which ``out=`` cannot write.

def gelu_tanh(x):
    """The tanh approximation of GELU, in x's float dtype (the op table's ``gelu``)."""
    inner = np.multiply(x, x, out=np.empty_like(x))
    inner *= 0.044715 * x
    inner += x
    inner *= _SQRT_2_OVER_PI
    np.tanh(inner, out=inner)
    inner += 1.0
    inner *= 0.5 * x
    return inner


def _gelu_erf(x):
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1.0 + _erf(x64 * _INV_SQRT_2))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        y = np.negative(x, out=np.empty_like(x))
        np.exp(y, out=y)
        y += 1.0
        return np.reciprocal(y, out=y)


def _silu(x):
    with np.errstate(over="ignore"):
        return x * _sigmoid(x)


def _round_half_even(x):
    # PyTorch's round (and NumPy's): halves go to the even neighbour.
    return np.rint(x)


_ZEROS: dict = {}
ZEROS_MAX = 1 << 16  # elements


def cached_zeros_like(x):
    """A shared read-only zero array of x's shape and dtype (small shapes only)."""
    key = (x.shape, x.dtype)
    z = _ZEROS.get(key)
    if z is None:
        if len(_ZEROS) >= 64:
            _ZEROS.clear()
        z = np.zeros(x.shape, x.dtype)
        z.flags.writeable = False
        _ZEROS[key] = z
    return z


ZERO_ROW = 1 << 12  # elements per row of a large input's maximum against zeros


def _relu(x, out=None):
    # NumPy's maximum against a scalar takes a slower loop than against an array
    # (the same values, the same results), so small inputs use a cached zero array of
    # their shape and large contiguous ones go as rows against one zero row.
    if x.size <= ZEROS_MAX:
        return np.maximum(x, cached_zeros_like(x), out=out)
    if x.flags.c_contiguous and (out is None or out.flags.c_contiguous):
        return _max_with_zero_rows(x, out)
    return np.maximum(x, x.dtype.type(0), out=out)


def _max_with_zero_rows(x, out):
    """``max(x, 0)`` of a contiguous ``x``: rows of ``ZERO_ROW`` elements against a
    broadcast zero row (a read-only view of a cached one), then the tail."""
    if out is None:
        out = np.empty(x.shape, x.dtype)
    flat, res = x.reshape(-1), out.reshape(-1)
    zeros = cached_zeros_like(np.empty(ZERO_ROW, x.dtype))
    whole = flat.size - flat.size % ZERO_ROW
    np.maximum(flat[:whole].reshape(-1, ZERO_ROW), zeros, out=res[:whole].reshape(-1, ZERO_ROW))
    np.maximum(flat[whole:], zeros[:flat.size - whole], out=res[whole:])
    return out


_relu.takes_out = True


def _quiet(f):
    def run(x, **kw):
        with np.errstate(all="ignore"):
            return f(x, **kw)
    run.takes_out = True  # forwards ``out=`` to the ufunc
    return run


# The unary ops of the op table (tallow/op.py): one line each.
_FLOAT_UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": _quiet(np.exp), "log": _quiet(np.log),
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqr": np.square,
    "sqrt": _quiet(np.sqrt), "recip": _quiet(np.reciprocal),
    "relu": _relu, "gelu": gelu_tanh,
    "gelu_erf": _gelu_erf, "erf": lambda x: _erf(x.astype(np.float64)),
    "silu": _silu, "sigmoid": _sigmoid, "floor": np.floor, "ceil": np.ceil,
    "round": _round_half_even, "sign": np.sign,
}


def _int_neg(x):
    if x.dtype.kind in "ub":
        raise UnsupportedDTypeError(f"neg: not defined for unsigned dtype {x.dtype}")
    return np.negative(x)


# The op table's unary ops on integers: the float functions, except neg (refuses unsigned).
_INT_UNARY = {name: _FLOAT_UNARY[name] for name in INT_UNARY_OPS} | {"neg": _int_neg}


def _float_in(s, layout):
    """The operand for float math: f16/bf16 widened to f32."""
    x = s.view(layout)
    if s.dtype in _HALF:
        return x.astype(_F32)
    return x


def _float_out(s, y, dtype):
    npd = dtype.np
    if y.dtype is not npd and y.dtype != npd:
        y = y.astype(npd)
    return s._wrap(y, dtype)


def _unsupported(op, dtype):
    return UnsupportedDTypeError(f"{op}: not supported for dtype {dtype} on cpu")


def _bool_refused(op):
    """PyTorch's refusals on two bool operands: ``-`` (use ``^`` or ``~``), ``//``,
    ``%`` and candle's truncating ``div`` (``/`` divides in f32)."""
    hint = " (use ^ or logical_xor, or ~ to invert a mask)" if op == "sub" else (
        " (convert to an integer dtype first)")
    return UnsupportedDTypeError(f"{op}: not supported on two bool operands{hint}")


# Binary ops that bool operands refuse, as in PyTorch.
_BOOL_REFUSED = frozenset(("sub", "div", "rem", "floor_div", "pow"))


def _apply(f, x):
    if x.size < _MIN:
        return f(x)
    if op_takes_out(f):
        return parallel.ufunc(f, x.dtype, x)
    return parallel.mapped(f, None, x)


def op_takes_out(f) -> bool:
    return isinstance(f, np.ufunc) or getattr(f, "takes_out", False)


def _int_div(a, b):
    if np.any(b == 0):
        raise ZeroDivisionError("div: integer division by zero")
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    q = np.floor_divide(a, b)
    # Rust truncates toward zero: undo the floor where the remainder is nonzero
    # and the operands' signs differ.
    r = a - q * b
    q += ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


def _float_pow(a, b):
    with np.errstate(all="ignore"):
        return np.power(a, b)


def _float_div(a, b):
    with np.errstate(all="ignore"):
        return np.divide(a, b)


_BITWISE = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor}
_FLOORED = {"rem": np.remainder, "floor_div": np.floor_divide}


def _floored_or_bitwise(s, op, a, b, dtype):
    """Python's ``%`` / ``//`` and the bitwise ops, or None for another op."""
    f = _BITWISE.get(op)
    if f is not None:
        if not dtype.is_int:
            raise _unsupported(op, dtype)
        return s._wrap(f(a, b), dtype)
    f = _FLOORED.get(op)
    if f is None:
        return None
    if dtype.is_int:
        if np.any(b == 0):
            raise ZeroDivisionError(f"{op}: integer division by zero")
        return s._wrap(np.asarray(f(a, b)), dtype)
    with np.errstate(all="ignore"):
        if dtype in _HALF:
            return _float_out(s, np.asarray(f(a.astype(_F32), b.astype(_F32))), dtype)
        return s._wrap(np.asarray(f(a, b)), dtype)


_BINARY_NATIVE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum,
}


_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def _float_to_int(x, dtype):
    # Rust's `as`: truncate toward zero, saturate at the bounds, NaN -> 0.
    x64 = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf)
    lo, hi = float(dtype.min), float(dtype.max)
    clipped = np.clip(x64, lo, hi)
    if dtype is dt.i64:
        # i64::MAX is not a float; 2**63 would overflow the cast.
        out = np.where(clipped >= 2.0**63, 0, clipped).astype(np.int64)
        out[clipped >= 2.0**63] = np.iinfo(np.int64).max
        return out
    return clipped.astype(dtype.np)


class CpuElementwise:
    """Element-wise methods of ``CpuStorage``: unary, affine/powf/elu/clamp, binary, comparisons, where, casts."""

    __slots__ = ()

    def unary(self, op, layout):
        dtype = self.dtype
        if dtype is dt.f32 or dtype is dt.f64:
            # The common case, kept short: the op'self function on the strided view.
            vc = self._vc
            x = vc[1] if vc is not None and vc[0] is layout else self.view(layout)
            f = _FLOAT_UNARY.get(op)
            if f is None:
                raise ValueError(f"unknown unary op {op!r}")
            return _float_out(self, f(x) if x.size < _MIN else _apply(f, x), dtype)
        if dtype.is_float:
            f = _FLOAT_UNARY.get(op)
            if f is None:
                raise ValueError(f"unknown unary op {op!r}")
            return _float_out(self, _apply(f, _float_in(self, layout)), dtype)
        f = _INT_UNARY.get(op) if not dtype.is_bool else None
        if f is None:
            raise _unsupported(op, dtype)
        return self._wrap(_apply(f, self.view(layout)), dtype)

    def affine(self, layout, mul, add):
        dtype = self.dtype
        if dtype.is_float:
            x = _float_in(self, layout)
            y = x * x.dtype.type(mul)
            y += x.dtype.type(add)
            return _float_out(self, y, dtype)
        # Integers: exact modular arithmetic with the scalars truncated to integers.
        x = self.view(layout)
        wide = np.uint64 if x.dtype.kind == "u" else np.int64
        with np.errstate(over="ignore"):
            y = x.astype(wide) * wide(int(mul) % 2**64 if wide is np.uint64 else int(mul))
            y += wide(int(add) % 2**64 if wide is np.uint64 else int(add))
        return self._wrap(y.astype(dtype.np), dtype)

    def powf(self, layout, exponent):
        if not self.dtype.is_float:
            raise _unsupported("powf", self.dtype)
        x = _float_in(self, layout)
        with np.errstate(all="ignore"):
            y = np.power(x, x.dtype.type(exponent))
        return _float_out(self, y, self.dtype)

    def elu(self, layout, alpha):
        if not self.dtype.is_float:
            raise _unsupported("elu", self.dtype)
        x = _float_in(self, layout)
        with np.errstate(all="ignore"):
            neg = np.expm1(x) * x.dtype.type(alpha)
        return _float_out(self, np.where(np.signbit(x), neg, x), self.dtype)

    def clamp(self, layout, low, high):
        x = self.view(layout)
        t = x.dtype.type
        y = x
        if low is not None:
            y = np.maximum(y, t(low))
        if high is not None:
            y = np.minimum(y, t(high))
        if y is x:
            y = x.copy()
        return self._wrap(y, self.dtype)

    def binary(self, op, lhs_layout, rhs, rhs_layout):
        vc = self._vc
        a = vc[1] if vc is not None and vc[0] is lhs_layout else self.view(lhs_layout)
        vc = rhs._vc
        b = vc[1] if vc is not None and vc[0] is rhs_layout else rhs.view(rhs_layout)
        f = _BINARY_NATIVE.get(op)
        dtype = self.dtype
        if dtype is _BOOL and op in _BOOL_REFUSED:
            raise _bool_refused(op)
        if f is not None:
            out = f(a, b) if lhs_layout.count < _MIN else parallel.ufunc(f, a.dtype, a, b)
            if lhs_layout.contiguous and rhs_layout.contiguous:
                # Two C-ordered operands give a C-ordered result: the storage is made
                # here, its view cached under the layout the tensor will carry.
                s = _new(self.__class__)
                s.arr = out
                s.dtype = dtype
                s._vc = None if lhs_layout.start_offset else (lhs_layout, out)
                return s
            return self._wrap(out, dtype)
        if op == "div":
            if dtype.is_int:
                return self._wrap(_int_div(a, b), dtype)
            return self._wrap(_float_div(a, b), dtype)
        out = _floored_or_bitwise(self, op, a, b, dtype)
        if out is not None:
            return out
        if op == "pow":
            if not dtype.is_float:
                raise _unsupported("pow", dtype)
            if dtype in _HALF:
                return _float_out(self, _float_pow(a.astype(_F32), b.astype(_F32)), dtype)
            return self._wrap(_float_pow(a, b), dtype)
        raise ValueError(f"unknown binary op {op!r}")

    def binary_scalar(self, op, layout, scalar, scalar_on_left):
        vc = self._vc
        x = vc[1] if vc is not None and vc[0] is layout else self.view(layout)
        dtype = self.dtype
        if dtype is _BOOL and op in _BOOL_REFUSED:
            raise _bool_refused(op)
        c = dtype.np.type(scalar)
        f = _BINARY_NATIVE.get(op)
        if f is not None:
            if x.size >= _MIN:
                args = (c, x) if scalar_on_left else (x, c)
                return self._wrap(parallel.ufunc(f, x.dtype, *args), dtype)
            return self._wrap(f(c, x) if scalar_on_left else f(x, c), dtype)
        if op == "div":
            if dtype.is_int:
                a, b = (np.full_like(x, c), x) if scalar_on_left else (x, np.full_like(x, c))
                return self._wrap(_int_div(a, b), dtype)
            return self._wrap(_float_div(c, x) if scalar_on_left else _float_div(x, c), dtype)
        if op in _BITWISE or op in _FLOORED:
            full = np.full_like(x, c)
            return _floored_or_bitwise(self, op, *((full, x) if scalar_on_left else (x, full)), dtype)
        if op == "pow":
            if not dtype.is_float:
                raise _unsupported("pow", dtype)
            xf = x.astype(_F32) if dtype in _HALF else x
            cf = xf.dtype.type(scalar)
            return _float_out(self, _float_pow(cf, xf) if scalar_on_left else _float_pow(xf, cf), dtype)
        raise ValueError(f"unknown binary op {op!r}")

    def cmp(self, op, lhs_layout, rhs, rhs_layout):
        out = _CMP[op](self.view(lhs_layout), rhs.view(rhs_layout))
        return self._wrap(np.asarray(out), dt.bool_)

    def cmp_scalar(self, op, layout, scalar):
        out = _CMP[op](self.view(layout), self.dtype.np.type(scalar))
        return self._wrap(np.asarray(out), dt.bool_)

    def where_cond(self, layout, on_true, true_layout, on_false, false_layout):
        cond = self.view(layout) != 0
        out = np.where(cond, on_true.view(true_layout), on_false.view(false_layout))
        return self._wrap(out, on_true.dtype)

    def to_dtype(self, layout, dtype):
        x = self.view(layout)
        if dtype.is_bool:
            return self._wrap(np.asarray(x != 0), dtype)  # PyTorch: 0.5 and NaN are True
        if (dtype.is_small_float or self.dtype.is_small_float) and dt.f32 not in (dtype, self.dtype) \
                and self.dtype is not dt.f64:
            # Through f32, as the GPU and candle convert them (ml_dtypes' direct casts
            # between two small formats treat NaN differently from its casts via f32).
            x = x.astype(_F32)
            if dtype.is_int:
                return self._wrap(_float_to_int(x, dtype), dtype)
        if dtype.is_int and self.dtype.is_float:
            return self._wrap(_float_to_int(x, dtype), dtype)
        if dtype is dt.bf16 and self.dtype is dt.f64:
            return self._wrap(bf16_numpy.from_f64(x), dtype)  # rounded once
        with np.errstate(over="ignore"):  # out-of-range floats become inf, as documented
            return self._wrap(x.astype(dtype.np, order="C"), dtype)
