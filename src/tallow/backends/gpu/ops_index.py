"""Index ops: index_select, gather (one gather kernel), scatter / scatter_add /
index_add (one scatter kernel).

Both kernels see *virtual layouts*: the source (or destination) viewed over the
output (or column) shape with the indexed dim's stride moved out, so the kernel
adds ``id * stride`` to a strided index. The scatter kernel walks the indexed dim
in order within one invocation per column, so duplicate ids accumulate in the
same order as on the CPU (NumPy's ``add.at``), with no float atomics, and every
column writes distinct elements.
"""

from __future__ import annotations

from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .launch import map_inplace, map_new
from .layouts import MAX_RANK, merge_dims, pad_scalars
from .ops_check import check_ids
from .storage import wrap

METHODS = ("index_select", "gather", "scatter_inplace", "index_add_inplace")

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
    return wrap(state, buf, s.dtype, n)


def index_select(s, layout, ids, ids_layout, dim):
    check_ids(ids, ids_layout, layout.shape[dim], "index_select", dim)
    if len(layout.shape) > MAX_RANK and _too_many_dims(layout.shape, layout):
        # The kernel reads a virtual layout, which map_new must never compact:
        # compact the real source instead (its virtual layout then merges).
        s, layout = _compact(s, layout)
    shape = layout.shape
    out_shape = shape[:dim] + (ids_layout.shape[0],) + shape[dim + 1:]
    istride = [0] * len(shape)
    istride[dim] = ids_layout.stride[0]
    ids_view = Layout(out_shape, tuple(istride), ids_layout.start_offset)
    return _gather(s, layout, ids, ids_view, dim, out_shape)


def gather(s, layout, ids, ids_layout, dim):
    check_ids(ids, ids_layout, layout.shape[dim], "gather", dim)
    if len(layout.shape) > MAX_RANK and _too_many_dims(ids_layout.shape, layout, ids_layout):
        s, layout = _compact(s, layout)
        ids, ids_layout = _compact(ids, ids_layout)
    return _gather(s, layout, ids, ids_layout, dim, ids_layout.shape)


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


def scatter_inplace(s, layout, ids, ids_layout, src, src_layout, dim, accumulate):
    check_ids(ids, ids_layout, layout.shape[dim], "scatter_add" if accumulate else "scatter", dim)
    _scatter(s, layout, ids, ids_layout, src, src_layout, dim, ids_layout.shape[dim], accumulate)


def index_add_inplace(s, layout, ids, ids_layout, src, src_layout, dim):
    check_ids(ids, ids_layout, layout.shape[dim], "index_add", dim)
    shape = src_layout.shape
    istride = [0] * len(shape)
    istride[dim] = ids_layout.stride[0]
    ids_view = Layout(shape, tuple(istride), ids_layout.start_offset)
    _scatter(s, layout, ids, ids_view, src, src_layout, dim, shape[dim], True)
