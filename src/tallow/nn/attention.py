"""``nn.MultiheadAttention``, with PyTorch's parameters, arguments and masks.

The parameters carry PyTorch's names (``in_proj_weight``, ``in_proj_bias``,
``out_proj.weight``/``bias``; ``q_proj_weight``... when key or value have their own
sizes; ``bias_k``/``bias_v``), so a PyTorch state dict loads as it is.

Masks follow ``nn.MultiheadAttention`` (not ``scaled_dot_product_attention``): a
bool ``key_padding_mask`` ``(N, S)`` or ``attn_mask`` ``(L, S)`` / ``(N * heads, L,
S)`` is True where a position may *not* be attended; a float mask is added to the
scores. ``is_causal=True`` without a mask masks the future keys.
"""

from __future__ import annotations

import math

from ..creation import zeros
from ..errors import DTypeMismatchError, ShapeMismatchError
from ..tensor_class import Tensor
from . import init, ops
from .errors import UnsupportedOptionError
from .linear import Linear, linear
from .module import Module


def additive_mask(mask: Tensor, dtype) -> Tensor:
    """A bool "may not attend" mask as 0 / -inf of ``dtype``; a float mask as it is."""
    if getattr(mask.dtype, "is_bool", False) or mask.dtype.name == "u8":
        return zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.dtype.is_float:
        raise DTypeMismatchError(f"attention masks are bool or float, got {mask.dtype}")
    return mask.to_dtype(dtype)


def causal_mask(size: int, dtype="f32", device=None) -> Tensor:
    """``(size, size)`` with -inf above the diagonal and 0 elsewhere
    (``Transformer.generate_square_subsequent_mask``)."""
    positions = Tensor.arange(0, size, device=device)
    future = positions.unsqueeze(1) < positions.unsqueeze(0)
    return zeros((size, size), dtype=dtype, device=device).masked_fill(future, float("-inf"))


