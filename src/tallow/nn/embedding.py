"""Embedding: rows of a ``(num_embeddings, dim)`` table looked up by integer ids."""

from __future__ import annotations

from ..creation import randn, zeros
from ..device import Device
from ..dtype import DType
from ..errors import IndexOutOfRangeError
from ..tensor_class import Tensor
from .init import parameter
from .errors import UnsupportedOptionError
from .module import Module


def _is_dtype(value) -> bool:
    return isinstance(value, DType)


class Embedding(Module):
    """``Embedding(num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
    norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False,
    device=None, dtype=None)``, PyTorch's signature.

    Built from scratch the weight is a trainable ``Var`` drawn from ``N(0, 1)``, as
    PyTorch's. ``padding_idx`` has its row zeroed at construction and gets no
    gradient, as in PyTorch. ``max_norm`` and ``scale_grad_by_freq`` are refused;
    ``sparse`` gradients are dense here. candle-pyo3's ``Embedding(n, dim, device,
    dtype)`` still works: a device or dtype in those places is taken as what it is.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight=None, _freeze: bool = False, device=None, dtype=None,
                 *, weight=None):
        super().__init__()
        # candle-pyo3's positional (device, dtype) land on padding_idx / max_norm.
        if padding_idx is None or isinstance(padding_idx, (str, Device)) or _is_dtype(padding_idx):
            if _is_dtype(padding_idx):
                dtype, padding_idx = padding_idx, None
            elif padding_idx is not None:
                device, padding_idx = padding_idx, None
            if _is_dtype(max_norm):
                dtype, max_norm = max_norm, None
        if max_norm is not None or scale_grad_by_freq:
            raise UnsupportedOptionError("Embedding: max_norm and scale_grad_by_freq are not supported")
        if _weight is not None and weight is None:  # PyTorch's: a parameter unless frozen
            weight = _weight if _freeze else parameter(_weight)
        if padding_idx is not None:
            n = int(num_embeddings) if weight is None else weight.shape[0]
            if not -n <= padding_idx < n:
                raise IndexOutOfRangeError(
                    f"Embedding: padding_idx {padding_idx} out of range for {n} embeddings")
            padding_idx = padding_idx % n
        self.padding_idx = padding_idx
        if weight is None:
            weight = randn((int(num_embeddings), int(embedding_dim)), dtype=dtype or "f32",
                           device=device)
            if padding_idx is not None:
                weight = weight.slice_assign(
                    [(padding_idx, padding_idx + 1), (0, int(embedding_dim))],
                    zeros((1, int(embedding_dim)), dtype=weight.dtype, device=weight.device))
            weight = parameter(weight)
        self.num_embeddings, self.embedding_dim = tuple(weight.shape)
        self.weight = weight

    @classmethod
    def from_weights(cls, weight: Tensor) -> "Embedding":
        return cls(0, 0, weight=weight)

    @classmethod
    def load(cls, vb, num_embeddings: int, embedding_dim: int) -> "Embedding":
        from .init import Init

        return cls.from_weights(vb.get((num_embeddings, embedding_dim), "weight", Init.normal()))

    def forward(self, ids: Tensor) -> Tensor:
        out = self.weight.embedding(ids)
        if self.padding_idx is None or not out._track:
            return out
        # The padding row's value comes through, its gradient does not (PyTorch).
        keep = ids.ne(self.padding_idx).to_dtype(out.dtype).unsqueeze(-1)
        return out.broadcast_mul(keep) + out.detach().broadcast_mul(1.0 - keep)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
