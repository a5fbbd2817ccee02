"""Reductions, cumulative sums, sorting and the fused row kernels (softmax,
rms_norm, layer_norm)."""

from __future__ import annotations

from ... import dtype as dt
from ...errors import TallowError
from ...layout import Layout
from .kernels import family
from .kernel_args import MAX_RANK, grid, merge_dims, rows_grid
from .launch import compact_via_host
from .copy import check_window


REDUCE = family("reduce", [("a", "in", 0), ("y", "atomic", 1)], math=True)  # dtypes (in, out)
REDUCE_ARG = family("reduce_arg", [("a", "in", 0), ("y", "atomic", "u32")], math=True,
                    file="reduce.wgsl", flags=("ARG",))
SCAN = family("scan", [("a", "in", 0), ("y", "atomic", 0)])
SORT = family("sort", [("a", "in", 0), ("y", "rw", "u32")])

_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}
_SMALL_ROW = 64
_FEW_ROWS = 256  # fewer rows than this, each longer than _LONG_ROW: two passes
_LONG_ROW = 32768
_CHUNK = 8192
_MAX_PARTS = 1024
_ACC = {dt.f16: dt.f32, dt.bf16: dt.f32}
LOCAL_SORT_MAX = 1024


def _pad(t):
    return t + (0,) * (MAX_RANK - len(t))


def _row_view(s, layout, dims):
    """(rows, m, kept rank, reduced rank, words 16..47) of layout split into kept and
    reduced dims, or None when a half has more than MAX_RANK dims after merging."""
    shape, stride = layout.shape, layout.stride
    kept = [i for i in range(len(shape)) if i not in dims]
    kshape, (kstride,) = merge_dims(tuple(shape[i] for i in kept), (tuple(stride[i] for i in kept),))
    rshape, (rstride,) = merge_dims(tuple(shape[i] for i in dims), (tuple(stride[i] for i in dims),))
    if len(kshape) > MAX_RANK or len(rshape) > MAX_RANK:
        return None
    rows = 1
    for n in kshape:
        rows *= n
    m = 1
    for n in rshape:
        m *= n
    tail = _pad(kshape) + _pad(kstride) + _pad(rshape) + _pad(rstride)
    return rows, m, len(kshape), len(rshape), tail, rstride


