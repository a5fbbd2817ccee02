"""``nn.Transformer`` and its parts, as PyTorch defines them: encoder and decoder
layers (post-norm by default, ``norm_first`` for pre-norm), their stacks, and the
whole encoder-decoder. Submodule names are PyTorch's (``self_attn``, ``linear1``,
``norm1``, ``layers.0``...), so its state dicts load as they are.
"""

from __future__ import annotations

import copy

from ..errors import ShapeMismatchError
from ..tensor_class import Tensor
from . import ops
from .activation import Dropout
from .attention import MultiheadAttention, causal_mask
from .container import ModuleList
from .errors import UnsupportedOptionError
from .linear import Linear
from .module import Module
from .norm import LayerNorm


def _activation(activation):
    if callable(activation) and not isinstance(activation, str):
        return activation
    if activation == "relu":
        return ops.relu
    if activation == "gelu":
        return ops.gelu_erf
    raise UnsupportedOptionError(f"activation should be relu/gelu, not {activation}")


def _causal_if(flag, mask, x, seq_dim):
    """``mask``, or a causal mask for ``x``'s sequence when ``flag`` and none is given."""
    if flag and mask is None:
        return causal_mask(x.shape[seq_dim], x.dtype, x.device)
    return mask


def _build_layer(layer, attentions, norms, d_model, nhead, dim_feedforward, dropout, activation,
                 layer_norm_eps, batch_first, norm_first, bias, device, dtype):
    """The submodules an encoder or decoder layer shares, in PyTorch's order (so their
    state dicts list the same keys): the attentions, the feed-forward block, ``norms``
    LayerNorms and as many dropouts."""
    kw = {"device": device, "dtype": dtype}
    for name in attentions:
        setattr(layer, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                batch_first=batch_first, **kw))
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
    layer.norm_first = bool(norm_first)
    for i in range(1, norms + 1):
        setattr(layer, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
    for i in range(1, norms + 1):
        setattr(layer, f"dropout{i}", Dropout(dropout))
    layer.activation = _activation(activation)
    layer.batch_first = bool(batch_first)


def _feed_forward(layer, x, last_dropout):
    return last_dropout(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))


class TransformerEncoderLayer(Module):
    """``TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation='relu', layer_norm_eps=1e-5, batch_first=False, norm_first=False,
    bias=True)``. ``forward(src, src_mask=None, src_key_padding_mask=None,
    is_causal=False)``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        _build_layer(self, ("self_attn",), 2, d_model, nhead, dim_feedforward, dropout, activation,
                     layer_norm_eps, batch_first, norm_first, bias, device, dtype)

    def _sa_block(self, x, mask, padding, is_causal):
        x = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                           is_causal=is_causal and mask is None)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return _feed_forward(self, x, self.dropout2)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        mask = _causal_if(is_causal, src_mask, x, 1 if self.batch_first and x.rank == 3 else 0)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask, src_key_padding_mask, False)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, mask, src_key_padding_mask, False))
        return self.norm2(x + self._ff_block(x))


class TransformerDecoderLayer(Module):
    """``TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation='relu', layer_norm_eps=1e-5, batch_first=False, norm_first=False,
    bias=True)``. ``forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
    memory_is_causal=False)``."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        _build_layer(self, ("self_attn", "multihead_attn"), 3, d_model, nhead, dim_feedforward, dropout,
                     activation, layer_norm_eps, batch_first, norm_first, bias, device, dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        seq = 1 if self.batch_first and tgt.rank == 3 else 0
        tgt_mask = _causal_if(tgt_is_causal, tgt_mask, tgt, seq)
        if memory_is_causal and memory_mask is None:
            if tgt.shape[seq] != memory.shape[seq]:
                raise ShapeMismatchError("memory_is_causal needs target and memory of one length")
            memory_mask = causal_mask(tgt.shape[seq], tgt.dtype, tgt.device)
        sa = lambda x: self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask,
                                                    key_padding_mask=tgt_key_padding_mask, need_weights=False)[0])
        mha = lambda x: self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=memory_mask,
                                                          key_padding_mask=memory_key_padding_mask,
                                                          need_weights=False)[0])
        ff = lambda x: _feed_forward(self, x, self.dropout3)
        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            return x + ff(self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + mha(x))
        return self.norm3(x + ff(x))


def _clones(layer, n):
    if not isinstance(n, int) or n < 1:
        raise UnsupportedOptionError(f"num_layers must be a positive int, got {n!r}")
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """``TransformerEncoder(encoder_layer, num_layers, norm=None)``: ``num_layers``
    copies of the layer (each with its own parameters, starting equal), then ``norm``."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``TransformerDecoder(decoder_layer, num_layers, norm=None)``."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """``Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
    dim_feedforward=2048, dropout=0.1, activation='relu', custom_encoder=None,
    custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
    bias=True)``, as ``torch.nn.Transformer``."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                            layer_norm_eps, batch_first, norm_first, bias, **kw)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
                tgt_is_causal=None, memory_is_causal=False):
        if src.rank == 3 and tgt.rank == 3:
            batch = 0 if self.batch_first else 1
            if src.shape[batch] != tgt.shape[batch]:
                raise ShapeMismatchError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeMismatchError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None) -> Tensor:
        """``(sz, sz)``: -inf above the diagonal, 0 elsewhere."""
        return causal_mask(sz, dtype or "f32", device)
