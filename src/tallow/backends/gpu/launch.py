"""Launching element-wise kernels, splitting the work when a buffer is larger
than the adapter's max storage binding size.

A split runs the same kernel over chunks of the output: each chunk binds a window
of every buffer (offsets aligned to the adapter's storage offset alignment) that
covers what the chunk reads or writes, and the kernel gets the chunk's first
element index (``base``) and the operands' offsets relative to their windows. A
chunk that cannot fit (one output row reading more than a binding holds) raises
a clear error: never a truncated binding, never wrong values.
"""

from __future__ import annotations

import numpy as np

from ...errors import TallowError
from ...layout import Layout
from .kernel_args import ZERO_SCALARS, grid, map_tail, touched
from .wgsl_types import TYPES

_EPW = {name: t.epw for name, t in TYPES.items()}

CHUNK_QUANTUM = 1024  # elements: keeps every window offset aligned


def compact_via_host(storage, layout):
    """A compact copy of ``layout``'s elements, made through the host: ``(storage,
    contiguous layout)``. For a layout no kernel can read (more than ``MAX_RANK``
    dims that do not merge), which the GPU copy kernel cannot read either."""
    arr = np.ascontiguousarray(storage.to_numpy(layout))
    s = storage.bdev.from_numpy(arr, storage.dtype)
    return s, Layout.contiguous_of(layout.shape)


def map_new(state, kref, operands, out_dtype, n, scalars=ZERO_SCALARS, raw=False, reach=None):
    """A fresh buffer with ``n`` elements of ``out_dtype``: element g is the kernel's
    ``elem(g)`` over ``operands`` ((storage, layout) pairs sharing one shape).

    ``raw``: the kernel indexes its inputs itself from the words in ``scalars``
    (which may run past word 15); the operands' layouts are not passed.
    ``reach``: per operand, how many elements past its layout the kernel may read
    (an index op adds ``id * stride``); a split's windows cover them."""
    layouts = [lay for _, lay in operands]
    if raw:
        rank, bits, tail = 0, 0, ()
    else:
        rank, bits, tail = map_tail(layouts)
    if rank is None:
        operands = [compact_via_host(s, l) for s, l in operands]
        return map_new(state, kref, operands, out_dtype, n, scalars, reach=reach)
    epw = _EPW[out_dtype.name]
    isz = out_dtype.size_in_bytes
    cmd = state.commands
    mb = state.max_binding
    nops = len(operands)
    if nops == 1:
        bufs = [operands[0][0].buf]
        offs = (layouts[0].start_offset, 0, 0)
    elif nops == 2:
        bufs = [operands[0][0].buf, operands[1][0].buf]
        offs = (layouts[0].start_offset, layouts[1].start_offset, 0)
    else:
        bufs = [s.buf for s, _ in operands]
        offs = tuple(lay.start_offset for lay in layouts) + (0,) * (3 - nops)
    # The pipeline is fetched (and, the first time, built) before taking the lock:
    # a compile must never hold up other threads' ops.
    fits = raw or (state.pool.bucket(n * isz) <= mb and all(b.size <= mb for b in bufs))
    pipe = None
    if n:
        pipe = kref.contig() if fits and bits == (1 << nops) - 1 and not raw else kref.general()
    with cmd.lock:
        out = state.pool.alloc(n * isz)
        if n == 0:
            return out
        try:
            if fits:
                nwords = (n + epw - 1) // epw
                words = (n, nwords, 0, rank, bits) + offs + scalars + tail
                bufs.append(out)
                groups = (nwords + 255) >> 8
                if groups <= state.max_groups:
                    cmd.dispatch(pipe, bufs, words, groups)
                else:
                    cmd.dispatch(pipe, bufs, words, *grid(state, nwords))
                return out
            _split(state, pipe, operands, layouts, (out, None), n, epw, isz, rank, bits, tail,
                   scalars, reach)
        except BaseException:
            # No storage owns ``out`` yet: hand it back, or the pool never sees it again.
            state.pool.release(out)
            raise
        return out


