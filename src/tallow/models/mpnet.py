"""MPNet encoder (Hugging Face's ``MPNetModel`` weights; all-mpnet-base-v2).

BERT's layers with three differences: no token-type embeddings, position ids that
start after the padding index (as RoBERTa), and a learned bias per head added to the
attention scores, looked up by the bucket of the relative distance between query and
key (T5's bucketing: exact below 8, logarithmic up to 128, 16 buckets each way).
The bias is one ``(heads, seq, seq)`` table per batch shared by every layer; it joins
the padding mask as one additive mask, so the attention runs padded (the dense layers
still run on the kept tokens only, as in ``BertModel.forward_unpadded``).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeMismatchError
from ..nn.container import ModuleList
from ..nn.embedding import Embedding
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.norm import LayerNorm
from ..tensor_class import Tensor
from .bert import (BertConfig, BertIntermediate, BertOutput, BertSelfAttention, Packing,
                   _dense_add_norm, extended_mask)
from .config import ModelFormatError, read_json

MPNET_TYPES = ("mpnet",)
# transformers' MPNetEncoder.compute_position_bias uses 32 buckets whatever the config says.
NUM_BUCKETS = 32
MAX_DISTANCE = 128


def mpnet_config(data: dict, path="config") -> BertConfig:
    """A ``BertConfig`` from an MPNet ``config.json``'s dict (no token types)."""
    data = {"pad_token_id": 1, "layer_norm_eps": 1e-5, **data, "type_vocab_size": 0}
    cfg = BertConfig.from_dict(data, path, MPNET_TYPES, "MPNet")
    buckets = cfg.extra.get("relative_attention_num_buckets", NUM_BUCKETS)
    if buckets < NUM_BUCKETS:
        raise ModelFormatError(f"{path}: relative_attention_num_buckets is {buckets}; MPNet "
                               f"looks up {NUM_BUCKETS} buckets")
    return cfg


def relative_position_buckets(seq: int) -> np.ndarray:
    """``(seq, seq)`` bucket ids of ``key - query``, as transformers'
    ``MPNetEncoder.relative_position_bucket`` computes them (its float32 logarithm
    included, so boundary distances such as 16 and 32 land in the same bucket)."""
    pos = np.arange(seq, dtype=np.int64)
    n = pos[:, None] - pos[None, :]  # -(key - query)
    half = NUM_BUCKETS // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (np.log(n.astype(np.float32) / np.float32(max_exact))
                  / np.float32(math.log(MAX_DISTANCE / max_exact))
                  * np.float32(half - max_exact))
    large = max_exact + np.where(n < max_exact, 0, scaled).astype(np.int64)
    large = np.minimum(large, half - 1)
    return ret + np.where(n < max_exact, n, large)


