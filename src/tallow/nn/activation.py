"""Parameter-free layers PyTorch users compose models from: activations, Softmax,
Flatten, Dropout."""

from __future__ import annotations

from ..tensor_class import Tensor
from . import ops
from .errors import UnsupportedOptionError
from .module import Module


class ReLU(Module):
    """``max(x, 0)``. ``inplace`` is accepted and ignored (tallow returns a new tensor)."""

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class LeakyReLU(Module):
    """``x`` where positive, ``negative_slope * x`` elsewhere."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: Tensor) -> Tensor:
        return ops.leaky_relu(x, self.negative_slope)


class GELU(Module):
    """``GELU(approximate='none')``: the exact (erf) form, or ``'tanh'``, as PyTorch."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise UnsupportedOptionError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return ops.gelu(x) if self.approximate == "tanh" else ops.gelu_erf(x)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x.silu()


class Tanh(Module):
    """Hyperbolic tangent."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


def _legacy_softmax_dim(rank: int) -> int:
    # PyTorch's rule when no dim is given: 0 for ranks 0, 1 and 3, else 1.
    return 0 if rank in (0, 1, 3) else 1


class Softmax(Module):
    """``Softmax(dim=None)`` along ``dim``; without one, PyTorch's (deprecated) rule:
    dim 0 for inputs of rank 0, 1 or 3, else dim 1. Pass ``dim``."""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        dim = _legacy_softmax_dim(x.rank) if self.dim is None else self.dim
        return ops.softmax(x, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``LogSoftmax(dim=None)``: ``log(softmax(x))`` computed stably; dim as ``Softmax``."""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        dim = _legacy_softmax_dim(x.rank) if self.dim is None else self.dim
        return ops.log_softmax(x, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Flatten(Module):
    """``Flatten(start_dim=1, end_dim=-1)``: merges dims ``start_dim..end_dim`` (PyTorch's
    defaults keep the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Dropout(Module):
    """``Dropout(p=0.5)``: in training mode each element is zeroed with probability ``p``
    and the others scaled by ``1 / (1 - p)``; in eval mode the identity. The random
    draws come from tallow's generator (``tl.manual_seed``), not PyTorch's."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise UnsupportedOptionError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        return ops.dropout(x, self.p, train=True)

    def extra_repr(self) -> str:
        return f"p={self.p}"