class MultiheadAttention(Module):
    """``MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None, batch_first=False,
    device=None, dtype=None)``, as ``torch.nn.MultiheadAttention``.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` returns
    ``(output, weights)``: weights ``(N, L, S)`` averaged over heads (``(N, heads, L,
    S)`` with ``average_attn_weights=False``), None unless ``need_weights``.
    Inputs are ``(L, N, E)`` (``(N, L, E)`` with ``batch_first``) or unbatched
    ``(L, E)``."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise UnsupportedOptionError(
                f"MultiheadAttention: embed_dim ({embed_dim}) must be a positive multiple of "
                f"num_heads ({num_heads})")
        dtype = dtype or "f32"
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.kdim = int(kdim) if kdim is not None else self.embed_dim
        self.vdim = int(vdim) if vdim is not None else self.embed_dim
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.head_dim = self.embed_dim // self.num_heads
        self.dropout, self.batch_first, self.add_zero_attn = float(dropout), bool(batch_first), bool(add_zero_attn)
        e = self.embed_dim
        xavier = lambda rows, cols: init.parameter(init.xavier_uniform_(zeros((rows, cols), dtype=dtype, device=device)))
        if self._qkv_same_embed_dim:
            self.in_proj_weight = xavier(3 * e, e)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = xavier(e, e)
            self.k_proj_weight = xavier(e, self.kdim)
            self.v_proj_weight = xavier(e, self.vdim)
        self.in_proj_bias = init.parameter(zeros((3 * e,), dtype=dtype, device=device)) if bias else None
        self.out_proj = Linear(e, e, bias=bias, device=device, dtype=dtype)
        if bias and self.out_proj.bias is not None:
            self.out_proj.bias = init.parameter(zeros((e,), dtype=dtype, device=device))
        if add_bias_kv:
            self.bias_k = init.parameter(init.xavier_normal_(zeros((1, 1, e), dtype=dtype, device=device)))
            self.bias_v = init.parameter(init.xavier_normal_(zeros((1, 1, e), dtype=dtype, device=device)))
        else:
            self.bias_k = self.bias_v = None

    def _projections(self, query, key, value):
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b.narrow(0, 0, e), b.narrow(0, e, e), b.narrow(0, 2 * e, e))
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w.narrow(0, 0, e), w.narrow(0, e, e), w.narrow(0, 2 * e, e)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.rank == 3
        if query.rank not in (2, 3) or key.rank != query.rank or value.rank != query.rank:
            raise ShapeMismatchError(
                f"MultiheadAttention: query {query.shape}, key {key.shape} and value {value.shape} "
                "must all be (L, N, E) / (N, L, E) with batch_first, or unbatched (L, E)")
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        L, N, E = query.shape
        S = key.shape[0]
        if E != self.embed_dim or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ShapeMismatchError(
                f"MultiheadAttention: feature sizes query {E}, key {key.shape[-1]}, value "
                f"{value.shape[-1]}; expected {self.embed_dim}, {self.kdim}, {self.vdim}")
        if key.shape[1] != N or value.shape[:2] != key.shape[:2]:
            raise ShapeMismatchError(
                f"MultiheadAttention: key {key.shape} and value {value.shape} must match the "
                f"query's batch {N} and each other's length")
        q, k, v = self._projections(query, key, value)  # (L|S, N, E)
        h, d = self.num_heads, self.head_dim
        mask = None
        if attn_mask is not None:
            mask = additive_mask(attn_mask, q.dtype)
            if mask.rank == 2:
                if mask.shape != (L, S):
                    raise ShapeMismatchError(f"attn_mask of shape {mask.shape}; expected {(L, S)}")
                mask = mask.reshape((1, 1, L, S))
            elif mask.shape == (N * h, L, S):
                mask = mask.reshape((N, h, L, S))
            else:
                raise ShapeMismatchError(f"attn_mask of shape {mask.shape}; expected {(L, S)} or {(N * h, L, S)}")
        elif is_causal:
            mask = causal_mask(L, q.dtype, q.device)[:, :S].reshape((1, 1, L, S)) if S >= L else None
            if mask is None:
                raise ShapeMismatchError("is_causal needs at least as many keys as queries")
        if self.bias_k is not None:
            k = Tensor.cat([k, self.bias_k.broadcast_as((1, N, self.embed_dim))], 0)
            v = Tensor.cat([v, self.bias_v.broadcast_as((1, N, self.embed_dim))], 0)
            S += 1
            mask = None if mask is None else _pad_last(mask, 1)
            key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask, 1)
        # (len, N, E) -> (N, h, len, d)
        heads = lambda t, n: t.reshape((n, N, h, d)).permute((1, 2, 0, 3))
        q, k, v = heads(q, L), heads(k, S), heads(v, S)
        if self.add_zero_attn:
            k = Tensor.cat([k, zeros((N, h, 1, d), dtype=k.dtype, device=k.device)], 2)
            v = Tensor.cat([v, zeros((N, h, 1, d), dtype=v.dtype, device=v.device)], 2)
            S += 1
            mask = None if mask is None else _pad_last(mask, 1)
            key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask, 1)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (N, S):
                raise ShapeMismatchError(
                    f"key_padding_mask of shape {key_padding_mask.shape}; expected {(N, S)}")
            pad = additive_mask(key_padding_mask, q.dtype).reshape((N, 1, 1, S))
            mask = pad if mask is None else mask.broadcast_add(pad)
        scores = q.matmul(k.transpose(2, 3).contiguous()) * (1.0 / math.sqrt(d))
        if mask is not None:
            scores = scores.broadcast_add(mask)
        weights = ops.softmax(scores, -1)
        attended = ops.dropout(weights, self.dropout, self.training) if self.dropout else weights
        out = attended.matmul(v)  # (N, h, L, d)
        out = out.permute((2, 0, 1, 3)).reshape((L, N, self.embed_dim))
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, (w if batched else w.squeeze(0))


def _pad_last(mask: Tensor, n: int) -> Tensor:
    """``mask`` with ``n`` attendable (zero / False) positions appended on its last dim."""
    extra = zeros(mask.shape[:-1] + (n,), dtype=mask.dtype, device=mask.device)
    return Tensor.cat([mask, extra], -1)
