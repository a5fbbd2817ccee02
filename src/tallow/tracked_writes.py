"""Writes into a tensor of a recorded graph that PyTorch records: ``h[i] = v``,
``h[i] += v`` and in-place arithmetic on a view (``row = h[0]; row += 1``).

A write into a tensor computed from a ``Var`` is recorded as an out-of-place op
whose result the tensor then becomes (``inplace.update_in_place``): the graph
behind keeps the old values through a copy-on-write handle. Two writes need more
than that, and are built here from differentiable ops:

- an indexed write ``h[index] = v`` is ``where(mask, v placed, h)``: ``v``,
  broadcast to the selection, is placed by an ``index_select`` of its flat ids (a
  position named twice takes the last value, NumPy's rule), so the gradient goes to
  ``h`` where nothing was written and to ``v`` where it was; with ``accumulate`` it
  is ``h + zeros.index_add(positions, v)``;
- a write into a view of such a tensor changes its base too, as in PyTorch: the
  base (found through the view ops, which share its storage) becomes the indexed
  write of the view's new values at the view's positions, and the view becomes
  those new values. Graphs recorded from the base or its other views before the
  write are stale afterwards (backward raises ``StaleGraphError``), never wrong.
"""

from __future__ import annotations

import weakref

import numpy as np

from .candle_index import ids_on
from .constructors import storage_of
from .errors import InplaceOnTrackedError
from .tensor_base import TensorBase, new_id
from .versions import bump


# id(view written in place) -> its base: the view's node is then its new values, no
# longer a view op, yet a later write into it must still change the base. Keyed by id
# (a tensor's == is element-wise); a finalizer drops the entry when the view dies.
_WRITTEN_VIEWS: dict = {}


def storage_base(t):
    """The tensor whose op made ``t``'s storage: ``t`` itself, or the tensor at the
    end of the view ops (their inputs share the storage) that ``t`` came from."""
    base = t
    while True:
        known = _WRITTEN_VIEWS.get(id(base))
        if known is not None and known._storage is t._storage:
            base = known
            continue
        if base._op is None:
            return base
        shared = [a for a in base._op.args if isinstance(a, TensorBase) and a._storage is t._storage]
        if not shared:
            return base
        base = shared[0]


def is_view_of_graph(t) -> bool:
    """True when ``t`` is a view made by ops from another tensor of its graph."""
    return storage_base(t) is not t


def _grid(layout):
    """The storage offset of every element of ``layout``, in row-major order."""
    offsets = np.full(layout.shape, layout.start_offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(layout.shape, layout.stride)):
        shape = [1] * len(layout.shape)
        shape[d] = n
        offsets = offsets + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return offsets


def view_positions(view, base):
    """Row-major positions in ``base`` of ``view``'s elements (same storage), shaped
    as ``view``."""
    base_offsets = _grid(base._layout).reshape(-1)
    to_position = np.full(int(base_offsets.max(initial=0)) + 1, -1, dtype=np.int64)
    to_position[base_offsets] = np.arange(base_offsets.size, dtype=np.int64)
    return to_position[_grid(view._layout)]


def placed(old, positions, value, accumulate):
    """``old`` with ``value`` (broadcast to ``positions``' shape, cast to old's dtype)
    written at the row-major ``positions`` (or added there with ``accumulate``), as
    a differentiable expression."""
    if not isinstance(value, TensorBase):
        value = old._wrap(*storage_of(value, old.dtype, old.device))
    value = value.to_device(old.device).to_dtype(old.dtype)
    if value.shape != positions.shape:
        value = value.broadcast_as(positions.shape)
    flat_value = value.flatten_all() if value.rank else value.reshape((1,))
    flat_positions = positions.reshape(-1)
    n = old.nelement
    if accumulate:
        added = old.zeros((n,), dtype=old.dtype, device=old.device).index_add(
            ids_on(old, flat_positions, old.device), flat_value, 0)
        return old + added.reshape(old.shape)
    source = np.zeros(n, dtype=np.int64)
    source[flat_positions] = np.arange(flat_positions.size, dtype=np.int64)  # last write wins
    written = np.zeros(n, dtype=bool)
    written[flat_positions] = True
    spread = flat_value.index_select(ids_on(old, source, old.device), 0).reshape(old.shape)
    mask = old.new(written.reshape(old.shape), device=old.device)
    return mask.where_cond(spread, old)


def stand_in(t):
    """The current value of ``t`` as a node of its own: a copy-on-write handle of its
    buffer (free until ``t`` is written) with ``t``'s op."""
    old = t._wrap(t._storage.share_buffer(), t._layout, t._op)
    old._track = t._track
    return old


def read_apart(t):
    """``t``'s current value as a node that reads nothing through ``t``'s storage, so a
    write into that storage leaves it (and its graph) as it is: a stand-in of ``t``, or
    for a view, the view's elements gathered from a stand-in of its base."""
    base = storage_base(t)
    if base is t or base._op is None:
        return stand_in(t)
    old_base = stand_in(base)
    positions = view_positions(t, base)
    return old_base.flatten_all().index_select(
        ids_on(old_base, positions.reshape(-1), old_base.device), 0).reshape(t.shape)


def rebind(t, result):
    """``t`` becomes the graph node of ``result`` (same values), with a new id: a clone
    sharing t's id (candle's clone keeps it) stays the old value's node."""
    t._op = result._op
    t._track = result._track
    t._id = new_id()


def write_view_recorded(t, op, compute, cast):
    """``t`` (a view of a tensor of the graph) takes ``cast(compute(old))``; its base
    becomes the write of those values at the view's positions. Returns ``t``."""
    base = storage_base(t)
    if base._op is None:
        raise InplaceOnTrackedError(
            f"{op}: the tensor is a view of a Var (a leaf that requires grad), which cannot "
            "be written in place outside no_grad(): backward needs its value. Write "
            "inside `with tl.no_grad():` or compute a new tensor")
    positions = view_positions(t, base)
    old_base = stand_in(base)
    old_view = old_base.flatten_all().index_select(
        ids_on(old_base, positions.reshape(-1), old_base.device), 0).reshape(t.shape)
    new_view = cast(compute(old_view))
    if new_view.shape != t.shape:
        new_view = new_view.broadcast_as(t.shape)
    new_base = placed(old_base, positions, new_view, accumulate=False)
    s = t._storage
    own = getattr(s, "own_buffer", None)
    if own is not None:
        own()
    values = new_view.contiguous()
    s.copy_into_inplace(t._layout, values._storage, values._layout)
    bump(s)
    rebind(base, new_base)
    rebind(t, new_view)
    if id(t) not in _WRITTEN_VIEWS:
        weakref.finalize(t, _WRITTEN_VIEWS.pop, id(t), None)
    _WRITTEN_VIEWS[id(t)] = base
    return t
