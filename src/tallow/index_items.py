"""An index expression (``t[...]``'s key) read into NumPy's terms, before anything runs.

``read_index(t, index)`` expands ``...`` into full slices and every boolean mask
into the int arrays of its nonzero positions (a mask over k dims is k arrays, as
NumPy defines it), checks the dims consumed against the rank, and turns every
integer array (list, NumPy array, tensor) into i64 ids wrapped from the end and
checked against its dim. What comes back is a list of items, each an int, a
slice, ``None`` or an ``Ids``, one per dim of the indexed tensor plus the
``None``s and a ``GAP`` where the ``...`` stood, so the get and set paths only place things and never validate.

Nothing here writes; every error (a float index, an id out of range, a mask of
the wrong shape, arrays that do not broadcast) is raised before a setitem starts.
"""

from __future__ import annotations

import numpy as np

from .errors import DimOutOfRangeError, IndexOutOfRangeError
from .tensor_base import TensorBase

_MASK_DTYPES = ("u8", "bool")

# The dims that ``...`` stands for (a full slice that needs no view of its own).
FULL = slice(None)


class _Gap:
    """Where a ``...`` stood: it separates array indices even when it stands for no
    dim (NumPy then moves their dims to the front)."""

    __slots__ = ()

    def __repr__(self):
        return "GAP"


GAP = _Gap()


class Ids:
    """An advanced (array) index on one dim: host i64 ids in range, or a tensor of
    ids kept as it is (``device_ids``: on a GPU, reading it back would wait for the
    device, and a lone id tensor needs no reading at all)."""

    __slots__ = ("host", "device_ids")

    def __init__(self, host=None, device_ids=None):
        self.host = host
        self.device_ids = device_ids

    @property
    def shape(self):
        return self.host.shape if self.host is not None else self.device_ids.shape

    def on_host(self, size, dim, pending=None):
        """The host ids, reading a tensor's back (and checking them) if needed
        (``pending`` as for ``checked_ids``)."""
        if self.host is None:
            self.host = checked_ids(np.asarray(self.device_ids.numpy()), size, dim, pending)
        return self.host


def _leaves(items):
    for v in items:
        if isinstance(v, (list, tuple)):
            yield from _leaves(v)
        else:
            yield v


def _is_bool_list(item) -> bool:
    """A (nested) list with at least one value, every one a bool (``[[]]`` holds none:
    NumPy reads it as empty ids)."""
    if not isinstance(item, list):
        return False
    leaves = list(_leaves(item))
    return bool(leaves) and all(isinstance(v, (bool, np.bool_)) for v in leaves)


def _as_host_mask(item):
    """``item`` as a NumPy bool array when it is a boolean mask (rank >= 1), else None."""
    if isinstance(item, TensorBase):
        if item.dtype.name in _MASK_DTYPES and item.rank > 0:
            return np.asarray(item.numpy()) != 0
        return None
    if isinstance(item, np.ndarray):
        return item if item.dtype == np.bool_ and item.ndim > 0 else None
    if _is_bool_list(item):
        return np.asarray(item, dtype=np.bool_)
    return None


def _out_of_range(bad, size, dim):
    return IndexOutOfRangeError(
        f"index {bad} is out of range for dim {dim} of size {size} "
        f"(valid ids are {-size}..{size - 1})")


def checked_ids(arr, size, dim, pending=None):
    """Integer ids as i64, negative ones counted from the end, every one in range.

    With a ``pending`` list, an out-of-range id is noted there (ids of zeros come
    back) instead of raised: NumPy and PyTorch raise only when the arrays broadcast
    to a selection that is not empty."""
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        # A float list is an error to NumPy and PyTorch: rounding it to ids would pick
        # rows the user did not mean.
        raise TypeError(f"index arrays must hold integers (or bools, as a mask), got {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    bad = lo if lo < -size else hi if hi >= size else None
    if bad is not None:
        if pending is None:
            raise _out_of_range(bad, size, dim)
        pending.append(_out_of_range(bad, size, dim))
        return np.zeros(arr.shape, dtype=np.int64)
    ids = arr.astype(np.int64)
    return np.where(ids < 0, ids + size, ids) if lo < 0 else ids


def _raise_pending(shapes, pending):
    """Raise the first noted out-of-range id unless the arrays select nothing."""
    try:
        selected = np.broadcast_shapes(*shapes)
    except ValueError:
        return  # the caller reports the shapes
    if 0 not in selected:
        raise pending[0]


def broadcast_ids(arrays, sizes, dims):
    """The arrays' host ids (tensors read back and checked) broadcast together;
    IndexError when they cannot be, or when an id is out of range."""
    pending = []
    hosts = [a.on_host(n, d, pending) for a, n, d in zip(arrays, sizes, dims)]
    if pending:
        _raise_pending([h.shape for h in hosts], pending)
    try:
        return np.broadcast_arrays(*hosts)
    except ValueError:
        shapes = " ".join(str(h.shape) for h in hosts)
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes}"
        ) from None


def _int_of(item):
    """``item`` as a Python int when it is an integer scalar (0-d ints included), else None."""
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(
            "a bare True/False index is not supported; index with a bool array or list "
            "(a mask) or with ints")
    if isinstance(item, TensorBase):
        if item.rank != 0:
            return None
        if not item.dtype.is_int or item.dtype.name == "bool":
            raise TypeError(f"a 0-d index tensor must have an integer dtype, got {item.dtype}")
        return int(item.item())
    if isinstance(item, np.ndarray):
        if item.ndim != 0:
            return None
        if item.dtype.kind not in "iu":
            raise TypeError(f"a 0-d index array must hold an integer, got {item.dtype}")
        return int(item)
    if isinstance(item, (slice, list, tuple)) or item is None or item is Ellipsis:
        return None
    try:
        return int(item.__index__())
    except (AttributeError, TypeError):
        raise TypeError(
            f"unsupported index type {type(item).__name__}: use ints, slices, None, ..., "
            "integer lists/arrays/tensors or boolean masks") from None


