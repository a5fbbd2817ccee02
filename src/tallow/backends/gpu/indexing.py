"""Index ops: index_select, gather (one gather kernel), scatter / scatter_add /
index_add (one scatter kernel).

Both kernels see *virtual layouts*: the source (or destination) viewed over the
output (or column) shape with the indexed dim's stride moved out, so the kernel
adds ``id * stride`` to a strided index. The scatter kernel walks the indexed dim
in order within one invocation per column, so duplicate ids accumulate in the
same order as on the CPU (NumPy's ``add.at``), with no float atomics, and every
column writes distinct elements.

A source (or destination) too large for one binding, which the kernels would have
to bind whole along the indexed dim, is taken in slabs along that dim that fit:
each slab runs with the ids shifted to it, so ids outside it read zeros (gathers,
merged slab by slab with a mask) or are skipped (scatters). An embedding table
beyond the binding limit thus still works, at one pass per slab.
"""

from __future__ import annotations

from ... import dtype as dt
from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .launch import map_inplace, map_new
from .kernel_args import MAX_RANK, merge_dims, pad_scalars
from .checks import check_ids


_MAP = ("map.wgsl",)
GATHER = family("gather", [("a", "in", 1), ("i", "in", 0), ("y", "out", 1)], main=1,
                file="index.wgsl", flags=("GATHER",), includes=_MAP)
SCATTER = family("scatter", [("i", "in", 0), ("a", "in", 1), ("y", "atomic", 1)], main=1,
                 file="index.wgsl")


def _words(size, stride, walk=0, ids_stride=0, src_stride=0):
    return pad_scalars((size, 0, stride, 0, walk, ids_stride, src_stride, 0))


def _too_many_dims(shape, *layouts) -> bool:
    return len(merge_dims(shape, tuple(l.stride for l in layouts))[0]) > MAX_RANK


def _compact(s, layout):
    return s.copy_strided(layout), Layout.contiguous_of(layout.shape)


def _may_need_slabs(s, layout, dim) -> bool:
    """True when the kernel may fail to bind its window (the whole indexed dim)."""
    return s.buf.size > s.bdev.max_binding and layout.shape[dim] > 1


def _direct_or_slabs(s, layout, dim, direct, by_slabs):
    """``direct()``, or ``by_slabs()`` when the direct launch cannot bind its window
    (a split launch raises before its first dispatch, so nothing is written twice)."""
    try:
        return direct()
    except TallowError as e:
        if not (_may_need_slabs(s, layout, dim) and "max storage binding size" in str(e)):
            raise
    return by_slabs()


