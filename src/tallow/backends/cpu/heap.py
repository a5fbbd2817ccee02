"""Keeping freed memory at the top of the C heap for the next step (glibc only).

A training step frees what the step before it allocated — activations, gradients,
temporaries, some of them hundreds of KiB — and allocates it all again. glibc's
malloc gives a freed top of the heap back to the system once it passes its trim
threshold (a few hundred KiB after its own adjustments), so each step grows the heap
again and takes a page fault on every page of memory it touches first: measured on
the 3-layer 256-wide MLP step (batch 64), that is 0.4-0.8 ms of a 1.1 ms step (backward
and the optimiser's step twice as slow, freeing the graph ten times as slow). Asking
malloc to keep ``TALLOW_HEAP_PAD`` bytes (16 MiB by default) of slack above the
top when it grows or trims the heap removes that: the same memory serves every step.
Blocks up to 32 MiB then come from the heap too (``M_MMAP_THRESHOLD``, the ceiling
glibc's own adjustment reaches), as they do in a process where malloc has adjusted.
The memory kept is at most that padding; ``TALLOW_HEAP_PAD=0`` leaves malloc as it is.
On other C libraries (musl, macOS, Windows) nothing is changed.
"""

from __future__ import annotations

import ctypes
import sys

from ... import config

M_TOP_PAD = -2  # glibc's mallopt parameter numbers
M_MMAP_THRESHOLD = -3
# Setting any of malloc's thresholds freezes the others where they stand, and glibc
# would otherwise raise its mmap threshold as large blocks are freed (up to 32 MiB on
# 64-bit): left frozen at its start value (128 KiB), every array above that would be
# mapped fresh and page-faulted in on each use (a GGUF prompt's f16 weight tiles:
# 240 -> 150 tokens/s). So the threshold is set to that dynamic ceiling as well.
MMAP_THRESHOLD = 32 << 20
DEFAULT_PAD = config.default("heap_pad")
_DONE = {"pad": None}


def keep_slack() -> int | None:
    """Set glibc's ``M_TOP_PAD`` to ``TALLOW_HEAP_PAD`` bytes once per process; the pad
    set, or None where nothing was changed (not glibc, or a pad of 0)."""
    if _DONE["pad"] is not None:
        return _DONE["pad"] or None
    _DONE["pad"] = 0
    pad = config.settings.heap_pad
    if pad <= 0 or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's own symbol: another C library is left alone
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_TOP_PAD, min(pad, (1 << 31) - 1)) != 1:
        return None
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    _DONE["pad"] = pad
    return pad