def _is_bare_bool(item) -> bool:
    return isinstance(item, (bool, np.bool_))


def bare_bool_view(t, index):
    """``t[index]`` for an index holding a bare ``True`` / ``False`` (NumPy's and
    PyTorch's 0-d mask), as a view of ``t``; None when the index has none.

    As in NumPy, the bare bools and the ints beside them are advanced indices: together
    they make one new dim, of size 1 (every bool True) or 0, standing where the first of
    them stood when they are adjacent, else in front. Beside an array index (rare) a
    bare bool is refused."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(_is_bare_bool(i) for i in items):
        return None
    if any(_kind(i)[0] in ("mask", "ids") for i in items if not _is_bare_bool(i)):
        raise TypeError(
            "a bare True/False index beside an array index is not supported; index with "
            "a bool array (a mask) or with ints")
    advanced = [k for k, i in enumerate(items)
                if _is_bare_bool(i) or _kind(i)[0] == "int"]
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    consumed = sum(1 for i in items if not _is_bare_bool(i) and _kind(i)[2])
    at = 0
    for item in items[:advanced[0]]:
        if item is Ellipsis:
            at += t.rank - consumed
        elif item is None or isinstance(item, slice):
            at += 1
    view = t[tuple(i for i in items if not _is_bare_bool(i))]
    view = view.unsqueeze(at if adjacent else 0)
    if not all(bool(i) for i in items if _is_bare_bool(i)):
        view = view.narrow(at if adjacent else 0, 0, 0)
    return view


def _kind(item):
    """('none'|'ellipsis'|'slice'|'int'|'mask'|'ids', payload, dims consumed)."""
    if item is None:
        return "none", None, 0
    if item is Ellipsis:
        return "ellipsis", None, 0
    if isinstance(item, slice):
        return "slice", item, 1
    mask = _as_host_mask(item)
    if mask is not None:
        return "mask", mask, mask.ndim
    i = _int_of(item)
    if i is not None:
        return "int", i, 1
    if isinstance(item, TensorBase):
        if not item.dtype.is_int:
            raise TypeError(f"an index tensor must have an integer dtype, got {item.dtype}")
        return "ids", item, 1
    if isinstance(item, (list, tuple, np.ndarray)):
        return "ids", item, 1
    raise TypeError(f"unsupported index type {type(item).__name__}")


def read_index(t, index, keep_tensor_ids=False):
    """``index`` as ``(items, has_arrays)``: items as the module says, ``has_arrays``
    True when an array index (ids or a mask) is present, which makes NumPy's
    advanced indexing apply (and ints count as 0-d arrays there).

    ``keep_tensor_ids`` leaves integer id tensors unread and unchecked
    (``Ids.device_ids``): a lone one is used as it is, by ``index_select`` (which
    checks it), and ``Ids.on_host`` reads and checks it when it meets others."""
    if not isinstance(index, tuple):
        index = (index,)
    kinds = [_kind(item) for item in index]
    if sum(1 for k in kinds if k[0] == "ellipsis") > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    shape = t.shape
    rank = len(shape)
    consumed = sum(k[2] for k in kinds)
    if consumed > rank:
        raise DimOutOfRangeError(
            f"too many indices ({consumed}) for a tensor of rank {rank} (shape {shape})")
    items = []
    pending = []
    has_arrays = False
    dim = 0
    for kind, payload, n in kinds:
        if kind == "none":
            items.append(None)
        elif kind == "ellipsis":
            items.append(GAP)
            items.extend([FULL] * (rank - consumed))
            dim += rank - consumed
        elif kind == "slice":
            items.append(payload)
            dim += 1
        elif kind == "int":
            size = shape[dim]
            if not -size <= payload < size:
                raise IndexOutOfRangeError(
                    f"index {payload} is out of range for dim {dim} of size {size}")
            items.append(payload + size if payload < 0 else payload)
            dim += 1
        elif kind == "mask":
            covered = shape[dim:dim + n]
            if payload.shape != covered:
                raise IndexOutOfRangeError(
                    f"boolean mask of shape {payload.shape} does not match the dims it indexes "
                    f"({covered}, dims {dim}..{dim + n - 1} of shape {shape})")
            # flatnonzero then unravel: several times faster than nonzero on 2-D masks.
            flat = np.flatnonzero(payload)
            per_dim = np.unravel_index(flat, covered) if n > 1 else (flat,)
            items.extend(Ids(host=ids.astype(np.int64, copy=False)) for ids in per_dim)
            has_arrays = True
            dim += n
        else:
            has_arrays = True
            if keep_tensor_ids and isinstance(payload, TensorBase):
                items.append(Ids(device_ids=payload))
            else:
                arr = payload.numpy() if isinstance(payload, TensorBase) else np.asarray(payload)
                items.append(Ids(host=checked_ids(np.asarray(arr), shape[dim], dim, pending)))
            dim += 1
    if pending:
        _raise_pending([item.shape for item in items if isinstance(item, Ids)], pending)
    return items, has_arrays
