"""Element-wise ops: unary maps, scalar ops, binary ops with and without broadcasting,
comparisons and where_cond.

Methods named like the op (``add``) require equal shapes, as in candle;
``broadcast_*`` and the Python operators broadcast (as candle-pyo3). Binary ops
on tracked inputs record the broadcast views they insert, so gradients are summed
back over broadcast dims.

The Python operators and the PyTorch-named methods follow PyTorch (docs/semantics.md):
operands of different dtypes promote as ``torch.result_type`` (``dtype.py``; Python
scalars are weak: an int tensor + 0.5 is f32, an f16 tensor + 2.0 stays f16), ``/``
on integers is true division (f32), ``//`` floors, ``%`` takes the divisor's sign,
``& | ^`` are bitwise (logical on bool) and ``~`` is logical not on bool, bitwise
not on integers; comparisons give bool. candle's own names (``broadcast_add``...)
keep refusing mixed dtypes.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from .checks import binary_mismatch, is_scalar, same_shape, scalar_for
from .errors import DeviceMismatchError, UnsupportedDTypeError
from .layout import Layout
from .op import UNARY_OPS, Op, record, record1
from .shape import broadcast_shapes
from .tensor_base import TensorBase, new_id

_contig = Layout.contiguous_of
_new = object.__new__


def _unary(name):
    def method(self):
        lay = self._layout
        out = self._storage.unary(name, lay)
        if not lay.contiguous or lay.start_offset:  # else the input's layout is the result's
            lay = _contig(lay.shape)
        return self._wrap(out, lay, record1(name, self))

    method.__name__ = name
    method.__doc__ = f"Element-wise {name}."
    return method


class ElementwiseOps:
    # The unary ops (``t.exp()``, ``t.relu()``...) are added below, one per entry of
    # the op table (tallow/op.py).
    __slots__ = ()

    def affine(self, mul, add):
        """``self * mul + add``."""
        mul, add = float(mul), float(add)
        out = self._storage.affine(self._layout, mul, add)
        return self._wrap(out, _contig(self._layout.shape), record1("affine", self, (mul, add)))

    def powf(self, exponent):
        """``self ** exponent`` for a float exponent (float dtypes)."""
        exponent = float(exponent)
        out = self._storage.powf(self._layout, exponent)
        return self._wrap(out, _contig(self._layout.shape), record1("powf", self, exponent))

    def elu(self, alpha=1.0):
        """Element-wise ELU: ``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``."""
        alpha = float(alpha)
        out = self._storage.elu(self._layout, alpha)
        return self._wrap(out, _contig(self._layout.shape), record1("elu", self, alpha))

    def clamp(self, low=None, high=None, *, min=None, max=None):  # noqa: A002 - torch's names
        """Values limited to ``[low, high]`` (either may be None; scalars or tensors;
        PyTorch's ``min=`` / ``max=`` name them too). A float bound on an integer
        tensor gives f32, as ``torch.clamp`` promotes."""
        low = min if low is None else low
        high = max if high is None else high
        if not self.dtype.is_float and (isinstance(low, float) or isinstance(high, float)):
            return self.to_dtype(dt.f32).clamp(low, high)
        if isinstance(low, TensorBase) or isinstance(high, TensorBase):
            out = self
            if low is not None:
                out = out.broadcast_maximum(low if isinstance(low, TensorBase) else _full_like(self, low))
            if high is not None:
                out = out.broadcast_minimum(high if isinstance(high, TensorBase) else _full_like(self, high))
            return out
        dtype = self.dtype
        lo = None if low is None else _bound(low, dtype, "clamp", up=True)
        hi = None if high is None else _bound(high, dtype, "clamp", up=False)
        out = self._storage.clamp(self._layout, lo, hi)
        return self._wrap(out, _contig(self._layout.shape), record1("clamp", self, (lo, hi)))

    def round_to(self, decimals=0):
        """Round to ``decimals`` decimal places with candle's halves away from zero
        (``round()`` is PyTorch's, halves to even)."""
        m = 10.0 ** int(decimals)
        y = self * m
        # A half (y = k + 0.5 exactly) steps away from zero; y + 0.5 * sign(y) is exact.
        tie = (y - y.floor()) == 0.5
        away = y + y.sign() * 0.5
        return tie.where_cond(away, y.round()) * (1.0 / m)

    # -- PyTorch's dtype shorthands ----------------------------------------------------------
    def float(self):
        """``to_dtype(f32)``."""
        return self.to_dtype(dt.f32)

    def double(self):
        """``to_dtype(f64)``."""
        return self.to_dtype(dt.f64)

    def half(self):
        """``to_dtype(f16)``."""
        return self.to_dtype(dt.f16)

    def bfloat16(self):
        """``to_dtype(bf16)``."""
        return self.to_dtype(dt.bf16)

    def long(self):
        """``to_dtype(i64)``."""
        return self.to_dtype(dt.i64)

    def int(self):
        """``to_dtype(i32)``, as PyTorch's ``int()``."""
        return self.to_dtype(dt.i32)

    def short(self):
        """``to_dtype(i16)``."""
        return self.to_dtype(dt.i16)

    def char(self):
        """``to_dtype(i8)``."""
        return self.to_dtype(dt.i8)

    def byte(self):
        """``to_dtype(u8)`` (a cast: values wrap or truncate)."""
        return self.to_dtype(dt.u8)

    def bool(self):
        """``to_dtype(bool)``: True where ``self != 0`` (0.5 and NaN are True)."""
        return self.to_dtype(dt.bool_)

    # -- binary ----------------------------------------------------------------------
    def _binop(self, name, rhs, broadcast, promote=True):
        ls = self._storage
        rhs_s = rhs._storage
        if ls.dtype is not rhs_s.dtype or ls.bdev is not rhs_s.bdev:
            if not promote or ls.bdev is not rhs_s.bdev:
                binary_mismatch(name, self, rhs)
            if name == "sub" and (ls.dtype.is_bool or rhs_s.dtype.is_bool):
                raise _bool_subtraction()
            # PyTorch's promotion: both operands converted to the result dtype first
            # (recorded as casts, so gradients flow back in each operand's dtype).
            common = dt.result_type_tensors(self, rhs)
            return self.to_dtype(common)._binop(name, rhs.to_dtype(common), broadcast)
        ll = self._layout
        rl = rhs._layout
        shape = ll.shape
        if ll is rl or shape == rl.shape:
            # Equal shapes (the common case): one backend call, the record made inline.
            out = ls.binary(name, ll, rhs_s, rl)
            # A contiguous input's layout is the result's (one call less on every op's path).
            lay = ll if ll.contiguous and not ll.start_offset else _contig(shape)
            return self._wrap(out, lay, Op(name, (self, rhs)) if self._track or rhs._track else None)
        if not broadcast:
            same_shape(name, self, rhs)
        shape = broadcast_shapes(shape, rl.shape, f"broadcast_{name}")
        if self._track or rhs._track:
            # Record the broadcasts: their backward sums the gradient back.
            return self._broadcast(shape)._binop(name, rhs._broadcast(shape), False)
        if ll.shape != shape:
            ll = ll.broadcast_cached(shape)
        if rl.shape != shape:
            rl = rl.broadcast_cached(shape)
        return self._wrap(ls.binary(name, ll, rhs_s, rl), _contig(shape))

    def _scalar(self, name, value, on_left):
        dtype = self._storage.dtype
        if name == "sub" and (dtype.is_bool or isinstance(value, (bool, np.bool_))):
            raise _bool_subtraction()
        if not dtype.is_float and (dtype.is_bool or not isinstance(value, (int, np.integer))):
            # A weak Python scalar can still change a bool tensor's kind, or an integer
            # tensor's (a float scalar); an int scalar never changes an integer tensor's.
            common = dt.result_type_scalar(dtype, value)
            if common is not dtype:
                return self.to_dtype(common)._scalar(name, value, on_left)
        value = scalar_for(name, value, dtype)
        out = self._storage.binary_scalar(name, self._layout, value, on_left)
        return self._wrap(out, _contig(self._layout.shape),
                          record1("scalar_" + name, self, (value, on_left)))

    def _operand(self, name, rhs, on_left=False):
        """Dispatch ``self (op) rhs`` for the operators: tensor, scalar or array operand."""
        if isinstance(rhs, TensorBase):
            return self._binop(name, rhs, True) if not on_left else rhs._binop(name, self, True)
        if is_scalar(rhs):
            return self._scalar(name, rhs, on_left)
        other = self._array_operand(rhs)
        if other is None:
            return NotImplemented
        return self._binop(name, other, True) if not on_left else other._binop(name, self, True)

    def _array_operand(self, value):
        """A NumPy array or nested list as a tensor on self's device, else None.

        A list takes self's dtype; an array keeps its own and promotes as a tensor would.
        """
        if not isinstance(value, (np.ndarray, list, tuple)):
            return None
        other = self.new(np.asarray(value), device=self.device)
        if other.dtype is not self.dtype and not isinstance(value, np.ndarray):
            other = other.to_dtype(self.dtype)
        return other

    def add(self, rhs):
        """``self + rhs`` for equal shapes (candle; ``+`` and ``broadcast_add`` broadcast)."""
        return self._binop("add", rhs, False)

    def sub(self, rhs):
        """``self - rhs`` for equal shapes (candle; ``-`` broadcasts)."""
        return self._binop("sub", rhs, False)

    def mul(self, rhs):
        """``self * rhs`` for equal shapes (candle; ``*`` broadcasts)."""
        return self._binop("mul", rhs, False)

    def div(self, rhs):
        """``self / rhs`` for equal shapes, with candle's semantics: integer division truncates toward zero (``/`` is true division)."""
        return self._binop("div", rhs, False)

    def maximum(self, rhs):
        """The element-wise maximum with ``rhs`` (a tensor of the same shape or a scalar)."""
        if is_scalar(rhs):
            return self._scalar("maximum", rhs, False)
        return self._binop("maximum", rhs, False)

    def minimum(self, rhs):
        """The element-wise minimum with ``rhs`` (a tensor of the same shape or a scalar)."""
        if is_scalar(rhs):
            return self._scalar("minimum", rhs, False)
        return self._binop("minimum", rhs, False)

    def pow(self, rhs):
        """``self ** rhs`` element-wise (floats; a tensor of the same shape or a scalar)."""
        if is_scalar(rhs):
            return self._scalar("pow", rhs, False)
        return self._binop("pow", rhs, False)

    def broadcast_add(self, rhs):
        """``self + rhs`` with NumPy broadcasting."""
        return self._binop("add", rhs, True, promote=False)

    def broadcast_sub(self, rhs):
        """``self - rhs`` with NumPy broadcasting."""
        return self._binop("sub", rhs, True, promote=False)

    def broadcast_mul(self, rhs):
        """``self * rhs`` with NumPy broadcasting."""
        return self._binop("mul", rhs, True, promote=False)

    def broadcast_div(self, rhs):
        """``self / rhs`` with broadcasting (candle's ``div``: integers truncate)."""
        return self._binop("div", rhs, True, promote=False)

    def broadcast_maximum(self, rhs):
        """The element-wise maximum with broadcasting."""
        return self._binop("maximum", rhs, True, promote=False)

    def broadcast_minimum(self, rhs):
        """The element-wise minimum with broadcasting."""
        return self._binop("minimum", rhs, True, promote=False)

    def broadcast_pow(self, rhs):
        """``self ** rhs`` with broadcasting (floats)."""
        return self._binop("pow", rhs, True, promote=False)

    # -- Python operators -------------------------------------------------------------
    # ``+ - *`` are made by ``operator`` (below the class): the equal-shape case of
    # ``_binop`` written out in the operator itself.

    def __radd__(self, lhs):
        return self._operand("add", lhs, on_left=True)

    def __rsub__(self, lhs):
        return self._operand("sub", lhs, on_left=True)

    def __rmul__(self, lhs):
        return self._operand("mul", lhs, on_left=True)

    def __truediv__(self, rhs):
        if rhs.__class__ is self.__class__ and self._storage.dtype.is_float:
            return self._binop("div", rhs, True)
        return _true_divide(self, rhs, False)

    def __rtruediv__(self, lhs):
        return _true_divide(self, lhs, True)

    def __floordiv__(self, rhs):
        return self._operand("floor_div", rhs)

    def __rfloordiv__(self, lhs):
        return self._operand("floor_div", lhs, on_left=True)

    def __mod__(self, rhs):
        return self._operand("rem", rhs)

    def __rmod__(self, lhs):
        return self._operand("rem", lhs, on_left=True)

    def __pow__(self, rhs):
        dtype = self._storage.dtype
        if dtype.is_int and isinstance(rhs, (int, np.integer, np.bool_)):
            return _int_power(self.to_dtype(dt.result_type_scalar(dtype, rhs)), int(rhs))
        return self._operand("pow", rhs)

    def __rpow__(self, lhs):
        return self._operand("pow", lhs, on_left=True)

    def __and__(self, rhs):
        return self._operand("bit_and", rhs)

    __rand__ = __and__

    def __or__(self, rhs):
        return self._operand("bit_or", rhs)

    __ror__ = __or__

    def __xor__(self, rhs):
        return self._operand("bit_xor", rhs)

    __rxor__ = __xor__

    def __invert__(self):
        """``~t``: logical not on bool, bitwise not on the integer dtypes (PyTorch's)."""
        dtype = self._storage.dtype
        if dtype.is_bool:
            return self.eq(False)
        if dtype.is_int:
            # Unsigned: max - x; signed: -1 - x (both are the bits flipped).
            return self._scalar("sub", -1 if dtype.is_signed else int(dtype.max), True)
        raise UnsupportedDTypeError(f"~: needs a bool or integer tensor, got {dtype}")

    # -- the same, by PyTorch's names ----------------------------------------------------
    def true_divide(self, rhs):
        """``self / rhs`` (PyTorch's ``div``): integers are divided as f32."""
        return self.__truediv__(rhs)

    def floor_divide(self, rhs):
        """``self // rhs``: rounded toward minus infinity, as Python and PyTorch."""
        return self._operand("floor_div", rhs)

    def remainder(self, rhs):
        """``self % rhs``: the result takes the divisor's sign, as Python and PyTorch."""
        return self._operand("rem", rhs)

    def bitwise_and(self, rhs):
        """``self & rhs`` on integer tensors."""
        return self._operand("bit_and", rhs)

    def bitwise_or(self, rhs):
        """``self | rhs`` on integer tensors."""
        return self._operand("bit_or", rhs)

    def bitwise_xor(self, rhs):
        """``self ^ rhs`` on integer tensors."""
        return self._operand("bit_xor", rhs)

    def bitwise_not(self):
        """``~self``: bitwise not on integers, logical not on bool."""
        return self.__invert__()

    def logical_not(self):
        """bool: True where self is zero (any dtype)."""
        return self.eq(0)

    def logical_and(self, rhs):
        """bool: True where both self and ``rhs`` are nonzero."""
        return self.ne(0) & _truth(self, rhs)

    def logical_or(self, rhs):
        """bool: True where self or ``rhs`` is nonzero."""
        return self.ne(0) | _truth(self, rhs)

    def logical_xor(self, rhs):
        """bool: True where exactly one of self and ``rhs`` is nonzero."""
        return self.ne(0) ^ _truth(self, rhs)

    def __neg__(self):
        return self.neg()

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    # -- comparisons (bool results) -----------------------------------------------------
    def _cmp(self, name, rhs):
        if isinstance(rhs, TensorBase):
            ls, rs = self._storage, rhs._storage
            if ls.dtype is not rs.dtype or ls.bdev is not rs.bdev:
                if ls.bdev is not rs.bdev:
                    binary_mismatch(name, self, rhs)
                common = dt.result_type_tensors(self, rhs)
                return self.to_dtype(common)._cmp(name, rhs.to_dtype(common))
            lhs = self
            shape = self._layout.shape
            if shape != rhs._layout.shape:
                shape = broadcast_shapes(shape, rhs._layout.shape, name)
                lhs, rhs = self._broadcast(shape), rhs._broadcast(shape)
            out = lhs._storage.cmp(name, lhs._layout, rhs._storage, rhs._layout)
            return self._wrap(out, _contig(shape))
        if is_scalar(rhs):
            dtype = self._storage.dtype
            value = rhs.item() if isinstance(rhs, np.generic) else rhs
            if dtype.is_int:
                value = _int_comparand(name, value, dtype)
                if value is _ALWAYS or value is _NEVER:
                    return self.full(self.shape, value is _ALWAYS, dtype=dt.bool_, device=self.device)
            out = self._storage.cmp_scalar(name, self._layout, scalar_for(name, value, dtype))
            return self._wrap(out, _contig(self._layout.shape))
        if isinstance(rhs, list):
            return self._cmp(name, self.new(np.asarray(rhs), device=self.device).to_dtype(self.dtype))
        if isinstance(rhs, np.ndarray):
            return self._cmp(name, self.new(rhs, device=self.device))
        return NotImplemented

    def eq(self, rhs):
        """bool mask of ``self == rhs`` (a tensor, broadcast, or a scalar; dtypes promote)."""
        return self._cmp("eq", rhs)

    def ne(self, rhs):
        """bool mask of ``self != rhs``."""
        return self._cmp("ne", rhs)

    def lt(self, rhs):
        """bool mask of ``self < rhs``."""
        return self._cmp("lt", rhs)

    def le(self, rhs):
        """bool mask of ``self <= rhs``."""
        return self._cmp("le", rhs)

    def gt(self, rhs):
        """bool mask of ``self > rhs``."""
        return self._cmp("gt", rhs)

    def ge(self, rhs):
        """bool mask of ``self >= rhs``."""
        return self._cmp("ge", rhs)

    def __eq__(self, rhs):
        return self._cmp("eq", rhs)

    def __ne__(self, rhs):
        return self._cmp("ne", rhs)

    def __lt__(self, rhs):
        return self._cmp("lt", rhs)

    def __le__(self, rhs):
        return self._cmp("le", rhs)

    def __gt__(self, rhs):
        return self._cmp("gt", rhs)

    def __ge__(self, rhs):
        return self._cmp("ge", rhs)

    def where_cond(self, on_true, on_false):
        """Pick ``on_true`` where self (a bool or integer mask) is nonzero, else ``on_false``.

        The three shapes must broadcast together.
        """
        if not self.dtype.is_int:
            raise UnsupportedDTypeError(f"where_cond: the condition must be an integer tensor, got {self.dtype}")
        if is_scalar(on_true) and is_scalar(on_false):
            raise TypeError("where_cond: on_true or on_false must be a tensor (two scalars give no dtype)")
        if is_scalar(on_true):
            on_true = _full_like(on_false, on_true)
        if is_scalar(on_false):
            on_false = _full_like(on_true, on_false)
        if not isinstance(on_true, TensorBase) or not isinstance(on_false, TensorBase):
            raise TypeError("where_cond: on_true and on_false must be tensors or scalars")
        binary_mismatch("where_cond", on_true, on_false)
        if self._storage.bdev is not on_true._storage.bdev:
            raise DeviceMismatchError(
                f"where_cond: condition on {self.device}, values on {on_true.device}")
        shape = broadcast_shapes(self.shape, on_true.shape, "where_cond")
        shape = broadcast_shapes(shape, on_false.shape, "where_cond")
        c, t, f = self._broadcast(shape), on_true._broadcast(shape), on_false._broadcast(shape)
        out = c._storage.where_cond(c._layout, t._storage, t._layout, f._storage, f._layout)
        return self._wrap(out, _contig(shape), record("where_cond", (c, t, f)))


def operator(name, result_class=None):
    """``self <name> rhs`` for a Python operator: two tensors of one class, dtype, device
    and shape go straight to the backend (this is every chained op's path: one Python
    call here, one in the backend); anything else goes through ``_binop`` /
    ``_operand``, which validate and broadcast. With ``result_class`` (``Tensor``, which
    installs these on itself) the result is assembled here as ``Tensor._wrap`` does."""

    def method(self, rhs):
        if rhs.__class__ is self.__class__:
            ls = self._storage
            rs = rhs._storage
            ll = self._layout
            rl = rhs._layout
            if (ll is rl or ll.shape == rl.shape) and ls.dtype is rs.dtype and ls.bdev is rs.bdev:
                out = ls.binary(name, ll, rs, rl)
                lay = ll if ll.contiguous and not ll.start_offset else _contig(ll.shape)
                op = Op(name, (self, rhs)) if self._track or rhs._track else None
                if result_class is None:
                    return self._wrap(out, lay, op)
                t = _new(result_class)
                t._storage = out
                t._layout = lay
                t._op = op
                t._track = op is not None
                t._id = new_id()
                return t
            return self._binop(name, rhs, True)
        return self._operand(name, rhs)

    method.__name__ = f"__{name}__"
    method.__doc__ = f"``self {SYMBOLS[name]} rhs`` with broadcasting (tensors, scalars or arrays)."
    return method


SYMBOLS = {"add": "+", "sub": "-", "mul": "*"}
for _name in SYMBOLS:
    setattr(ElementwiseOps, f"__{_name}__", operator(_name))

# One method per unary op of the op table: ``t.neg()``, ``t.exp()``, ``t.relu()``...
for _name in UNARY_OPS:
    setattr(ElementwiseOps, _name, _unary(_name))
del _name


def _bool_subtraction():
    return UnsupportedDTypeError(
        "-: subtraction with a bool tensor is not supported, as in PyTorch (use ^ or "
        "logical_xor, ~ to invert a mask, or convert with to_dtype first)")


def _true_divide(t, other, on_left):
    """``t / other`` (``other / t`` when ``on_left``): PyTorch's true division, in the
    promoted dtype, or f32 when that is an integer or bool."""
    if isinstance(other, np.ndarray):
        other = t._array_operand(other)
    if isinstance(other, TensorBase):
        common = dt.result_type_tensors(t, other)
    elif is_scalar(other):
        common = dt.result_type_scalar(t._storage.dtype, other)
    else:
        return t._operand("div", other, on_left)  # a list, or NotImplemented
    if not common.is_float:
        common = dt.f32
    t = t.to_dtype(common)
    if isinstance(other, TensorBase):
        other = other.to_dtype(common)
    return t._operand("div", other, on_left)


def _truth(t, value):
    """A bool mask of ``value != 0`` (a tensor, array or scalar) on t's device."""
    if isinstance(value, TensorBase):
        return value.ne(0)
    if is_scalar(value):
        return t.full((), bool(value), dtype=dt.bool_, device=t.device)
    return t.new(np.asarray(value) != 0, device=t.device)


def _int_power(t, exponent: int):
    """``t ** exponent`` for an integer tensor: exact (wrapping) repeated squaring."""
    if exponent < 0:
        raise ValueError("integers to negative integer powers are not allowed")
    result = t.ones(t.shape, dtype=t.dtype, device=t.device)
    base = t
    while exponent:
        if exponent & 1:
            result = result * base
        exponent >>= 1
        if exponent:
            base = base * base
    return result


_ALWAYS, _NEVER = object(), object()


def _int_comparand(name, value, dtype):
    """An integer scalar in ``dtype``'s range giving the same answer as comparing with
    ``value`` exactly, or _ALWAYS / _NEVER when every element compares the same.

    A cast of the tensor to f64 would round large i64s, and inf/nan have no integer.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return _ALWAYS if name == "ne" else _NEVER
        if math.isinf(value):
            value = int(dtype.max) + 1 if value > 0 else int(dtype.min) - 1
        elif value != int(value):
            if name in ("eq", "ne"):
                return _ALWAYS if name == "ne" else _NEVER
            # x < 7.5 is x < 8, x >= 7.5 is x >= 8; x <= 7.5 is x <= 7, x > 7.5 is x > 7.
            value = math.ceil(value) if name in ("lt", "ge") else math.floor(value)
        else:
            value = int(value)
    if value > dtype.max:
        return _ALWAYS if name in ("lt", "le", "ne") else _NEVER
    if value < dtype.min:
        return _ALWAYS if name in ("gt", "ge", "ne") else _NEVER
    return value


def _full_like(t, value):
    return t.full((), value, dtype=t.dtype, device=t.device)


def _bound(value, dtype, op, up):
    if dtype.is_float:
        return float(value)
    v = math.ceil(value) if up else math.floor(value)
    return int(min(max(v, int(dtype.min)), int(dtype.max)))
