"""User-defined ops (candle's CustomOp1/2/3 and InplaceOp1/2).

Subclass and implement ``name()`` and ``cpu_fwd(storage, layout, ...)`` returning
``(array, shape)``: a flat NumPy array of the result in row-major order (or a CPU
storage) and its shape. ``np.asarray(storage)`` is the input's flat, writable
element buffer, to be read through ``layout.start_offset`` and ``layout.stride``.
Optionally ``gpu_fwd`` (same arguments, GPU storages, returning a GPU storage and
a shape) and ``bwd`` (the gradients as tensors, None where not differentiable).
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .errors import DeviceMismatchError, NotDifferentiableError, TallowError
from .layout import Layout
from .op import record
from .shape import elem_count
from .versions import bump

_contig = Layout.contiguous_of


class _CustomOpBase:
    def name(self) -> str:
        return type(self).__name__

    def cpu_fwd(self, *args):
        raise NotImplementedError(f"custom op {self.name()}: no cpu_fwd")

    def gpu_fwd(self, *args):
        raise NotImplementedError


class CustomOp1(_CustomOpBase):
    """A user-defined op of one tensor: ``t.apply_op1(op)``.

    Define ``cpu_fwd(storage, layout) -> (array, shape)`` (the input is the storage's
    flat NumPy array read through ``layout``), optionally ``gpu_fwd`` (same arguments, a
    GPU storage, see ``tallow.backends.gpu.run_wgsl``) and ``bwd(arg, res, grad_res)``
    for gradients; ``name()`` names it in errors.
    """
    def bwd(self, arg, res, grad_res):
        raise NotDifferentiableError(f"custom op {self.name()} has no backward (bwd)")


class CustomOp2(_CustomOpBase):
    """A user-defined op of two tensors: ``a.apply_op2(b, op)``; ``cpu_fwd(s1, l1, s2, l2)``, ``bwd(arg1, arg2, res, grad_res)`` returns two gradients."""
    def bwd(self, arg1, arg2, res, grad_res):
        raise NotDifferentiableError(f"custom op {self.name()} has no backward (bwd)")


class CustomOp3(_CustomOpBase):
    """A user-defined op of three tensors: ``a.apply_op3(b, c, op)``; ``bwd`` returns three gradients."""
    def bwd(self, arg1, arg2, arg3, res, grad_res):
        raise NotDifferentiableError(f"custom op {self.name()} has no backward (bwd)")


class InplaceOp1(_CustomOpBase):
    """A user-defined op that changes one tensor's storage in place: ``t.inplace_op1(op)``; ``cpu_fwd(storage, layout)`` writes through the layout."""
    pass


class InplaceOp2(_CustomOpBase):
    """A user-defined in-place op on a tensor, reading a second one: ``a.inplace_op2(b, op)``."""
    pass


class _Backward:
    """The graph's handle on a custom op: calls its ``bwd`` with the right arity."""

    __slots__ = ("op",)

    def __init__(self, op):
        self.op = op

    def backward(self, args, out, grad):
        grads = self.op.bwd(*args, out, grad)
        if len(args) == 1:
            return [grads]
        return list(grads)

    def __repr__(self):
        return f"custom:{self.op.name()}"


def _run(op, tensors):
    first = tensors[0]
    pairs = []
    for t in tensors:
        pairs += [t._storage, t._layout]
    kind = first.device.kind
    if kind == "cpu":
        result, shape = op.cpu_fwd(*pairs)
    else:
        try:
            result, shape = op.gpu_fwd(*pairs)
        except NotImplementedError:
            raise TallowError(
                f"custom op {op.name()}: no gpu_fwd for this input, so it cannot run on {first.device}"
            ) from None
    shape = tuple(int(d) for d in shape)
    if kind == "cpu" and not hasattr(result, "bdev"):
        arr = np.asarray(np.asarray(result), order="C").reshape(-1)
        if arr.size != elem_count(shape):
            raise TallowError(
                f"custom op {op.name()}: returned {arr.size} elements for shape {shape}"
            )
        dtype = dt.from_numpy_dtype(arr.dtype)
        storage = first._storage.bdev.from_numpy(arr, dtype, copy=False)
    else:
        storage = result
    return first._wrap(storage, _contig(shape), record("custom", tensors, _Backward(op)))


class CustomOpMethods:
    """Mixed into Tensor: ``apply_op1/2/3`` and ``inplace_op1/2``."""

    __slots__ = ()

    def apply_op1(self, op):
        """The result of a ``CustomOp1`` on this tensor (its ``cpu_fwd``/``gpu_fwd``; ``bwd`` for gradients)."""
        return _run(op, (self,))

    def apply_op2(self, rhs, op):
        """The result of a ``CustomOp2`` on this tensor and ``rhs``."""
        _same_device(op, self, rhs)
        return _run(op, (self, rhs))

    def apply_op3(self, b, c, op):
        """The result of a ``CustomOp3`` on this tensor, ``b`` and ``c``."""
        _same_device(op, self, b)
        _same_device(op, self, c)
        return _run(op, (self, b, c))

    def inplace_op1(self, op):
        """Run an ``InplaceOp1`` that writes into this tensor's storage."""
        if self.device.kind == "cpu":
            op.cpu_fwd(self._storage, self._layout)
        else:
            op.gpu_fwd(self._storage, self._layout)
        bump(self._storage)

    def inplace_op2(self, rhs, op):
        """Run an ``InplaceOp2`` that writes into this tensor's storage, reading ``rhs``."""
        _same_device(op, self, rhs)
        if self.device.kind == "cpu":
            op.cpu_fwd(self._storage, self._layout, rhs._storage, rhs._layout)
        else:
            op.gpu_fwd(self._storage, self._layout, rhs._storage, rhs._layout)
        bump(self._storage)


def _same_device(op, a, b):
    if a._storage.bdev is not b._storage.bdev:
        raise DeviceMismatchError(f"custom op {op.name()}: tensors on {a.device} and {b.device}")