def _slabs(s, layout, dim):
    """``(start, length)`` ranges along ``dim`` whose narrowed layouts fit a binding."""
    mb = s.bdev.max_binding
    isz = s.dtype.size_in_bytes
    size = layout.shape[dim]
    one = layout.narrow(dim, 0, 1)
    lo, hi = one.extent()
    per_step = abs(layout.stride[dim]) * isz
    room = mb - 256 - (hi - lo) * isz  # what one slice takes, and the offset alignment
    if room < 0:
        raise TallowError(
            f"one slice of this op's {s.buf.size}-byte operand along dim {dim} exceeds the "
            f"adapter's max storage binding size ({mb} bytes)")
    step = size if per_step == 0 else max(1, 1 + room // per_step)
    return [(r0, min(step, size - r0)) for r0 in range(0, size, step)]


def _shifted_ids(ids, ids_layout, r0):
    """Contiguous ids minus ``r0`` (u8 widened first): ids below the slab wrap to huge
    u32 values or go negative, so the kernels treat them as out of range."""
    if ids.dtype is dt.u8:
        ids = ids.to_dtype(ids_layout, dt.u32)
        ids_layout = Layout.contiguous_of(ids_layout.shape)
    if r0 == 0:
        return ids, ids_layout
    return ids.binary_scalar("sub", ids_layout, r0, False), Layout.contiguous_of(ids_layout.shape)


def _in_slab(ids_c, layout, length):
    """bool mask of the shifted ids that fall in a slab of ``length``."""
    mask = ids_c.cmp_scalar("lt", layout, length)
    if ids_c.dtype is dt.i64:
        mask = mask.binary("mul", layout, ids_c.cmp_scalar("ge", layout, 0), layout)
    return mask


def _gather_slabs(s, layout, ids, ids_layout, dim, view_of):
    """The gather over slabs of the source along ``dim``; ``view_of(layout)`` turns a
    contiguous ids layout into the view the kernel reads (index_select broadcasts)."""
    acc = None
    for r0, length in _slabs(s, layout, dim):
        ids_c, ids_c_layout = _shifted_ids(ids, ids_layout, r0)
        view = view_of(ids_c_layout)
        part = _gather(s, layout.narrow(dim, r0, length), ids_c, view, dim, view.shape)
        if acc is None:
            acc = part
            continue
        out = Layout.contiguous_of(view.shape)
        mask = _in_slab(ids_c, ids_c_layout, length)
        mask_view = view_of(Layout.contiguous_of(ids_c_layout.shape))
        acc = mask.where_cond(mask_view, part, out, acc, out)
    return acc


def _gather(s, layout, ids, ids_view, dim, out_shape):
    state = s.bdev
    stride = list(layout.stride)
    stride[dim] = 0
    src_view = Layout(out_shape, tuple(stride), layout.start_offset)
    if len(out_shape) > MAX_RANK and _too_many_dims(out_shape, src_view, ids_view):
        raise TallowError(
            f"gather over {len(out_shape)} dims whose layouts do not merge to {MAX_RANK} or "
            "fewer even when compact: reshape the operands first")
    n = src_view.count
    pipe = state.kernels.ref(GATHER, (ids.dtype.name, s.dtype.name))
    words = _words(layout.shape[dim], layout.stride[dim])
    reach = ((layout.shape[dim] - 1) * layout.stride[dim], 0)
    buf = map_new(state, pipe, ((s, src_view), (ids, ids_view)), s.dtype, n, words, reach=reach)
    return s._wrap(buf, s.dtype, n)


def _scatter(s, layout, ids, ids_view, src, src_layout, dim, walk, accumulate):
    """Columns = ``ids_view.shape`` with ``dim`` set to 1; each walks ``walk`` steps."""
    state = s.bdev
    if src.buf is s.buf:
        src = src.copy_strided(src_layout)
        src_layout = Layout.contiguous_of(src_layout.shape)
    if ids.buf is s.buf:
        ids = ids.copy_strided(ids_view)
        ids_view = Layout.contiguous_of(ids_view.shape)
    cols = list(ids_view.shape)
    cols[dim] = 1
    cols = tuple(cols)
    if walk == 0 or Layout.contiguous_of(cols).count == 0:
        return
    if len(cols) > MAX_RANK and _too_many_dims(cols, layout, ids_view, src_layout):
        # Compact what is read (src only where the ids reach); a virtual ids view
        # (index_add: stride 0 off dim) merges whatever the other layouts do.
        src, src_layout = _compact(src, Layout(ids_view.shape, src_layout.stride,
                                               src_layout.start_offset))
        if any(ids_view.stride[i] for i in range(len(cols)) if i != dim):
            ids, ids_view = _compact(ids, ids_view)
    dst_col = Layout(cols, layout.stride, layout.start_offset)
    ids_col = Layout(cols, ids_view.stride, ids_view.start_offset)
    src_col = Layout(cols, src_layout.stride, src_layout.start_offset)
    words = _words(layout.shape[dim], layout.stride[dim], walk, ids_view.stride[dim],
                   src_layout.stride[dim])
    pipe = state.kernels.ref(SCATTER, (ids.dtype.name, s.dtype.name), "main",
                             (("ACCUMULATE", bool(accumulate)),))
    reach = ((walk - 1) * ids_view.stride[dim], (walk - 1) * src_layout.stride[dim],
             (layout.shape[dim] - 1) * layout.stride[dim])
    map_inplace(state, pipe, ((ids, ids_col), (src, src_col)), s, dst_col, words, reach)


def _scatter_any(s, layout, ids, ids_layout, view_of, src, src_layout, dim, walk, accumulate):
    """The scatter, slab by slab along ``dim`` when the destination is beyond one
    binding: the kernel skips the shifted ids that miss the slab, so each id writes
    once. ``view_of(layout)`` turns an ids layout into the view the kernel reads."""
    def by_slabs():
        for r0, length in _slabs(s, layout, dim):
            ids_c, ids_c_layout = _shifted_ids(ids, ids_layout, r0)
            _scatter(s, layout.narrow(dim, r0, length), ids_c, view_of(ids_c_layout), src,
                     src_layout, dim, walk, accumulate)

    _direct_or_slabs(
        s, layout, dim, lambda: _scatter(s, layout, ids, view_of(ids_layout), src, src_layout,
                                         dim, walk, accumulate), by_slabs)


# lavapipe ends a shader loop after about 65,535 turns without a word (a walk of
# exactly 65,535 ids already lost its last one), and the scatter kernel walks the
# ids along ``dim`` in one loop: longer walks run as several dispatches of at most
# ``WALK_LIMIT`` ids, in order, so later ids still write (or add) after earlier ones.
WALK_LIMIT = 32768


def _walks(length):
    """``(start, n)`` pieces of a walk of ``length`` ids, none over ``WALK_LIMIT``."""
    return [(start, min(WALK_LIMIT, length - start)) for start in range(0, length, WALK_LIMIT)]


class GpuIndexing:
    """Indexing methods of ``GpuStorage``: index_select, gather, scatter, index_add."""

    __slots__ = ()

    def index_select(self, layout, ids, ids_layout, dim):
        check_ids(ids, ids_layout, layout.shape[dim], "index_select", dim)
        src = self  # the storage the kernel reads
        if len(layout.shape) > MAX_RANK and _too_many_dims(layout.shape, layout):
            # The kernel reads a virtual layout, which map_new must never compact:
            # compact the real source instead (its virtual layout then merges).
            src, layout = _compact(self, layout)
        shape = layout.shape

        def view_of(lay):
            out_shape = shape[:dim] + (lay.shape[0],) + shape[dim + 1:]
            istride = [0] * len(shape)
            istride[dim] = lay.stride[0]
            return Layout(out_shape, tuple(istride), lay.start_offset)

        ids_view = view_of(ids_layout)
        return _direct_or_slabs(
            src, layout, dim, lambda: _gather(src, layout, ids, ids_view, dim, ids_view.shape),
            lambda: _gather_slabs(src, layout, ids, ids_layout, dim, view_of))

    def gather(self, layout, ids, ids_layout, dim):
        check_ids(ids, ids_layout, layout.shape[dim], "gather", dim)
        src = self  # the storage the kernel reads
        if len(layout.shape) > MAX_RANK and _too_many_dims(ids_layout.shape, layout, ids_layout):
            # No kernel reads these layouts: gather from compact copies of both.
            src, layout = _compact(self, layout)
            ids, ids_layout = _compact(ids, ids_layout)
        return _direct_or_slabs(
            src, layout, dim, lambda: _gather(src, layout, ids, ids_layout, dim, ids_layout.shape),
            lambda: _gather_slabs(src, layout, ids, ids_layout, dim, lambda lay: lay))

    def scatter_inplace(self, layout, ids, ids_layout, src, src_layout, dim, accumulate):
        check_ids(ids, ids_layout, layout.shape[dim], "scatter_add" if accumulate else "scatter", dim)
        for start, n in _walks(ids_layout.shape[dim]):
            _scatter_any(self, layout, ids, ids_layout.narrow(dim, start, n), lambda lay: lay,
                         src, src_layout.narrow(dim, start, n), dim, n, accumulate)

    def index_add_inplace(self, layout, ids, ids_layout, src, src_layout, dim):
        check_ids(ids, ids_layout, layout.shape[dim], "index_add", dim)
        shape = src_layout.shape

        def view_of(lay):  # the 1-D ids over src's shape (along dim: as many as the ids)
            over = shape[:dim] + (lay.shape[0],) + shape[dim + 1:]
            return Layout(over, tuple(lay.stride[0] if i == dim else 0 for i in range(len(shape))),
                          lay.start_offset)

        for start, n in _walks(shape[dim]):
            _scatter_any(self, layout, ids, ids_layout.narrow(0, start, n), view_of,
                         src, src_layout.narrow(dim, start, n), dim, n, True)