class MPNetEmbeddings(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.word_embeddings = Embedding.load(vb.pp("word_embeddings"), cfg.vocab_size, h)
        self.position_embeddings = Embedding.load(vb.pp("position_embeddings"),
                                                  cfg.max_position_embeddings, h)
        self.LayerNorm = LayerNorm.load(vb.pp("LayerNorm"), h, cfg.layer_norm_eps)
        self.position_offset = cfg.pad_token_id + 1
        self.max_positions = cfg.max_position_embeddings - self.position_offset

    def forward(self, input_ids: Tensor) -> Tensor:
        seq = input_ids.shape[1]
        if seq > self.max_positions:
            raise ShapeMismatchError(f"MPNet: sequence of {seq} tokens is longer than the "
                                     f"{self.max_positions} positions max_position_embeddings gives "
                                     "(truncate the input)")
        pos = self.position_embeddings.weight.narrow(0, self.position_offset, seq)
        return self.LayerNorm(self.word_embeddings(input_ids).broadcast_add(pos))


class MPNetSelfAttention(BertSelfAttention):
    """BERT's self-attention with MPNet's names (``q``, ``k``, ``v``)."""

    def __init__(self, vb, cfg: BertConfig):
        Module.__init__(self)
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = h // self.num_heads
        self.query = Linear.load(vb.pp("q"), h, h)
        self.key = Linear.load(vb.pp("k"), h, h)
        self.value = Linear.load(vb.pp("v"), h, h)


class MPNetAttention(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.attn = MPNetSelfAttention(vb.pp("attn"), cfg)
        self.o = Linear.load(vb.pp("attn.o"), cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = LayerNorm.load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: Tensor, bias: Tensor, packing: Packing | None) -> Tensor:
        return _dense_add_norm(self.o, self.LayerNorm, self.attn(x, bias, packing), x)


class MPNetLayer(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.attention = MPNetAttention(vb.pp("attention"), cfg)
        self.intermediate = BertIntermediate(vb.pp("intermediate"), cfg)
        self.output = BertOutput(vb.pp("output"), cfg)

    def forward(self, x: Tensor, bias: Tensor, packing: Packing | None = None) -> Tensor:
        a = self.attention(x, bias, packing)
        return self.output(self.intermediate(a), a)


class MPNetEncoder(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.layer = ModuleList(MPNetLayer(vb.pp(f"layer.{i}"), cfg)
                                for i in range(cfg.num_hidden_layers))
        buckets = cfg.extra.get("relative_attention_num_buckets", NUM_BUCKETS)
        self.relative_attention_bias = Embedding.load(vb.pp("relative_attention_bias"),
                                                      buckets, self.num_heads)

    def position_bias(self, seq: int, device) -> Tensor:
        """``(1, heads, seq, seq)``: each head's learned bias for each query-key distance."""
        ids = Tensor.from_vec(relative_position_buckets(seq).astype(np.uint32), None,
                              device=device)
        return self.relative_attention_bias(ids).permute((2, 0, 1)).unsqueeze(0)

    def forward(self, x: Tensor, bias: Tensor, packing: Packing | None = None) -> Tensor:
        for layer in self.layer:
            x = layer(x, bias, packing)
        return x


def _root(vb):
    if vb.contains_tensor("embeddings.word_embeddings.weight"):
        return vb
    if vb.pp("mpnet").contains_tensor("embeddings.word_embeddings.weight"):
        return vb.pp("mpnet")
    raise ModelFormatError(
        f"no MPNet weights in {vb.describe()} (no tensor 'embeddings.word_embeddings.weight', "
        "also looked under 'mpnet.')")


class MPNetModel(Module):
    """MPNet's encoder: ``forward(input_ids, token_type_ids=None, attention_mask=None)``
    gives the last hidden states ``(batch, seq, hidden)`` (token types are ignored:
    MPNet has none)."""

    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        vb = _root(vb)
        self.embeddings = MPNetEmbeddings(vb.pp("embeddings"), cfg)
        self.encoder = MPNetEncoder(vb.pp("encoder"), cfg)

    @classmethod
    def load(cls, vb, config: BertConfig) -> "MPNetModel":
        return cls(vb, config)

    @staticmethod
    def config_from_json(path) -> BertConfig:
        return mpnet_config(read_json(path), path)

    @property
    def dtype(self):
        return self.embeddings.word_embeddings.weight.dtype

    @property
    def max_tokens(self) -> int:
        return self.embeddings.max_positions

    def _bias(self, x: Tensor, seq: int, attention_mask: Tensor | None) -> Tensor:
        bias = self.encoder.position_bias(seq, x.device).to_dtype(x.dtype)
        if attention_mask is None:
            return bias
        return extended_mask(attention_mask, x.dtype).broadcast_add(bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        if input_ids.rank != 2:
            raise ShapeMismatchError(f"MPNet: input_ids must be (batch, seq), got {input_ids.shape}")
        x = self.embeddings(input_ids)
        return self.encoder(x, self._bias(x, input_ids.shape[1], attention_mask))

    def forward_unpadded(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                         attention_mask: Tensor | None = None) -> Tensor:
        """As ``BertModel.forward_unpadded``: the dense layers run on the kept tokens only;
        the attention runs padded (the position bias is a full ``seq x seq`` table)."""
        if attention_mask is None:
            return self.forward(input_ids)
        packing = Packing.from_mask(attention_mask)
        if packing is None:
            return self.forward(input_ids)
        if input_ids.rank != 2:
            raise ShapeMismatchError(f"MPNet: input_ids must be (batch, seq), got {input_ids.shape}")
        # No lengths: the packed attention kernel takes no bias.
        packing = Packing(packing.batch, packing.seq, packing.keep, packing.spread_ids,
                          packing.zero_ids)
        x = self.embeddings(input_ids)
        bias = self._bias(x, input_ids.shape[1], attention_mask)
        return packing.unpack_zeros(self.encoder(packing.pack(x), bias, packing))