class GpuReduce:
    """Reductions of ``GpuStorage``: sums/extremes over dims, cumsum, argsort."""

    __slots__ = ()

    def reduce(self, op, layout, dims):
        code = _OPS.get(op)
        if code is None:
            raise ValueError(f"unknown reduce op {op!r}")
        state = self.bdev
        dims = tuple(dims)
        for d in dims:
            if layout.shape[d] == 0 and op != "sum":
                raise TallowError(f"{op}: cannot reduce over dim {d} of size 0 (shape {layout.shape})")
        # src: the storage the kernel reads; a compact copy where no kernel reads layout.
        src = self
        view = _row_view(src, layout, dims)
        if view is None:
            src, layout = compact_via_host(self, layout)
            view = _row_view(src, layout, dims)
        rows, m, rk, rr, tail, rstride = view
        arg = code >= 3
        out_dtype = dt.u32 if arg else src.dtype
        out = state.empty(rows, out_dtype)
        if rows == 0:
            return out
        check_window(state, src, op)
        check_window(state, out, op)
        inner_contig = rr == 0 or rstride[-1] == 1
        per_thread = m <= _SMALL_ROW or (not inner_contig and rows >= 1024)
        consts = (("OP", code),)
        cmd = state.commands
        if not arg and not per_thread and rows < _FEW_ROWS and m > _LONG_ROW:
            # Two passes: chunks of every row into partials (in the accumulation type),
            # then the partials, so a long row is spread over many workgroups.
            parts = min(_MAX_PARTS, -(-m // _CHUNK))
            length = -(-m // parts)
            acc = _ACC.get(src.dtype, src.dtype)
            partial = state.empty(rows * parts, acc)
            check_window(state, partial, op)
            p1 = state.kernels.get(REDUCE, (src.dtype.name, acc.name), "reduce_wg", consts)
            p2 = state.kernels.get(REDUCE, (acc.name, src.dtype.name), "reduce_wg", consts)
            w1 = (rows, m, rk, rr, layout.start_offset, parts, length, 0) + (0,) * 8 + tail
            w2 = (rows, parts, 1, 1, 0, 1, parts, 0) + (0,) * 8 + _pad((rows,)) + _pad((parts,)) \
                + _pad((parts,)) + _pad((1,))
            with cmd.lock:
                cmd.dispatch(p1, (src.buf, partial.buf), w1, *rows_grid(state, rows * parts))
                cmd.dispatch(p2, (partial.buf, out.buf), w2, *rows_grid(state, rows))
            return out
        fam = REDUCE_ARG if arg else REDUCE
        key = (src.dtype.name,) if arg else (src.dtype.name, src.dtype.name)
        entry = "reduce_thread" if per_thread else "reduce_wg"
        pipe = state.kernels.get(fam, key, entry, consts)
        words = (rows, m, rk, rr, layout.start_offset, 1, m, 0) + (0,) * 8 + tail
        with cmd.lock:
            groups = grid(state, rows) if per_thread else rows_grid(state, rows)
            cmd.dispatch(pipe, (src.buf, out.buf), words, *groups)
        return out

    def cumsum(self, layout, dim):
        state = self.bdev
        shape = layout.shape
        n = layout.count
        out = state.empty(n, self.dtype)
        if n == 0:
            return out
        check_window(state, self, "cumsum")
        check_window(state, out, "cumsum")
        ostride = Layout.contiguous_of(shape).stride
        kept = [i for i in range(len(shape)) if i != dim]
        kshape, (kin, kout) = merge_dims(tuple(shape[i] for i in kept),
                                         (tuple(layout.stride[i] for i in kept), tuple(ostride[i] for i in kept)))
        if len(kshape) > MAX_RANK:  # no kernel reads this layout: scan a compact copy
            compact, compact_layout = compact_via_host(self, layout)
            return compact.cumsum(compact_layout, dim)
        rows = n // shape[dim]
        words = (rows, shape[dim], len(kshape), 0, layout.start_offset, layout.stride[dim],
                 ostride[dim], 0) + (0,) * 8 + _pad(kshape) + _pad(kin) + _pad(kout)
        pipe = state.kernels.get(SCAN, (self.dtype.name,))
        cmd = state.commands
        with cmd.lock:
            cmd.dispatch(pipe, (self.buf, out.buf), words, *rows_grid(state, rows))
        return out

    def arg_sort_last_dim(self, layout, ascending):
        state = self.bdev
        shape = layout.shape
        count = layout.count
        n = shape[-1]
        out = state.empty(count, dt.u32)
        if count == 0:
            return out
        check_window(state, self, "arg_sort_last_dim")
        rows = count // n
        rshape, (rstride,) = merge_dims(shape[:-1], (layout.stride[:-1],))
        if len(rshape) > MAX_RANK:  # no kernel reads this layout: sort a compact copy
            compact, compact_layout = compact_via_host(self, layout)
            return compact.arg_sort_last_dim(compact_layout, ascending)
        N = 1 << max(0, (n - 1).bit_length())
        consts = (("DESCENDING", not ascending),)
        head = (rows, n, len(rshape), N, layout.start_offset, layout.stride[-1], 0, 0) + (0,) * 8
        tail = _pad(rshape) + _pad(rstride)
        cmd = state.commands
        if N <= LOCAL_SORT_MAX:
            pipe = state.kernels.get(SORT, (self.dtype.name,), "sort_local", consts)
            check_window(state, out, "arg_sort_last_dim")
            with cmd.lock:
                cmd.dispatch(pipe, (self.buf, out.buf), head + tail, *rows_grid(state, rows))
            return out
        tmp = state.empty(rows * N, dt.u32)
        check_window(state, tmp, "arg_sort_last_dim")
        init = state.kernels.get(SORT, (self.dtype.name,), "sort_init", consts)
        step = state.kernels.get(SORT, (self.dtype.name,), "sort_step", consts)
        with cmd.lock:
            cmd.dispatch(init, (self.buf, tmp.buf), head + tail, *grid(state, rows * N))
            k = 2
            while k <= N:
                j = k // 2
                while j >= 1:
                    words = head[:6] + (k, j) + head[8:] + tail
                    cmd.dispatch(step, (self.buf, tmp.buf), words, *grid(state, rows * N // 2))
                    j //= 2
                k *= 2
        if N == n:
            return tmp
        return tmp.copy_strided(Layout((rows, n), (N, 1), 0))
