"""Checks that need the device's answer before an op may go on (integer division
by zero, indices out of range): one tiny kernel and a 4-byte readback.

The CPU backend raises for these; so does this backend, at the cost of waiting
for the work queued so far. ``TALLOW_GPU_CHECK_INDICES=0`` skips the index check
(out-of-range ids then select zeros and scatters skip them, as candle's GPU
kernels do).
"""

from __future__ import annotations

import numpy as np

from ... import config
from ... import dtype as dt
from ...errors import IndexOutOfRangeError
from ...layout import Layout
from .kernel_args import grid, map_tail, pad_scalars, scalar_words
from .kernels import family
from .launch import compact_via_host

CHECK = family("check", [("a", "in", 0), ("z", "flag", "u32")])
CHECK_INDICES = config.settings.gpu_check_indices
_ONE = Layout.contiguous_of((1,))


def _first(s, layout, mode, scalars):
    state = s.bdev
    flag = state.empty(1, dt.u32)
    flag.fill_inplace(_ONE, 0xFFFFFFFF)
    pipe = state.kernels.get(CHECK, (s.dtype.name,), "main", (("MODE", mode),))
    _run(state, pipe, s, layout, flag, scalars)
    pos = int(flag.to_numpy(_ONE)[0])
    return None if pos == 0xFFFFFFFF else pos


def _run(state, pipe, s, layout, flag, scalars):
    rank, bits, tail = map_tail((layout,))
    if rank is None:
        s, layout = compact_via_host(s, layout)
        rank, bits, tail = map_tail((layout,))
    n = layout.count
    if n == 0:
        return
    cmd = state.commands
    with cmd.lock:
        words = (n, 0, 0, rank, bits, layout.start_offset, 0, 0) + tuple(scalars) + tail
        cmd.dispatch(pipe, (s.buf, flag.buf), words, *grid(state, n))


def first_zero(s, layout):
    """Flat index of the first zero of ``layout``, or None."""
    return _first(s, layout, 0, pad_scalars(()))


def check_ids(ids, ids_layout, size: int, op: str, dim: int) -> None:
    """Raise IndexOutOfRangeError for the first id outside ``0..size`` (the "no
    index" sentinels u32::MAX / i64::MAX excepted)."""
    if not CHECK_INDICES or ids_layout.count == 0:
        return
    if ids.dtype is dt.u8 and size > 255:
        return
    pos = _first(ids, ids_layout, 1, pad_scalars(scalar_words(ids.dtype, size)))
    if pos is not None:
        value = np.asarray(ids.to_numpy(ids_layout)).reshape(-1)[pos]
        raise IndexOutOfRangeError(
            f"{op}: index {int(value)} is out of range for dim {dim} of size {size}")
