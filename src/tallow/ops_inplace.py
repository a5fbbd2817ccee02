"""PyTorch's in-place methods and Python's augmented operators, writing into the tensor.

``x.add_(y)``, ``x += y``, ``x.zero_()``, ``x.copy_(src)`` ... change ``x``'s
values where they are stored, so every view of that storage sees the change
(``row = x[0]; row += 1`` writes into ``x``), as in PyTorch. They all go through
``tallow.inplace`` (the leaf rule, copy-on-write, the version counter); the
arithmetic ones through ``update_in_place``: the result is cast to the tensor's
dtype by PyTorch's rule (``int_tensor /= 2`` raises), and on a tensor computed
from a Var the tensor becomes the new node of the graph.
"""

from __future__ import annotations

from .checks import scalar_for
from .grad_mode import GRAD_MODE
from .inplace import source_for, update_in_place, write_in_place
from .tensor_base import TensorBase


def _fast(t, *others) -> bool:
    """True when nothing is recorded: a plain write, no graph to update."""
    if not GRAD_MODE.enabled:
        return True
    return not t._track and not any(isinstance(o, TensorBase) and o._track for o in others)


class InplaceOps:
    __slots__ = ()

    # -- arithmetic --------------------------------------------------------------------
    def add_(self, other, alpha=1):
        """In place: ``self += alpha * other`` (broadcast to self's shape); returns self."""
        return update_in_place(self, "add_", lambda t: t + (other if alpha == 1 else other * alpha))

    def sub_(self, other, alpha=1):
        """In place: ``self -= alpha * other``; returns self."""
        return update_in_place(self, "sub_", lambda t: t - (other if alpha == 1 else other * alpha))

    def mul_(self, other):
        """In place: ``self *= other``; returns self."""
        return update_in_place(self, "mul_", lambda t: t * other)

    def div_(self, other, rounding_mode=None):
        """In place: ``self /= other`` (true division; an integer tensor raises, as in
        PyTorch, since the float result cannot be stored), or ``//`` with
        ``rounding_mode="floor"``; returns self."""
        if rounding_mode is None:
            return update_in_place(self, "div_", lambda t: t / other)
        if rounding_mode == "floor":
            return update_in_place(self, "div_", lambda t: t // other)
        raise ValueError(f"div_: rounding_mode must be None or 'floor', got {rounding_mode!r}")

    def pow_(self, exponent):
        """In place: ``self **= exponent``; returns self."""
        return update_in_place(self, "pow_", lambda t: t ** exponent)

    def clamp_(self, min=None, max=None):  # noqa: A002  (PyTorch's names)
        """In place: ``self = self.clamp(min, max)``; returns self."""
        return update_in_place(self, "clamp_", lambda t: t.clamp(min, max))

    def masked_fill_(self, mask, value):
        """In place: ``value`` where ``mask`` (broadcast to self) is true; returns self."""
        return update_in_place(self, "masked_fill_", lambda t: t.masked_fill(mask, value))

    # -- fills and copies --------------------------------------------------------------
    def zero_(self):
        """In place: fill with zeros; returns self."""
        return self.fill_(0)

    def fill_(self, value):
        """In place: fill with ``value`` (a scalar or a one-element tensor); returns self."""
        if isinstance(value, TensorBase):
            value = value.item()
        scalar = scalar_for("fill_", value, self.dtype)
        if _fast(self):
            lay = self._layout
            return write_in_place(self, "fill_", lambda s: s.fill_inplace(lay, scalar))
        # A tensor in a recorded graph: its values are now a constant.
        return update_in_place(self, "fill_", lambda t: _full_of(t, t.shape, scalar))

    def copy_(self, src):
        """In place: copy ``src``'s values (cast to self's dtype and device, broadcast
        to self's shape) into self; returns self."""
        if _fast(self, src):
            s = source_for(self, src, self.shape, "copy_")
            lay = self._layout
            return write_in_place(
                self, "copy_", lambda st: st.copy_into_inplace(lay, s._storage, s._layout))
        return update_in_place(
            self, "copy_", lambda t: src.to_device(self.device).to_dtype(self.dtype))

    # -- scatters (PyTorch's argument order: dim first) ----------------------------------
    def scatter_(self, dim, index, src):
        """In place: ``self[index[i][j]][j] = src[i][j]`` for dim 0 (and so on), as
        ``torch.Tensor.scatter_``; ``src`` may be a scalar; returns self."""
        return update_in_place(self, "scatter_", lambda t: t.scatter(index, _source(t, src, index), dim))

    def scatter_add_(self, dim, index, src):
        """In place: ``src`` added at ``index`` along ``dim`` (repeats add up); returns self."""
        return update_in_place(
            self, "scatter_add_", lambda t: t.scatter_add(index, _source(t, src, index), dim))

    def index_add_(self, dim, index, source, alpha=1):
        """In place: ``alpha * source``'s slices added at rows ``index`` of ``dim``; returns self."""
        return update_in_place(
            self, "index_add_",
            lambda t: t.index_add(index, source if alpha == 1 else source * alpha, dim))

    # -- Python's augmented operators: in place, as in PyTorch and NumPy -------------------
    def __iadd__(self, other):
        return update_in_place(self, "+=", lambda t: t + other)

    def __isub__(self, other):
        return update_in_place(self, "-=", lambda t: t - other)

    def __imul__(self, other):
        return update_in_place(self, "*=", lambda t: t * other)

    def __itruediv__(self, other):
        return update_in_place(self, "/=", lambda t: t / other)

    def __ifloordiv__(self, other):
        return update_in_place(self, "//=", lambda t: t // other)

    def __imod__(self, other):
        return update_in_place(self, "%=", lambda t: t % other)

    def __ipow__(self, other):
        return update_in_place(self, "**=", lambda t: t ** other)

    def __iand__(self, other):
        return update_in_place(self, "&=", lambda t: t & other)

    def __ior__(self, other):
        return update_in_place(self, "|=", lambda t: t | other)

    def __ixor__(self, other):
        return update_in_place(self, "^=", lambda t: t ^ other)


# PyTorch's unary in-place methods: ``x.relu_()`` is ``x`` with ``x.relu()``'s values.
# (``round_`` is left out: PyTorch rounds halves to even, tallow's ``round`` away from
# zero, as candle.)
UNARY_INPLACE = {
    "abs_": "abs", "neg_": "neg", "exp_": "exp", "log_": "log", "sin_": "sin", "cos_": "cos",
    "tanh_": "tanh", "sqrt_": "sqrt", "relu_": "relu", "sigmoid_": "sigmoid",
    "floor_": "floor", "ceil_": "ceil", "sign_": "sign", "erf_": "erf",
    "reciprocal_": "recip", "square_": "sqr",
}


def _unary_inplace(name, method):
    def inplace(self):
        return update_in_place(self, name, lambda t: getattr(t, method)())

    inplace.__name__ = inplace.__qualname__ = name
    inplace.__doc__ = f"In place: ``self = self.{method}()``; returns self."
    return inplace


for _name, _method in UNARY_INPLACE.items():
    setattr(InplaceOps, _name, _unary_inplace(_name, _method))
del _name, _method


def _source(t, src, index):
    """A scatter's source: a tensor as it is, a scalar as a tensor of ``index``'s shape."""
    if isinstance(src, TensorBase):
        return src
    return _full_of(t, index.shape, src)


def _full_of(t, shape, value):
    """``value`` in ``shape``, with ``t``'s dtype and device (a plain tensor, from the
    constructors every tensor has)."""
    return t.full(shape, value, dtype=t.dtype, device=t.device)
