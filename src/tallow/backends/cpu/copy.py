"""Copies and in-place writes of ``CpuStorage``: compact copies of views, writes
into a view, fills."""

from __future__ import annotations

import numpy as np

from ..base import BackendStorage
from . import onepass, parallel

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


class CpuCopy:
    """Copy and in-place write methods of ``CpuStorage``."""

    __slots__ = ()

    def copy_strided(self, layout):
        return self._wrap(parallel.copy(self.view(layout)), self.dtype)

    def copy_into_inplace(self, dst_layout, src, src_layout):
        np.copyto(self.view(dst_layout), src.view(src_layout))
        self.mark_written()

    def fill_inplace(self, layout, value):
        self.view(layout)[...] = value
        self.mark_written()

    def add_scaled_inplace(self, layout, src, src_layout, alpha):
        if self.dtype.np not in _NATIVE:  # f16/bf16: the composed default, in f32 steps
            return BackendStorage.add_scaled_inplace(self, layout, src, src_layout, alpha)
        dst = self.view(layout)
        s = src.view(src_layout)
        kernels = onepass.module()
        if kernels is not None and onepass.takes(dst, s):
            kernels.add_scaled(dst, s, alpha)  # one pass, the same two roundings
        else:
            # The same two roundings as ``dst + src * alpha``, with no new buffer for the sum.
            np.add(dst, np.multiply(s, dst.dtype.type(alpha)), out=dst)
        self.mark_written()
