"""Copies and in-place writes of ``CpuStorage``: compact copies of views, writes
into a view, fills."""

from __future__ import annotations

import numpy as np

from . import parallel


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
