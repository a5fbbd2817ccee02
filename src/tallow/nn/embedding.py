"""Embedding: rows of a ``(num_embeddings, dim)`` table looked up by integer ids."""

from __future__ import annotations

from ..creation import randn, zeros
from ..tensor_class import Tensor
from .init import parameter
from .module import Module


class Embedding(Module):
    """``Embedding(num_embeddings, embedding_dim, device=None, dtype=None, *, padding_idx=None)``.

    Built from scratch the weight is a trainable ``Var`` drawn from ``N(0, 1)``, as
    PyTorch's. ``padding_idx`` (a keyword: the positional order is candle-pyo3's) has
    its row zeroed at construction and gets no gradient, as in PyTorch.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype=None,
                 weight=None, *, padding_idx: int | None = None):
        super().__init__()
        if padding_idx is not None:
            n = int(num_embeddings) if weight is None else weight.shape[0]
            if not -n <= padding_idx < n:
                from ..errors import IndexOutOfRangeError

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
