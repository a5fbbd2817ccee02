"""BERT encoder (candle-transformers' ``bert.rs``, Hugging Face's ``BertModel`` weights).

``BertModel.load(vb, config)`` reads the weights with Hugging Face's names (at the
root of the file, or under ``bert.``); ``forward(input_ids, token_type_ids,
attention_mask)`` returns the last hidden states ``(batch, seq, hidden)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import dtype as dt
from ..creation import cat, zeros_like
from ..errors import ShapeMismatchError
from ..nn import ops
from ..nn.container import ModuleList
from ..nn.embedding import Embedding
from ..nn.linear import Linear, linear
from ..nn.module import Module
from ..nn.norm import LayerNorm
from ..tensor_class import Tensor
from .config import ModelFormatError, check_architecture, read_json, require

BERT_TYPES = ("bert",)


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    model_type: str = "bert"
    extra: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def from_dict(data: dict, path="config", model_types=BERT_TYPES,
                  family="BERT") -> "BertConfig":
        check_architecture(data, path, model_types, family)
        require(data, path, "vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size")
        names = set(BertConfig.__dataclass_fields__) - {"extra"}
        cfg = BertConfig(**{k: data[k] for k in names if k in data})
        cfg.extra = {k: v for k, v in data.items() if k not in names}
        if cfg.position_embedding_type != "absolute":
            raise ModelFormatError(
                f"{path}: position_embedding_type {cfg.position_embedding_type!r} is not supported "
                "(only 'absolute')")
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ModelFormatError(
                f"{path}: hidden_size {cfg.hidden_size} is not a multiple of "
                f"num_attention_heads {cfg.num_attention_heads}")
        ops.activation(cfg.hidden_act)  # refuse an unknown activation now
        return cfg

    @staticmethod
    def from_json(path) -> "BertConfig":
        """A Hugging Face ``config.json`` (a file or the directory holding it)."""
        return BertConfig.from_dict(read_json(path), path)


class BertEmbeddings(Module):
    """Word + position + token-type embeddings, then LayerNorm. ``position_offset`` is
    the first position id (RoBERTa-style models count positions from ``pad + 1``)."""

    def __init__(self, vb, cfg: BertConfig, position_offset: int = 0):
        super().__init__()
        h = cfg.hidden_size
        self.word_embeddings = Embedding.load(vb.pp("word_embeddings"), cfg.vocab_size, h)
        self.position_embeddings = Embedding.load(vb.pp("position_embeddings"),
                                                  cfg.max_position_embeddings, h)
        self.token_type_embeddings = Embedding.load(vb.pp("token_type_embeddings"),
                                                    cfg.type_vocab_size, h)
        self.LayerNorm = LayerNorm.load(vb.pp("LayerNorm"), h, cfg.layer_norm_eps)
        self.position_offset = position_offset
        self.max_positions = cfg.max_position_embeddings - position_offset

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        _b, seq = input_ids.shape
        if seq > self.max_positions:
            raise ShapeMismatchError(
                f"BERT: sequence of {seq} tokens is longer than the {self.max_positions} "
                "positions max_position_embeddings gives (truncate the input)")
        x = self.word_embeddings(input_ids)
        x = x + self.token_type_embeddings(token_type_ids)
        pos = self.position_embeddings.weight.narrow(0, self.position_offset, seq)
        x = x.broadcast_add(pos)
        return self.LayerNorm(x)


class BertSelfAttention(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.head_dim = h // self.num_heads
        self.query = Linear.load(vb.pp("query"), h, h)
        self.key = Linear.load(vb.pp("key"), h, h)
        self.value = Linear.load(vb.pp("value"), h, h)

    def _heads(self, x, b, s):
        return x.reshape((b, s, self.num_heads, self.head_dim)).transpose(1, 2)

    def _qkv_weights(self):
        """Query, key and value weights stacked into one (3h, h) matrix (and bias), so the
        three projections run as one GEMM; rebuilt if the weights are replaced."""
        parts = (self.query, self.key, self.value)
        key = tuple(id(t) for m in parts for t in (m.weight, m.bias))
        cached = self.__dict__.get("_qkv")
        if cached is None or cached[0] != key:
            w = cat([m.weight for m in parts], 0)
            bias = None if any(m.bias is None for m in parts) else cat([m.bias for m in parts], 0)
            cached = (key, w, bias)
            self.__dict__["_qkv"] = cached
        return cached[1], cached[2]

    def forward(self, x: Tensor, mask: Tensor | None, packing: "Packing | None" = None) -> Tensor:
        """``x`` (batch, seq, hidden), or (tokens, hidden) with a ``packing``: the
        projections run on the packed tokens, and the attention on them too where the
        backend has a packed kernel (else on the batch spread back to its padding)."""
        if packing is None:
            b, s, h = x.shape
            spread = _same
        else:
            b, s, h = packing.batch, packing.seq, x.shape[-1]
            spread = packing.spread
        parts = (self.query, self.key, self.value)
        plain = all(isinstance(m.weight, Tensor) and not m.weight._track and
                    (m.bias is None or not m.bias._track) for m in parts)
        if plain and not x._track:
            w, bias = self._qkv_weights()
            qkv = linear(x, w, bias)
            if packing is not None and packing.lengths is not None and \
                    ops.has_fused(x, "attention_packed"):
                # Each sentence attends within its own packed rows: no padding, no mask.
                qkv = qkv.reshape((-1, 3, self.num_heads, self.head_dim))
                q, k, v = (qkv.narrow(1, i, 1).squeeze(1) for i in range(3))
                ctx = ops.attention_packed(q, k, v, packing.lengths, 1.0 / math.sqrt(self.head_dim))
                return ctx.reshape((-1, h))
            qkv = spread(qkv).reshape((b, s, 3, self.num_heads, self.head_dim))
            q, k, v = (qkv.narrow(2, i, 1).squeeze(2).transpose(1, 2) for i in range(3))
        else:
            q = self._heads(spread(self.query(x)), b, s)
            k = self._heads(spread(self.key(x)), b, s)
            v = self._heads(spread(self.value(x)), b, s)
        ctx = ops.scaled_dot_product_attention(q, k, v, mask, scale=1.0 / math.sqrt(self.head_dim))
        ctx = ctx.transpose(1, 2).reshape((b, s, h))
        return ctx if packing is None else packing.pack(ctx)


class BertSelfOutput(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.dense = Linear.load(vb.pp("dense"), cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = LayerNorm.load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return _dense_add_norm(self.dense, self.LayerNorm, x, residual)


def _dense_add_norm(dense: Linear, norm: LayerNorm, x: Tensor, residual: Tensor) -> Tensor:
    """``norm(dense(x) + residual)`` with the dense layer's bias, the residual and the norm
    in one pass per row (``ops.add_layer_norm``)."""
    if not isinstance(dense.weight, Tensor) or norm.weight is None:
        return norm(dense(x) + residual)
    return ops.add_layer_norm(linear(x, dense.weight), residual, norm.weight, norm.bias,
                              norm.eps, bias=dense.bias)


class BertAttention(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(vb.pp("self"), cfg)
        self.output = BertSelfOutput(vb.pp("output"), cfg)

    def forward(self, x: Tensor, mask: Tensor | None, packing: "Packing | None" = None) -> Tensor:
        return self.output(self.self(x, mask, packing), x)


class BertIntermediate(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.dense = Linear.load(vb.pp("dense"), cfg.hidden_size, cfg.intermediate_size)
        self.act = ops.activation(cfg.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dense
        if self.act is ops.gelu_erf and isinstance(d.weight, Tensor) and d.bias is not None:
            # The bias goes in with the activation: one pass over the wide activations
            # instead of two.
            return ops.gelu_erf(linear(x, d.weight), d.bias)
        return self.act(d(x))


class BertOutput(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.dense = Linear.load(vb.pp("dense"), cfg.intermediate_size, cfg.hidden_size)
        self.LayerNorm = LayerNorm.load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return _dense_add_norm(self.dense, self.LayerNorm, x, residual)


class BertLayer(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.attention = BertAttention(vb.pp("attention"), cfg)
        self.intermediate = BertIntermediate(vb.pp("intermediate"), cfg)
        self.output = BertOutput(vb.pp("output"), cfg)

    def forward(self, x: Tensor, mask: Tensor | None, packing: "Packing | None" = None) -> Tensor:
        a = self.attention(x, mask, packing)
        return self.output(self.intermediate(a), a)


class BertEncoder(Module):
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.layer = ModuleList(BertLayer(vb.pp(f"layer.{i}"), cfg)
                                for i in range(cfg.num_hidden_layers))

    def forward(self, x: Tensor, mask: Tensor | None, packing: "Packing | None" = None) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask, packing)
        return x


def _root(vb, cfg):
    """The builder whose names start at ``embeddings.`` (checkpoints differ in prefix)."""
    if vb.contains_tensor("embeddings.word_embeddings.weight"):
        return vb
    for p in ("bert", "roberta", cfg.model_type):
        if vb.pp(p).contains_tensor("embeddings.word_embeddings.weight"):
            return vb.pp(p)
    raise ModelFormatError(
        f"no BERT weights in {vb.describe()} (no tensor 'embeddings.word_embeddings.weight', "
        "also looked under 'bert.')")


class BertModel(Module):
    """BERT's encoder (candle-transformers' ``BertModel``), its weights read through a ``VarBuilder``.

    ``forward(input_ids, token_type_ids=None, attention_mask=None)`` gives the last hidden
    states, (batch, sequence, hidden); ``SentenceEmbedder`` pools and normalises them.
    """
    def __init__(self, vb, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        vb = _root(vb, cfg)
        self.embeddings = BertEmbeddings(vb.pp("embeddings"), cfg, self.position_offset_for(cfg))
        self.encoder = BertEncoder(vb.pp("encoder"), cfg)

    @classmethod
    def load(cls, vb, config: BertConfig) -> "BertModel":
        return cls(vb, config)

    @classmethod
    def position_offset_for(cls, cfg: BertConfig) -> int:
        return 0

    @property
    def max_tokens(self) -> int:
        """The longest sequence the position table covers."""
        return self.embeddings.max_positions

    @property
    def dtype(self):
        return self.embeddings.word_embeddings.weight.dtype

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        if input_ids.rank != 2:
            raise ShapeMismatchError(f"BERT: input_ids must be (batch, seq), got {input_ids.shape}")
        if token_type_ids is None:
            token_type_ids = zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        mask = None
        if attention_mask is not None:
            mask = extended_mask(attention_mask, x.dtype)
        return self.encoder(x, mask)

    def forward_unpadded(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                         attention_mask: Tensor | None = None) -> Tensor:
        """``forward``'s hidden states at the positions ``attention_mask`` keeps, zeros at
        the others (where ``forward``'s values mean nothing).

        The dense layers (the projections, the feed-forward block, the norms) run on the
        kept tokens only, packed, and so does the attention (each row within its own
        tokens) on backends with ``attention_packed`` when the kept tokens of each row
        come first. A batch of sentences of unequal length costs what its tokens cost,
        not its padding.
        """
        if attention_mask is None:
            return self.forward(input_ids, token_type_ids)
        packing = Packing.from_mask(attention_mask)
        if packing is None:  # no padding to leave out
            return self.forward(input_ids, token_type_ids)
        if input_ids.rank != 2:
            raise ShapeMismatchError(f"BERT: input_ids must be (batch, seq), got {input_ids.shape}")
        if token_type_ids is None:
            token_type_ids = zeros_like(input_ids)
        x = packing.pack(self.embeddings(input_ids, token_type_ids))
        mask = extended_mask(attention_mask, x.dtype)
        return packing.unpack_zeros(self.encoder(x, mask, packing))


def _same(x):
    return x


class Packing:
    """The kept positions of a padded ``(batch, seq)`` batch: ``pack`` takes them out
    as ``(tokens, ...)`` rows, ``spread`` puts rows back into ``(batch * seq, ...)``
    (padding gets some kept row: the mask hides it from the keys, and what it computes
    as a query is dropped), ``unpack_zeros`` into ``(batch, seq, ...)`` with zeros."""

    def __init__(self, batch: int, seq: int, keep, spread_ids, zero_ids, lengths=None):
        self.batch, self.seq = batch, seq
        self.keep, self.spread_ids, self.zero_ids = keep, spread_ids, zero_ids
        self.lengths = lengths  # kept tokens per batch row, when they are a prefix

    @staticmethod
    def from_mask(attention_mask: Tensor) -> "Packing | None":
        """None when the mask keeps every position (nothing to leave out)."""
        if attention_mask.rank != 2:
            raise ShapeMismatchError(f"attention_mask must be (batch, seq), got {attention_mask.shape}")
        b, s = attention_mask.shape
        kept = attention_mask.to_dtype(dt.f32).numpy().reshape(-1) != 0
        if kept.all() or not kept.any():
            return None
        keep = np.flatnonzero(kept).astype(np.uint32)
        row = np.cumsum(kept, dtype=np.int64) - 1
        zero = np.where(kept, row, np.iinfo(np.uint32).max).astype(np.uint32)  # max id: zeros
        spread = np.where(kept, row, 0).astype(np.uint32)
        dev = attention_mask.device
        as_t = lambda a: Tensor.from_vec(a, None, device=dev)  # noqa: E731
        per_row = kept.reshape(b, s)
        counts = per_row.sum(axis=1)
        # Packed attention needs each row's kept tokens to be its first ones (padding at
        # the end, as tokenizers pad); any other mask takes the padded attention.
        prefix = bool((per_row == (np.arange(s)[None] < counts[:, None])).all())
        return Packing(b, s, as_t(keep), as_t(spread), as_t(zero),
                       tuple(int(c) for c in counts) if prefix else None)

    def pack(self, x: Tensor) -> Tensor:
        """(batch, seq, ...) -> (tokens, ...)."""
        return x.reshape((self.batch * self.seq,) + x.shape[2:]).index_select(self.keep, 0)

    def spread(self, x: Tensor) -> Tensor:
        """(tokens, ...) -> (batch * seq, ...), padding filled with some kept row."""
        return x.index_select(self.spread_ids, 0)

    def unpack_zeros(self, x: Tensor) -> Tensor:
        """(tokens, ...) -> (batch, seq, ...), zeros at the padding."""
        return x.index_select(self.zero_ids, 0).reshape((self.batch, self.seq) + x.shape[1:])


def extended_mask(attention_mask: Tensor, dtype) -> Tensor:
    """``(batch, seq)`` 1/0 mask -> ``(batch, 1, 1, seq)`` additive mask (0 or the dtype's min)."""
    if attention_mask.rank != 2:
        raise ShapeMismatchError(f"attention_mask must be (batch, seq), got {attention_mask.shape}")
    b, s = attention_mask.shape
    m = attention_mask.to_dtype(dtype)
    neg = float(dt.DType.parse(dtype).min)
    return ((m * -1.0) + 1.0).affine(neg, 0.0).reshape((b, 1, 1, s))
