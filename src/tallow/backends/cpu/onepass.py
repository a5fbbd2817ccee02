"""One-pass element-wise kernels of a training step (``native/_step.c``): an
optimiser's update ``dst + src * alpha`` and ReLU's gradient ``grad * (x > 0)``, where
NumPy makes a temporary array and a second pass (a 256x256 f32 update: 8 µs against
19 µs; a 64x256 ReLU gradient: 2.5 µs against 8 µs). They give the NumPy expressions'
bits (tested), so NumPy stays the fallback and the oracle.

Whether they are used is settled at the first call: the module built, and neither
``TALLOW_NO_NATIVE`` nor ``TALLOW_NATIVE_ISA=scalar``'s AVX2 switch-off in the way
(scalar selects the module's baseline loops). Arrays must be C-contiguous, of one
float dtype (f32 or f64) and one size; callers check that and fall back otherwise.
"""

from __future__ import annotations

import numpy as np

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


_loader = None  # native.loader, imported at the first call (below)


def module():
    """``native/_step`` when it is built and the compiled kernels are on, else None."""
    global _loader
    if _loader is None:  # (imported here: the native package imports this one's users)
        from .native import loader

        _loader = loader
    return _loader.load("_step")  # (called per update and per ReLU gradient)


def takes(*arrays) -> bool:
    """Whether the kernels take these arrays: C-contiguous, one float dtype, one size."""
    first = arrays[0]
    dtype, size = first.dtype, first.size
    if dtype not in _FLOATS:
        return False
    for a in arrays:
        if a.dtype != dtype or a.size != size or not a.flags.c_contiguous:
            return False
    return True
