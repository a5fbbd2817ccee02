"""A decoder's input embeddings, shared by the one-sequence and the batched steps."""

from __future__ import annotations

from .. import dtype as dt
from ..tensor_class import Tensor


def embed_tokens(model, input_ids: Tensor) -> Tensor:
    """The decoder's input embeddings of ``input_ids`` (scaled where the family says so)."""
    x = model.embed_tokens(input_ids)
    scale = getattr(model, "embed_scale", None)
    if scale is not None:
        # in the weights' dtype, as Gemma's reference scales
        x = x * float(Tensor([scale], dtype=dt.f32).to_dtype(x.dtype).to_dtype(dt.f32).numpy()[0])
    return x
