"""Replay kernels for the hot CPU calls of a training step, with planned buffers.

A replay calls the recorded backend functions, which work as eager mode needs them
to: each makes a new array for its result and wraps it in a new storage, and checks
and normalises the layouts it is given. In a replay the layouts, dtypes and shapes
are fixed by the recording, so for the calls a dense-layer training step makes
(``linear`` and its backward, ``matmul``, ``relu`` and its backward, sums over dims, the
optimiser's ``add_scaled_inplace``) the plan builds a kernel that was specialised once:

* the result of a call whose value the caller never sees (every intermediate: the
  recorder checked that none escapes) goes into one buffer planned for the
  recording and rewritten by every replay, passed as ``out=`` to the matrix
  product or ufunc; a returned value gets a new array each call;
* the checks of the eager kernel ran when the recording was made and are not
  repeated; what may change between replays (the argument storages) is read
  through the recorded layouts as before.

Each kernel runs the same functions on the same operands as the eager kernel
(``gemm.matmul`` for the products, ``np.maximum`` against the same zero array for
ReLU, ``np.sum``'s reduction with the same accumulator, the one-pass kernels of
``backends/cpu/onepass.py`` for ReLU's gradient and the update), so results are
bit-identical; only the destination differs. Calls with any other dtype, layout or op keep the recorded
function.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..backends.cpu import gemm, onepass
from ..backends.cpu.elementwise import ZEROS_MAX, cached_zeros_like
from .recorder import Ref

_FLOATS = (dt.f32, dt.f64)
_NATIVE_CLS = "CpuStorage"


def _product(a, b, out, bias):
    """``a @ b (+ bias)`` as the eager kernels compute it: ``gemm.matmul``, into ``out``
    when one is planned, the bias added by ``gemm.matmul`` as eager ``linear`` does."""
    return gemm.matmul(a, b, out=out, bias=bias)


class Lowering:
    """The specialised kernels of one plan; ``kernel(call)`` gives one or None."""

    def __init__(self, slots, returned):
        from ..backends.cpu.storage import CpuStorage

        self._slots = slots
        self._returned = returned
        self._adopt = CpuStorage.adopt
        self._product = _product

    # -- helpers -----------------------------------------------------------------
    def _float_slot(self, ref):
        if not isinstance(ref, Ref):
            return None
        s = self._slots[ref.slot]
        return s if s.cls_name == _NATIVE_CLS and s.dtype in _FLOATS else None

    def _planned(self, call, shape, dtype):
        """A storage to write ``call``'s result into at every replay, or None when the
        caller keeps the result (a returned value needs a new buffer each call)."""
        if not isinstance(call.out, int) or call.out in self._returned:
            return None
        return self._adopt(np.empty(shape, dtype.np), dtype)

    def _planned_slot(self, slot, shape, dtype):
        """``_planned`` for one result of a call that makes several."""
        if slot is None or slot in self._returned:
            return None
        return self._adopt(np.empty(shape, dtype.np), dtype)

    def kernel(self, call):
        if call.owner != "storage" or self._float_slot(call.recv) is None:
            return None
        make = getattr(self, "_k_" + call.name, None)
        return None if make is None else make(call)

    # -- the kernels -----------------------------------------------------------------
    def _k_linear(self, call):
        lay, w, wl, b, bl = call.args
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        ws = self._float_slot(w)
        if ws is None or ws.dtype is not dtype or len(lay.shape) != 2 or len(wl.shape) != 2:
            return None
        if not lay.contiguous:
            return None
        if b is not None:
            bs = self._float_slot(b)
            if bs is None or bs.dtype is not dtype or not bl.contiguous or len(bl.shape) != 1:
                return None
        # w (n, k) read transposed, as the eager kernel reads it; a layout BLAS cannot
        # take directly is left to the recorded function (it copies).
        wst = wl.stride
        if wst[1] != 1 and wst[0] != 1:
            return None
        shape = (lay.shape[0], wl.shape[0])
        planned = self._planned(call, shape, dtype)
        product, wrap = self._product, self._adopt
        out_arr = None if planned is None else planned.arr

        def linear(s, lay, w, wl, b, bl):
            y = product(s.view(lay), w.view(wl).T, out_arr, None if b is None else b.view(bl))
            if planned is None:
                return wrap(y, dtype)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        return linear

    def _k_linear_backward(self, call):
        lay, w, wl, g, gl, wanted = call.args
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        ws, gs = self._float_slot(w), self._float_slot(g)
        if ws is None or gs is None or ws.dtype is not dtype or gs.dtype is not dtype:
            return None
        for l in (lay, wl, gl):  # operands BLAS takes as they are (see _k_matmul)
            st = l.stride
            if len(st) != 2 or (st[-1] != 1 and st[-2] != 1):
                return None
        if gl.stride[0] == 0 and gl.shape[0] > 1:
            return None  # a broadcast gradient: the eager sum's copies path
        (m, k), n = lay.shape, wl.shape[0]
        slots = call.out
        want_x, want_w, want_b = wanted
        out_x = self._planned_slot(slots[0], (m, k), dtype) if want_x else None
        out_w = self._planned_slot(slots[1], (n, k), dtype) if want_w else None
        out_b = self._planned_slot(slots[2], (1, n), dtype) if want_b else None
        product, wrap, npd = self._product, self._adopt, dtype.np

        def result(arr, planned):
            if planned is None:
                return wrap(arr, dtype)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        def linear_backward(s, lay, w, wl, g, gl, wanted):
            G = g.view(gl)
            gx = gw = gb = None
            if want_x:
                gx = result(product(G, w.view(wl), None if out_x is None else out_x.arr, None), out_x)
            if want_w:
                gw = result(product(G.T, s.view(lay), None if out_w is None else out_w.arr, None), out_w)
            if want_b:
                gb = result(np.add.reduce(G, axis=(0,), dtype=npd, keepdims=True,
                                          out=None if out_b is None else out_b.arr), out_b)
            return gx, gw, gb

        return linear_backward

    def _k_matmul(self, call):
        lay, rhs, rl = call.args
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        rs = self._float_slot(rhs)
        if rs is None or rs.dtype is not dtype or len(lay.shape) != 2 or len(rl.shape) != 2:
            return None
        # Operands BLAS takes as they are (one unit inner stride); others keep the
        # recorded function, which copies them first.
        for l in (lay, rl):
            st = l.stride
            if st[-1] != 1 and st[-2] != 1:
                return None
        shape = (lay.shape[0], rl.shape[1])
        if shape[0] == 1:
            # One lhs row: a matrix-vector product, whose sums BLAS orders differently
            # for a transposed rhs than for the row-major copy eager mode may use.
            return None
        planned = self._planned(call, shape, dtype)
        product, wrap = self._product, self._adopt
        out_arr = None if planned is None else planned.arr

        def matmul(s, lay, rhs, rl):
            # A transposed rhs is read in place (eager mode may multiply a row-major
            # copy: the same matrix-matrix product, BLAS told the operand is transposed).
            y = product(s.view(lay), rhs.view(rl), out_arr, None)
            if planned is None:
                return wrap(y, dtype)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        return matmul

    def _k_unary(self, call):
        op, lay = call.args
        if op != "relu" or not lay.contiguous:
            return None
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        if lay.count > ZEROS_MAX or lay.count == 0:
            return None  # the eager kernel's large-input path (split over threads)
        planned = self._planned(call, lay.shape, dtype)
        if planned is None:
            return None
        out_arr = planned.arr
        zeros = cached_zeros_like(out_arr)  # the eager kernel's cached zero array

        def relu(s, op, lay):
            np.maximum(s.view(lay), zeros, out=out_arr)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        return relu

    def _k_relu_backward(self, call):
        lay, grad, gl = call.args
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        gs = self._float_slot(grad)
        if gs is None or gs.dtype is not dtype:
            return None
        planned = self._planned(call, lay.shape, dtype)
        if planned is None:
            return None
        out_arr = planned.arr
        kernels = onepass.module()
        if kernels is not None and lay.contiguous and gl.contiguous:
            relu_grad = kernels.relu_grad  # the eager kernel's one pass

            def relu_backward(s, lay, grad, gl):
                relu_grad(s.view(lay), grad.view(gl), out_arr)
                if getattr(planned, "_ws", None) is not None:
                    planned.mark_written()
                return planned

            return relu_backward
        mask = np.empty(lay.shape, bool)

        def relu_backward(s, lay, grad, gl):
            np.greater(s.view(lay), 0, out=mask)
            np.multiply(grad.view(gl), mask, out=out_arr)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        return relu_backward

    def _k_reduce(self, call):
        op, lay, dims = call.args
        if op != "sum":
            return None
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        if any(lay.stride[d] == 0 and lay.shape[d] > 1 for d in dims):
            return None  # a broadcast dim: the eager kernel's collapse path
        shape = tuple(1 if d in dims else n for d, n in enumerate(lay.shape))
        planned = self._planned(call, shape, dtype)
        if planned is None:
            return None
        out_arr = planned.arr
        npd = dtype.np
        dims = tuple(dims)

        def reduce_sum(s, op, lay, _dims):
            np.sum(s.view(lay), axis=dims, dtype=npd, keepdims=True, out=out_arr)
            if getattr(planned, "_ws", None) is not None:
                planned.mark_written()
            return planned

        return reduce_sum

    def _k_add_scaled_inplace(self, call):
        lay, src, sl, alpha = call.args
        recv = self._slots[call.recv.slot]
        dtype = recv.dtype
        ss = self._float_slot(src)
        if ss is None or ss.dtype is not dtype or tuple(sl.shape) != tuple(lay.shape):
            return None
        kernels = onepass.module()
        if kernels is not None and lay.contiguous and sl.contiguous:
            add = kernels.add_scaled  # the eager kernel's one pass

            def add_scaled(s, lay, src, sl, _alpha):
                add(s.view(lay), src.view(sl), alpha)
                s.mark_written()

            return add_scaled
        tmp = np.empty(lay.shape, dtype.np)
        a = dtype.np.type(alpha)

        def add_scaled(s, lay, src, sl, _alpha):
            dst = s.view(lay)
            # dst + src * alpha: the eager kernel's two roundings, the product in a
            # planned buffer instead of a new one.
            np.multiply(src.view(sl), a, out=tmp)
            np.add(dst, tmp, out=dst)
            s.mark_written()

        return add_scaled

