"""Quantized ops of ``CpuStorage``: GGML blocks dequantized, and multiplied as ggml does.

The kernels: the C byte-dot-product kernels (``tallow.backends.cpu.native``) for
the formats they cover, else the compiled tiled product (``fast``, numba) when
numba is usable, else the NumPy ggml-semantics product (``vec_dot``); all three
give the same bits. The weight is unpacked into
the kernel's layout once per blocks storage and kept while that storage lives
(a QTensor's blocks are not written after it is made).
"""

from __future__ import annotations

import threading
import weakref

from .... import dtype as dt

# ``fast`` and ``vec_dot`` are imported where they are used: they import the codecs
# of ``tallow.quantized``, whose package imports the Tensor core, which imports
# this storage: at import time that is a cycle.

_prepared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_prepared_lock = threading.Lock()


def qmatmul_path(ggml_type) -> str:
    """The CPU's quantized product for one GGML type: "native" (the C kernels) where
    they cover the format, else "numba" (compiled) when available, else "numpy"."""
    from .. import native
    from . import fast

    if native.supports(ggml_type.name):
        return "native"
    return "numba" if fast.available() else "numpy"


class CpuQuantized:
    """Quantized methods of ``CpuStorage`` (``self`` holds GGML blocks as u8)."""

    __slots__ = ()

    def dequantize(self, layout, ggml_type, n_elements):
        return self._wrap(ggml_type.dequantize(self.view(layout), n_elements), dt.f32)

    def prepare_qweight(self, layout, ggml_type, n, k):
        key = (layout, ggml_type.name, n, k, qmatmul_path(ggml_type))
        entry = _prepared.get(self)
        if entry is None or entry[0] != key:
            with _prepared_lock:
                entry = _prepared.get(self)
                if entry is None or entry[0] != key:
                    if key[-1] == "native":
                        from ..native import NativeWeight as kind
                    elif key[-1] == "numba":
                        from .fast import TiledWeight as kind
                    else:
                        from .vec_dot import PreparedWeight as kind
                    entry = (key, kind(self.view(layout), ggml_type, n, k))
                    _prepared[self] = entry
        return entry[1]

    def qmatmul_t(self, layout, weight, weight_layout, ggml_type, n, k):
        prepared = weight.prepare_qweight(weight_layout, ggml_type, n, k)
        out = prepared.matmul_t(self.view(layout))
        return self._wrap(out, dt.f32)
