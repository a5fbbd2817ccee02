"""Embedding: rows of a ``(num_embeddings, dim)`` table looked up by integer ids."""

from __future__ import annotations

from ..creation import randn
from ..tensor_class import Tensor
from .module import Module


class Embedding(Module):
    """``Embedding(num_embeddings, embedding_dim)``: weights ``N(0, 1)`` as PyTorch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype=None,
                 weight=None):
        super().__init__()
        if weight is None:
            weight = randn((int(num_embeddings), int(embedding_dim)), dtype=dtype or "f32",
                           device=device)
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
        return self.weight.embedding(ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
