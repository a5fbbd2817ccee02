"""Fused row ops of ``GpuStorage``: softmax over the last dim, RMS norm, layer norm
(one kernel each, a workgroup per row)."""

from __future__ import annotations

from ...errors import UnsupportedDTypeError
from .copy import check_window
from .kernel_args import pad_scalars, rows_grid, scalar_words
from .kernels import family
from .launch import compact_via_host
from .reduce import _row_view

SOFTMAX = family("softmax", [("a", "in", 0), ("b", "in", 0), ("c", "in", 0), ("y", "atomic", 0)],
                 math=True)


def _float_only(s, op):
    if not s.dtype.is_float:
        st = s.bdev
        raise UnsupportedDTypeError(
            f"{op}: not supported for dtype {s.dtype} on gpu:{st.ordinal} ({st.adapter_name})")


def _row_op(s, layout, op_code, name, alpha=None, beta=None, eps=0.0):
    _float_only(s, name)
    state = s.bdev
    n = layout.count
    out = state.empty(n, s.dtype)
    if n == 0:
        return out
    view = _row_view(s, layout, (len(layout.shape) - 1,))
    if view is None:
        s, layout = compact_via_host(s, layout)
        view = _row_view(s, layout, (len(layout.shape) - 1,))
    rows, m, rk, rr, tail, _ = view
    a, al = alpha if alpha is not None else (s, layout)
    b, bl = beta if beta is not None else (s, layout)
    for x in (s, out, a, b):
        check_window(state, x, name)
    a_stride = al.stride[-1] if al.shape else 0
    b_stride = bl.stride[-1] if bl.shape else 0
    words = (rows, m, rk, rr, layout.start_offset, al.start_offset, a_stride, bl.start_offset) \
        + pad_scalars(scalar_words(s.dtype, eps, False) + (b_stride, 0)) + tail
    pipe = state.kernels.get(SOFTMAX, (s.dtype.name,), "main", (("OP", op_code),))
    cmd = state.commands
    with cmd.lock:
        cmd.dispatch(pipe, (s.buf, a.buf, b.buf, out.buf), words, *rows_grid(state, rows))
    return out


class GpuFused:
    """Fused ops of ``GpuStorage`` (the others stay NotImplementedError: nn/ops.py composes them)."""

    __slots__ = ()

    def softmax_last_dim(self, layout):
        return _row_op(self, layout, 0, "softmax_last_dim")

    def rms_norm(self, layout, alpha, alpha_layout, eps):
        return _row_op(self, layout, 1, "rms_norm", (alpha, alpha_layout), None, eps)

    def layer_norm(self, layout, alpha, alpha_layout, beta, beta_layout, eps):
        return _row_op(self, layout, 2, "layer_norm", (alpha, alpha_layout), (beta, beta_layout), eps)
