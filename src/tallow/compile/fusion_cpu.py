"""Fusing runs of element-wise calls of a trace into one kernel call on the CPU.

A *group* is a run of consecutive recorded calls that are element-wise ops of one
float dtype (f32 or f64) over one shape: the unary ops, binary ops and scalar ops
whose fused form is bit-identical to NumPy's (add, sub, mul, div, maximum, minimum,
neg, abs, sqr, sqrt, recip, relu, affine, clamp). Values made and used inside the
group live in registers only; a value also used after the group (or returned) is
stored to a buffer. The group becomes one call of ``cpu_kernel.run_program``.

Buffers: a stored value that the compiled function returns gets a new array each
call (the caller keeps it); any other stored value gets one buffer planned when the
trace is compiled and rewritten on every replay (nothing outside the call can hold
it: the recorder checked that no intermediate escapes).
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from . import elementwise

_LOAD, _ROWS, _CONST, _STORE, _REPEAT = 0, 1, 2, 3, 4
_READS = (_LOAD, _ROWS, _CONST, _REPEAT)
BLOCK = 512  # elements per register: a few registers of 2-4 KiB stay in L1
BACKEND, DTYPES = "CpuStorage", (dt.f32, dt.f64)


def find_groups(calls, slots, live):
    """The CPU's fusable runs, comparisons included (see ``elementwise.find_groups``)."""
    return elementwise.find_groups(calls, slots, live, BACKEND, DTYPES, masks=True)


def element_op(call, slots):
    return elementwise.element_op(call, slots, BACKEND, DTYPES, masks=True)


def stores_a_mask(slots, live_after) -> bool:
    """True when a comparison's mask is needed after the group (the kernel's
    buffers are all of the group's float dtype, so such a group is not fused)."""
    return any(slots[s].dtype.name in elementwise.MASK_DTYPES for s in live_after)


def _offsets(start, shape, stride):
    """The storage offset of each element of a layout, in row-major order (int64)."""
    off = np.full((), start, np.int64)
    for n, s in zip(shape, stride):
        off = off[..., None] + np.arange(n, dtype=np.int64) * s
    return np.ascontiguousarray(off.reshape(-1))


def row_reader(layout):
    """``(code, width, row offsets)`` to read a non-contiguous layout row by row, or None
    when its last dim is neither contiguous nor broadcast (then the group reads a
    contiguous copy). Trailing dims that continue the run are merged into the row."""
    shape, stride = layout.shape, layout.stride
    if not shape:
        return None
    k = len(shape) - 1
    if stride[k] == 1:
        code, width = _ROWS, shape[k]
        while k > 0 and stride[k - 1] == width:
            k -= 1
            width *= shape[k]
    elif stride[k] == 0:
        code, width = _REPEAT, shape[k]
        while k > 0 and stride[k - 1] == 0:
            k -= 1
            width *= shape[k]
    else:
        return None
    return code, width, _offsets(layout.start_offset, shape[:k], stride[:k])