def map_inplace(state, kref, operands, dst, dst_layout, scalars=ZERO_SCALARS, reach=None):
    """Run an in-place kernel (one invocation per element of ``dst_layout``) whose
    last operand slot is ``dst`` (written through its layout); ``reach`` as in
    ``map_new``, with one more entry for ``dst``."""
    layouts = [lay for _, lay in operands] + [dst_layout]
    n = dst_layout.count
    if n == 0:
        return
    rank, bits, tail = map_tail(layouts)
    if rank is None:
        raise TallowError(
            f"in-place write into a layout of rank {len(dst_layout.shape)} whose dims "
            "do not merge to 8 or fewer: make the destination contiguous first")
    cmd = state.commands
    mb = state.max_binding
    bufs = [s.buf for s, _ in operands] + [dst.buf]
    fits = all(b.size <= mb for b in bufs)
    pipe = kref.contig() if fits and bits == (1 << len(layouts)) - 1 else kref.general()
    with cmd.lock:
        if fits:
            offs = [lay.start_offset for lay in layouts] + [0] * (3 - len(layouts))
            words = (n, 0, 0, rank, bits, offs[0], offs[1], offs[2]) + tuple(scalars) + tail
            cmd.dispatch(pipe, bufs, words, *grid(state, n))
            return
        _split(state, pipe, operands, layouts, (None, dst), n, 1, 0, rank, bits, tail, scalars,
               reach)


def _window(state, buf, lo_el, hi_el, isz):
    align = max(state.commands.storage_align, 8)
    b0 = (lo_el * isz) // align * align
    b1 = min(buf.size, (hi_el * isz + 3) & ~3)
    if b1 - b0 > state.max_binding:
        raise TallowError(
            f"this op needs {b1 - b0} bytes of one buffer in a single binding, more than "
            f"the adapter's max storage binding size ({state.max_binding} bytes)")
    return (buf, b0, b1 - b0), b0 // isz


def _split(state, pipe, operands, layouts, outs, n, epw, isz, rank, bits, tail, scalars,
           reach=None):
    out, dst = outs
    mb = state.max_binding
    cmd = state.commands
    chunk = max(CHUNK_QUANTUM, (mb // max(isz, 1)) // CHUNK_QUANTUM * CHUNK_QUANTUM)
    storages = [s for s, _ in operands] + ([dst] if dst is not None else [])
    plan = []
    g0 = 0
    while g0 < n:
        size = min(chunk, n - g0)
        while True:
            g1 = g0 + size
            try:
                wins, offs = [], []
                for k, (s, lay) in enumerate(zip(storages, layouts)):
                    lo, hi = touched(lay, g0, g1)
                    if reach:
                        hi += reach[k]
                    w, base_el = _window(state, s.buf, lo, hi, s.dtype.size_in_bytes)
                    wins.append(w)
                    # relative to the window; may be "negative": u32 arithmetic wraps
                    offs.append((lay.start_offset - base_el) & 0xFFFFFFFF)
                break
            except TallowError:
                if size <= CHUNK_QUANTUM:
                    raise
                size = max(CHUNK_QUANTUM, size // 2 // CHUNK_QUANTUM * CHUNK_QUANTUM)
        offs += [0] * (3 - len(offs))
        if out is not None:
            nwords = (size + epw - 1) // epw
            o0 = g0 * isz
            wins.append((out, o0, min(out.size - o0, (size * isz + 3) & ~3)))
            words = (size, nwords, g0, rank, bits, offs[0], offs[1], offs[2]) + tuple(scalars) + tail
            plan.append((wins, words, grid(state, nwords)))
        else:
            words = (size, 0, g0, rank, bits, offs[0], offs[1], offs[2]) + tuple(scalars) + tail
            plan.append((wins, words, grid(state, size)))
        g0 += size
    # Every window is checked before the first dispatch: an in-place op that cannot
    # split raises with its destination untouched.
    for wins, words, groups in plan:
        cmd.dispatch(pipe, wins, words, *groups)
