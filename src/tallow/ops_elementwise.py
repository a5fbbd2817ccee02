"""Element-wise ops: unary maps, scalar ops, binary ops with and without broadcasting,
comparisons and where_cond.

Methods named like the op (``add``) require equal shapes, as in candle;
``broadcast_*`` and the Python operators broadcast (as candle-pyo3). Binary ops
on tracked inputs record the broadcast views they insert, so gradients are summed
back over broadcast dims.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import binary_mismatch, is_scalar, same_shape, scalar_for
from .errors import DeviceMismatchError, UnsupportedDTypeError
from .layout import Layout
from .op import UNARY_OPS, record, record1, record2
from .shape import broadcast_shapes
from .tensor_base import TensorBase

_contig = Layout.contiguous_of


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
        exponent = float(exponent)
        out = self._storage.powf(self._layout, exponent)
        return self._wrap(out, _contig(self._layout.shape), record1("powf", self, exponent))

    def elu(self, alpha=1.0):
        alpha = float(alpha)
        out = self._storage.elu(self._layout, alpha)
        return self._wrap(out, _contig(self._layout.shape), record1("elu", self, alpha))

    def clamp(self, low=None, high=None):
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
        """Round to ``decimals`` decimal places (halves away from zero)."""
        m = 10.0 ** int(decimals)
        return (self * m).round() * (1.0 / m)

    # -- binary ----------------------------------------------------------------------
    def _binop(self, name, rhs, broadcast):
        ls = self._storage
        rhs_s = rhs._storage
        if ls.dtype is not rhs_s.dtype or ls.bdev is not rhs_s.bdev:
            binary_mismatch(name, self, rhs)
        ll = self._layout
        rl = rhs._layout
        shape = ll.shape
        if shape != rl.shape:
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
        out = ls.binary(name, ll, rhs_s, rl)
        # A contiguous input's layout is the result's (one call less on every op's path).
        lay = ll if ll.contiguous and not ll.start_offset else _contig(shape)
        return self._wrap(out, lay, record2(name, self, rhs))

    def _scalar(self, name, value, on_left):
        value = scalar_for(name, value, self._storage.dtype)
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

        A list takes self's dtype; an array keeps its own (mixing dtypes stays an error).
        """
        if not isinstance(value, (np.ndarray, list, tuple)):
            return None
        other = self.new(np.asarray(value), device=self.device)
        if other.dtype is not self.dtype and not isinstance(value, np.ndarray):
            other = other.to_dtype(self.dtype)
        return other

    def add(self, rhs):
        return self._binop("add", rhs, False)

    def sub(self, rhs):
        return self._binop("sub", rhs, False)

    def mul(self, rhs):
        return self._binop("mul", rhs, False)

    def div(self, rhs):
        return self._binop("div", rhs, False)

    def maximum(self, rhs):
        if is_scalar(rhs):
            return self._scalar("maximum", rhs, False)
        return self._binop("maximum", rhs, False)

    def minimum(self, rhs):
        if is_scalar(rhs):
            return self._scalar("minimum", rhs, False)
        return self._binop("minimum", rhs, False)

    def pow(self, rhs):
        if is_scalar(rhs):
            return self._scalar("pow", rhs, False)
        return self._binop("pow", rhs, False)

    def broadcast_add(self, rhs):
        return self._binop("add", rhs, True)

    def broadcast_sub(self, rhs):
        return self._binop("sub", rhs, True)

    def broadcast_mul(self, rhs):
        return self._binop("mul", rhs, True)

    def broadcast_div(self, rhs):
        return self._binop("div", rhs, True)

    def broadcast_maximum(self, rhs):
        return self._binop("maximum", rhs, True)

    def broadcast_minimum(self, rhs):
        return self._binop("minimum", rhs, True)

    def broadcast_pow(self, rhs):
        return self._binop("pow", rhs, True)

    # -- Python operators -------------------------------------------------------------
    def __add__(self, rhs):
        if rhs.__class__ is self.__class__:
            return self._binop("add", rhs, True)
        return self._operand("add", rhs)

    def __radd__(self, lhs):
        return self._operand("add", lhs, on_left=True)

    def __sub__(self, rhs):
        if rhs.__class__ is self.__class__:
            return self._binop("sub", rhs, True)
        return self._operand("sub", rhs)

    def __rsub__(self, lhs):
        return self._operand("sub", lhs, on_left=True)

    def __mul__(self, rhs):
        if rhs.__class__ is self.__class__:
            return self._binop("mul", rhs, True)
        return self._operand("mul", rhs)

    def __rmul__(self, lhs):
        return self._operand("mul", lhs, on_left=True)

    def __truediv__(self, rhs):
        if rhs.__class__ is self.__class__:
            return self._binop("div", rhs, True)
        return self._operand("div", rhs)

    def __rtruediv__(self, lhs):
        return self._operand("div", lhs, on_left=True)

    def __pow__(self, rhs):
        return self._operand("pow", rhs)

    def __rpow__(self, lhs):
        return self._operand("pow", lhs, on_left=True)

    def __neg__(self):
        return self.neg()

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    # -- comparisons (u8 results) -------------------------------------------------------
    def _cmp(self, name, rhs):
        if isinstance(rhs, TensorBase):
            ls, rs = self._storage, rhs._storage
            if ls.dtype is not rs.dtype or ls.bdev is not rs.bdev:
                binary_mismatch(name, self, rhs)
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
                    return self.full(self.shape, int(value is _ALWAYS), dtype="u8", device=self.device)
            out = self._storage.cmp_scalar(name, self._layout, scalar_for(name, value, dtype))
            return self._wrap(out, _contig(self._layout.shape))
        if isinstance(rhs, (np.ndarray, list)):
            return self._cmp(name, self.new(np.asarray(rhs), device=self.device).to_dtype(self.dtype))
        return NotImplemented

    def eq(self, rhs):
        return self._cmp("eq", rhs)

    def ne(self, rhs):
        return self._cmp("ne", rhs)

    def lt(self, rhs):
        return self._cmp("lt", rhs)

    def le(self, rhs):
        return self._cmp("le", rhs)

    def gt(self, rhs):
        return self._cmp("gt", rhs)

    def ge(self, rhs):
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
        """Pick ``on_true`` where self (an integer mask) is nonzero, else ``on_false``.

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


# One method per unary op of the op table: ``t.neg()``, ``t.exp()``, ``t.relu()``...
for _name in UNARY_OPS:
    setattr(ElementwiseOps, _name, _unary(_name))
del _name


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