class FusedGroup:
    """One fused run of calls, ready to run: ``group(*input_storages)`` returns the
    storages of the values used after it, in ``self.outputs`` order."""

    def __init__(self, calls, slots, members, shape, dtype, live_after, returned, store_into=None):
        """``store_into``: {slot: (target slot, layout)} for values whose only later use
        is ``target.copy_into_inplace(layout, value)`` right after the group (an
        optimiser's ``Var.set``): they are stored into the target directly, when the
        group reads the target only through that same layout (a block is read before
        it is written). ``self.stored_into`` lists the target slots so written."""
        from ..backends.cpu.storage import CpuStorage

        self.shape = shape
        self.dtype = dtype
        self.count = int(np.prod(shape, dtype=np.int64))
        self.n_ops = 0
        self._adopt = CpuStorage.adopt
        npd = dtype.np
        value = {}  # slot made inside -> value number
        loads = {}  # (slot, layout) -> value number
        consts = {}  # constant -> value number
        self.inputs = []  # slots read from outside, in argument order
        self.copied = {}  # argument number -> layout read through a contiguous copy
        direct = {}  # slot -> argument number, for slots read in place
        prog = []  # abstract: (code, dst value, a, b)
        idx_parts, idx_len = [], 0
        const_values = []
        nvals = 0

        def operand(o, prev):
            nonlocal nvals, idx_len
            if o == "prev":
                return prev
            if o[0] == "const":
                key = (o[1].item(), np.signbit(o[1]).item())
                v = consts.get(key)
                if v is None:
                    v = consts[key] = nvals
                    nvals += 1
                    prog.append((_CONST, v, len(const_values), 0, 0))
                    const_values.append(o[1])
                return v
            slot, lay = o
            if slot in value:
                return value[slot]
            v = loads.get((slot, lay))
            if v is not None:
                return v
            v = loads[(slot, lay)] = nvals
            nvals += 1
            reader = None if lay.contiguous else row_reader(lay)
            if reader is None and not lay.contiguous:
                # Read through a contiguous copy made per call (its own argument).
                self.inputs.append(slot)
                self.copied[len(self.inputs) - 1] = lay
                prog.append((_LOAD, v, len(self.inputs) - 1, 0, 0))
                return v
            arg = direct.get(slot)
            if arg is None:
                arg = direct[slot] = len(self.inputs)
                self.inputs.append(slot)
            if lay.contiguous:
                prog.append((_LOAD, v, arg, lay.start_offset, 0))
            else:
                code, width, rows = reader
                prog.append((code, v, arg, idx_len, width))
                idx_parts.append(rows)
                idx_len += rows.size
            return v

        store_into = dict(store_into or {})
        for i in members:
            for _code, operands in element_op(calls[i], slots)[2]:
                for o in operands:
                    if isinstance(o, tuple) and o[0] != "const":
                        for v, (target, lay) in list(store_into.items()):
                            if o[0] == target and o[1] != lay:
                                del store_into[v]
        stores = []  # (value, slot)
        into = []  # (target argument, layout) of values stored into a target
        for i in members:
            call = calls[i]
            _shape, _dtype, ops = element_op(call, slots)
            prev = None
            for code, operands in ops:
                args = [operand(o, prev) for o in operands]
                prev = nvals
                nvals += 1
                prog.append((code, prev, args[0], args[1] if len(args) > 1 else 0, 0))
                self.n_ops += 1
            value[call.out] = prev
            if call.out in store_into:
                target, lay = store_into[call.out]
                arg = direct.get(target)
                if arg is None:
                    arg = direct[target] = len(self.inputs)
                    self.inputs.append(target)
                into.append((arg, target))
                prog.append((_STORE, None, prev, ("arg", arg), lay.start_offset))
            elif call.out in live_after:
                stores.append((prev, call.out))
                prog.append((_STORE, None, prev, call.out, 0))
        self.outputs = [s for _v, s in stores]
        self.stored_into = [t for _a, t in into]
        self._into_args = [a for a, _t in into]
        self._returned = [s in returned for s in self.outputs]
        n_in = len(self.inputs)
        out_index = {s: n_in + k for k, s in enumerate(self.outputs)}
        prog = [(c, d, a, b[1] if isinstance(b, tuple) else out_index[b], w) if c == _STORE
                else (c, d, a, b, w) for c, d, a, b, w in prog]
        self.prog, nregs = _allocate(prog)
        self.regs = np.empty((nregs, min(BLOCK, max(self.count, 1))), npd)
        self.idx = np.concatenate(idx_parts) if idx_parts else np.zeros(1, np.int64)
        self.consts = np.array(const_values or [0], npd)
        # Tuples of one length compile once: pad the buffer tuple to a power of two.
        n_arrays = n_in + len(self.outputs)
        self._pad = [np.zeros(1, npd)] * ((1 << max(n_arrays - 1, 0).bit_length()) - n_arrays)
        self._npd = npd
        self._planned = []
        for r in self._returned:
            planned = None if r else self._adopt(np.empty(shape, npd), dtype)
            self._planned.append((planned, None if planned is None else planned.arr.reshape(-1)))
        from . import cpu_kernel

        self._run = cpu_kernel.run_program

    def __call__(self, *inputs):
        arrays = [s.arr.reshape(-1) for s in inputs]
        for arg, lay in self.copied.items():
            arrays[arg] = np.ascontiguousarray(inputs[arg].view(lay)).reshape(-1)
        outs = []
        for planned, flat in self._planned:
            if planned is None:
                arr = np.empty(self.count, self._npd)
                outs.append(self._adopt(arr.reshape(self.shape), self.dtype))
                arrays.append(arr)
            else:
                if getattr(planned, "_ws", None) is not None:
                    planned.mark_written()  # drop caches derived from the last replay's values
                outs.append(planned)
                arrays.append(flat)
        arrays.extend(self._pad)
        self._run(self.prog, tuple(arrays), self.idx, self.consts, self.regs, self.count)
        for arg in self._into_args:
            inputs[arg].mark_written()  # as copy_into_inplace does
        return outs


def _allocate(prog):
    """Registers for the abstract program: a value's register is freed after its last
    read, so a chain of any length needs only a few. Returns (int64 rows, register count)."""
    last = {}
    for k, (code, d, a, b, w) in enumerate(prog):
        if code in _READS:
            continue
        last[a] = k
        if code >= 20:
            last[b] = k
    reg_of, free, nregs, rows = {}, [], 0, []
    for k, (code, d, a, b, w) in enumerate(prog):
        if code == _STORE:
            rows.append((code, reg_of[a], reg_of[a], b, 0))
            if last.get(a) == k:
                free.append(reg_of.pop(a))
            continue
        reads = () if code in _READS else ({a, b} if code >= 20 else {a})
        ra = a if code in _READS else reg_of[a]
        rb = reg_of[b] if code >= 20 else b
        # The result's register is picked before the operands read for the last
        # time are freed: a loop whose output is one of its inputs does not vectorise.
        if free:
            r = free.pop()
        else:
            r = nregs
            nregs += 1
        for v in reads:
            if last.get(v) == k:
                free.append(reg_of.pop(v))
        reg_of[d] = r
        rows.append((code, r, ra, rb, w))
        if d not in last:  # never read: give the register back at once
            free.append(reg_of.pop(d))
    return np.array(rows, np.int64).reshape(-1, 5), max(nregs, 1)
