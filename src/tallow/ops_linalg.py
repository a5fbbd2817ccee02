"""Matrix products: matmul (equal batch dims), broadcast_matmul, dot, mv and ``@``.

The backend gets the two operands' layouts as they are (transposed, narrowed,
stride-0 batches): no copy is made here, and every stride pattern gives the
right result (candle refuses or miscomputes non-mergeable batch strides).
"""

from __future__ import annotations

from .checks import binary_mismatch
from .errors import ShapeMismatchError
from .layout import Layout
from .limits import check_shape
from .op import record2
from .shape import broadcast_shapes
from .tensor_base import TensorBase

_contig = Layout.contiguous_of


class LinalgOps:
    __slots__ = ()

    def matmul(self, rhs):
        """Matrix product ``(..., m, k) @ (..., k, n)``; vectors and batch dims that
        differ follow ``torch.matmul`` (``@``)."""
        a, b = self._layout.shape, rhs._layout.shape
        if len(a) < 2 or len(b) < 2 or a[:-2] != b[:-2]:
            return self @ rhs
        ls, rs = self._storage, rhs._storage
        if len(a) == 2 and len(b) == 2:
            if a[1] != b[0]:
                raise ShapeMismatchError(f"matmul: inner dims differ, lhs {a}, rhs {b}")
            shape = (a[0], b[1])
        else:
            if len(a) < 2 or len(b) < 2:
                raise ShapeMismatchError(f"matmul: operands need rank >= 2, got {a} and {b}")
            if len(a) != len(b) or a[:-2] != b[:-2]:
                raise ShapeMismatchError(
                    f"matmul: batch dims differ, lhs {a}, rhs {b} (use broadcast_matmul)"
                )
            if a[-1] != b[-2]:
                raise ShapeMismatchError(f"matmul: inner dims differ, lhs {a}, rhs {b}")
            shape = a[:-1] + (b[-1],)
        # Shapes first, then device, then dtype: candle's order of checks.
        if ls.dtype is not rs.dtype or ls.bdev is not rs.bdev:
            binary_mismatch("matmul", self, rhs)
        out = ls.matmul(self._layout, rs, rhs._layout)
        return self._wrap(out, _contig(shape), record2("matmul", self, rhs))

    def broadcast_matmul(self, rhs):
        """Matrix product with the batch dims broadcast together (as ``@`` on rank >= 2)."""
        a, b = self._layout.shape, rhs._layout.shape
        if len(a) < 2 or len(b) < 2:
            raise ShapeMismatchError(f"broadcast_matmul: operands need rank >= 2, got {a} and {b}")
        if a[:-2] == b[:-2]:  # nothing to broadcast (2-D operands: every x @ w.t())
            return self.matmul(rhs)
        batch = broadcast_shapes(a[:-2], b[:-2], "broadcast_matmul")
        lhs_shape, rhs_shape = batch + a[-2:], batch + b[-2:]
        check_shape("broadcast_as", lhs_shape)  # as broadcast_as checks a user's shape
        check_shape("broadcast_as", rhs_shape)
        return self._broadcast(lhs_shape).matmul(rhs._broadcast(rhs_shape))

    def dot(self, rhs):
        """The inner product of two 1-D tensors (a rank-0 result)."""
        if self.rank != 1 or rhs.rank != 1 or self.shape != rhs.shape:
            raise ShapeMismatchError(f"dot: expects two 1-D tensors of one length, got {self.shape} and {rhs.shape}")
        return self.mul(rhs).sum_all()

    def mv(self, vec):
        """Matrix (m, k) times vector (k,) -> (m,)."""
        if self.rank != 2 or vec.rank != 1:
            raise ShapeMismatchError(f"mv: expects (m, k) and (k,), got {self.shape} and {vec.shape}")
        return self.matmul(vec.unsqueeze(1)).squeeze(1)

    def __matmul__(self, rhs):
        if not isinstance(rhs, TensorBase):
            rhs = self._array_operand(rhs)
            if rhs is None:
                return NotImplemented
        lhs = self
        squeeze_m = squeeze_n = False
        if len(lhs._layout.shape) == 1:
            lhs, squeeze_m = lhs.unsqueeze(0), True
        if len(rhs._layout.shape) == 1:
            rhs, squeeze_n = rhs.unsqueeze(1), True
        out = lhs.broadcast_matmul(rhs)
        if squeeze_n:
            out = out.squeeze(-1)
        if squeeze_m:
            out = out.squeeze(-2 if squeeze_n is False else -1) if out.rank else out
        return out

    def __rmatmul__(self, lhs):
        # ``ndarray @ tensor``: NumPy defers to us (``__array_priority__``), as for ``+``.
        other = self._array_operand(lhs)
        return NotImplemented if other is None else other.__matmul__(self)
