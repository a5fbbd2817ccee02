"""In-place writes: the one path every write into an existing tensor takes.

``write_in_place(t, op, write)`` is that path, for PyTorch's in-place methods, the
augmented operators (``x += y``), ``x[i] = v``, candle's ``slice_set`` /
``zero_set`` ..., ``Var.set`` and the optimisers. In order, it

1. applies the graph rule outside ``tl.no_grad()``: a ``Var`` (PyTorch's leaf that
   requires grad) is refused, and so is a result computed from one, which a plain
   write would change behind its graph (``update_in_place`` and ``x[i] = v`` record
   the write instead, tracked_writes.py); candle's own in-place names and ``Var.set`` skip the rule
   (``graph_rule=False``), as in candle;
2. refuses a broadcast view (several elements on one memory location);
3. gives the tensor's storage handle a private buffer if a ``clone()`` still shares
   it (copy-on-write, backends/shared_buffer.py): the writer's views follow it;
4. runs ``write(storage)``;
5. bumps the storage's version (versions.py), so a backward through a graph that
   recorded the old values raises ``StaleGraphError``.

Code that writes by itself (``x[i] = v`` in setitem.py) calls ``prepare_write`` (steps
1 to 3, returning the storage) and bumps the version afterwards.

``update_in_place(t, op, compute)`` is PyTorch's in-place arithmetic on top of it:
``t``'s values become ``compute(t)``, cast to ``t``'s dtype by PyTorch's rule (a float
result never goes into an integer tensor). On a tensor in a recorded graph (a
result computed from a Var), outside ``no_grad``, the tensor becomes the node of
``compute``: ``compute`` reads a copy-on-write handle of the old values, so the
graph behind still has them, and gradients flow as in PyTorch; on a view of such a
tensor the base is rebased too (tracked_writes.py).
"""

from __future__ import annotations

from .constructors import storage_of
from .errors import (
    DTypeMismatchError, InplaceOnTrackedError, OverlappingWriteError, ShapeMismatchError,
)
from .grad_mode import GRAD_MODE
from .shape import broadcast_shapes
from .tensor_base import TensorBase
from .tracked_writes import is_view_of_graph, rebind, stand_in, write_view_recorded
from .versions import bump


def _leaf_error(t, op):
    return InplaceOnTrackedError(
        f"{op}: a Var (a leaf that requires grad) cannot be written in place outside "
        "no_grad(): backward needs its value. Update parameters inside "
        "`with tl.no_grad():` (as an optimiser does), or with var.set(new_value)")


def check_writable(t, op, graph_rule=True):
    """Raise if ``t`` may not be written in place (steps 1 and 2 of ``write_in_place``).

    With ``graph_rule``, outside ``no_grad()``, a tensor in a recorded graph is refused:
    a Var by PyTorch's leaf rule, and a result computed from one because a plain
    write would not tell the graph (``update_in_place`` does, for the arithmetic)."""
    if graph_rule and t._track and GRAD_MODE.enabled:
        if t._op is None:
            raise _leaf_error(t, op)
        raise InplaceOnTrackedError(
            f"{op}: the tensor is in a recorded graph (computed from a Var) and this write "
            "would not be recorded: backward needs the old values. Compute a new tensor "
            "instead (x = x.where(mask, v)), write inside `with tl.no_grad():`, or into "
            "x.detach() if the graph no longer matters")
    lay = t._layout
    if any(st == 0 and n > 1 for st, n in zip(lay.stride, lay.shape)):
        raise OverlappingWriteError(
            f"{op}: the tensor is a broadcast view (shape {lay.shape}, strides {lay.stride}): "
            "several elements share one memory location; write into a copy() instead"
        )


def prepare_write(t, op, graph_rule=True):
    """Steps 1 to 3 of ``write_in_place``: check, then make ``t``'s buffer its own;
    returns the storage to write. A caller that writes by itself must ``bump`` the
    storage afterwards; ``write_in_place`` does both."""
    check_writable(t, op, graph_rule)
    s = t._storage
    own = getattr(s, "own_buffer", None)
    if own is not None:
        own()
    return s


