"""Var: a tensor whose value can change in place and whose ops are tracked."""

from __future__ import annotations

import numpy as np

from .checks import same_dtype_device
from .errors import ShapeMismatchError
from .tensor_base import new_id
from .inplace import write_in_place
from .tensor_class import Tensor
from .versions import bump


class Var(Tensor):
    """A tracked tensor owning a compact contiguous buffer (candle's ``Var``).

    ``Var(data)`` accepts what ``Tensor(data)`` does; from a tensor it copies.
    """

    # ``_grad``: PyTorch's ``.grad``, left unset until a backward pass reaches this Var.
    __slots__ = ("_grad",)

    def __init__(self, data, dtype=None, device=None):
        if isinstance(data, Tensor):
            src = data
            if device is not None:
                src = src.to_device(device)
            if dtype is not None:
                src = src.to_dtype(dtype)
            own = src.copy()
            self._storage, self._layout = own._storage, own._layout
            self._op = None
            self._id = new_id()
        else:
            Tensor.__init__(self, data, dtype=dtype, device=device)
        self._track = True

    @staticmethod
    def from_tensor(t: Tensor) -> "Var":
        return Var(t)

    def as_tensor(self) -> "Var":
        """The variable itself (a Var is a Tensor)."""
        return self

    def as_detached_tensor(self) -> Tensor:
        return self.detach()

    def is_variable(self) -> bool:
        return True

    @property
    def grad(self):
        """PyTorch's ``.grad``: the sum of this Var's gradients over the ``backward()``
        calls since it was last cleared (None before the first; ``opt.zero_grad()`` or
        ``var.grad = None`` clears it). ``backward()`` also returns them in a GradStore."""
        return getattr(self, "_grad", None)

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"Var.grad: expected a Tensor or None, got {type(value).__name__}")
        if value is not None and value.shape != self.shape:
            raise ShapeMismatchError(f"Var.grad: shape {value.shape} does not match {self.shape}")
        self._grad = value

    def accumulate_grad(self, grad: Tensor) -> None:
        """``self.grad += grad`` as PyTorch's backward does (a new tensor: the sum, or a
        clone of ``grad`` on the first call, so a later in-place write into ``.grad``,
        a gradient clip say, changes nothing else)."""
        prev = getattr(self, "_grad", None)
        g = grad.detach()
        self._grad = g.clone() if prev is None else prev + g

    def set(self, value: Tensor) -> None:
        """Replace the value in place (the buffer, shape, dtype and device stay)."""
        if not isinstance(value, Tensor):
            value = Tensor(value, dtype=self.dtype, device=self.device)
        if value.shape != self.shape:
            raise ShapeMismatchError(f"Var.set: shape {value.shape} does not match {self.shape}")
        same_dtype_device("Var.set", (self, value))
        if value._storage is self._storage and value._layout == self._layout:
            return
        src = value
        if value._storage is self._storage:
            src = value.copy()
        lay = self._layout
        # (write_in_place bumps the version: graphs recorded before this write are stale.)
        write_in_place(self, "Var.set", lambda s: s.copy_into_inplace(lay, src._storage, src._layout),
                       graph_rule=False)

    def _add_scaled(self, grad: Tensor, alpha: float) -> None:
        """``self += alpha * grad`` in place (an optimiser's update; ``grad`` has this
        Var's shape, dtype and device): no new tensor, the version bumped as ``set`` does."""
        if grad._layout.shape != self._layout.shape:
            raise ShapeMismatchError(f"Var update: shape {grad.shape} does not match {self.shape}")
        s = self._storage
        if grad._storage.dtype is not s.dtype or grad._storage.bdev is not s.bdev:
            same_dtype_device("Var update", (self, grad))
        src = grad
        if grad._storage is s:
            src = grad.copy()
        lay = self._layout
        write_in_place(self, "Var update",
                       lambda st: st.add_scaled_inplace(lay, src._storage, src._layout, alpha),
                       graph_rule=False)

    def _adopt(self, value: Tensor) -> None:
        """Take ``value``'s data, shape, dtype and device, keeping this Var's identity.

        ``Module.to`` and ``load_state_dict(assign=True)`` use it so that an optimiser
        holding the Var follows the model (PyTorch moves a Parameter's data the same
        way). ``value`` must not be used afterwards when its buffer is taken as it is.
        """
        lay = value._layout
        if not (lay.contiguous and lay.start_offset == 0 and value._storage.count == lay.count):
            value = value.copy()
        self._storage, self._layout = value._storage, value._layout
        bump(self._storage)  # graphs recorded with the old data are now stale
        grad = getattr(self, "_grad", None)
        if grad is not None:  # ``.grad`` follows the Var, as PyTorch's ``Module.to`` moves it
            if grad.shape != value.shape:
                self._grad = None
            else:
                self._grad = grad.to_device(value.device).to_dtype(value.dtype)

    def __reduce__(self):
        # Pickling and copy.deepcopy keep a Var a Var (a model stays trainable).
        arr = np.asarray(self._host(), order="C").copy()
        return (_rebuild_var, (arr, str(self.dtype), str(self.device)))

    def __repr__(self):
        return "Var(" + Tensor.__repr__(self) + ")"


def _rebuild_var(arr, dtype, device):
    return Var(arr, dtype=dtype, device=device)