def write_in_place(t, op, write, graph_rule=True):
    """Write into tensor ``t``: ``write(storage)`` writes ``t``'s storage (through
    ``t._layout`` or a view's layout on the same storage). Every in-place write in
    tallow goes through here (see the module's docstring for what it checks and
    keeps up to date); returns ``t``."""
    s = prepare_write(t, op, graph_rule)
    write(s)
    bump(s)
    return t


def source_for(t, value, shape, op):
    """``value`` (tensor, array, list or scalar) as a tensor of t's dtype on t's device,
    broadcast to ``shape`` and safe to read while t's storage is written."""
    if not isinstance(value, TensorBase):
        value = t._wrap(*storage_of(value, t.dtype, t.device))
    else:
        value = value.detach().to_device(t.device).to_dtype(t.dtype)
    if value.shape != shape:
        if broadcast_shapes(value.shape, shape, op) != shape:
            raise ShapeMismatchError(f"{op}: a value of shape {value.shape} cannot fill shape {shape}")
        value = value.broadcast_as(shape)
    if value._storage is t._storage:
        value = value.copy()
    return value


def result_for(t, result, op):
    """``result`` cast to ``t``'s dtype by PyTorch's in-place rule: a float result is
    refused by an integer or bool tensor, a non-bool result by a bool tensor."""
    want, got = t.dtype, result.dtype
    if got is want:
        return result
    if (got.is_float and not want.is_float) or (
            getattr(want, "is_bool", False) and not getattr(got, "is_bool", False)):
        raise DTypeMismatchError(
            f"{op}: the result type {got} cannot be cast to the tensor's dtype {want} "
            "(an in-place op keeps the tensor's dtype, as in PyTorch); compute a new "
            "tensor instead (x = x / y rather than x /= y), or convert x with to_dtype first")
    return result.to_dtype(want)


def _part_of_its_buffer(t) -> bool:
    """True when ``t`` covers less than its storage: a view of another tensor."""
    lay = t._layout
    n = 1
    for d in lay.shape:
        n *= d
    return lay.start_offset != 0 or n != t._storage.count


def update_in_place(t, op, compute):
    """``t``'s values replaced by ``compute(t)`` (broadcast to ``t``'s shape, cast by
    PyTorch's rule); on a tensor in a recorded graph ``t`` becomes the new node."""
    recording = GRAD_MODE.enabled
    if recording and t._track:
        if t._op is None:
            raise _leaf_error(t, op)
        if is_view_of_graph(t):  # its base changes too (tracked_writes.py)
            check_writable(t, op, graph_rule=False)
            return write_view_recorded(t, op, compute, lambda r: result_for(t, r, op))
    check_writable(t, op, graph_rule=False)
    if recording and t._track:
        result = compute(stand_in(t))
    else:
        result = compute(t)
        if recording and result._track:
            # A tracked operand (x.add_(w)): t joins the graph, as in PyTorch; the op
            # must read t's old value as a node of its own.
            if _part_of_its_buffer(t):
                raise InplaceOnTrackedError(
                    f"{op}: writing a value that needs gradients into a view of a plain "
                    "tensor: the tensor it views would not join the graph (PyTorch records "
                    "it), so gradients through it would be lost. Compute out of place "
                    "(row = row + w) or write into the whole tensor.")
            result = compute(stand_in(t))
    result = result_for(t, result, op)
    if result.shape != t.shape:
        src = source_for(t, result, t.shape, op)
    else:
        src = result
    lay = t._layout
    write_in_place(t, op, lambda s: s.copy_into_inplace(lay, src._storage, src._layout),
                   graph_rule=False)
    if recording and (t._track or result._track):
        if result.shape != t.shape:
            result = result.broadcast_as(t.shape)
        rebind(t, result)
    return t
