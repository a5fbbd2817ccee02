"""Neural-network ops: softmax, log-softmax, activations, normalisations.

The normalisations and the last-dim softmax are *optional fused ops* of a
backend (``softmax_last_dim``, ``rms_norm``, ``layer_norm``): when the backend
has the kernel and no input is tracked, one kernel runs; otherwise (a backend
without it, or a Var involved so gradients are needed) the op is composed from
Tensor primitives, which every backend has and autograd differentiates.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..checks import same_dtype_device
from ..errors import ShapeMismatchError, UnsupportedDTypeError
from ..op import Op
from ..shape import normalize_dim
from ..tensor_class import Tensor
from . import rotary as rotary_emb  # noqa: F401  (tl.nn.ops.rotary_emb.rope / rope_i)
from .fused import fused, has_fused  # noqa: F401  (re-exported: tl.nn.ops.fused / has_fused)



def _float_only(op, x):
    if not x.dtype.is_float:
        raise UnsupportedDTypeError(f"{op}: needs a float tensor, got {x.dtype}")


# -- softmax -------------------------------------------------------------------------------

def softmax(x: Tensor, dim=-1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``."""
    _float_only("softmax", x)
    d = normalize_dim(dim, x.rank, "softmax")
    if x.shape[d] == 0:  # empty rows: an empty result, as PyTorch gives
        return x.copy()
    if d == x.rank - 1 and not x._track:
        out = fused("softmax_last_dim", x)
        if out is not None:
            return out
    mx = x.max_keepdim(d).detach()
    e = x.broadcast_sub(mx).exp()
    return e.broadcast_div(e.sum_keepdim(d))


def softmax_last_dim(x: Tensor) -> Tensor:
    return softmax(x, -1)


def log_softmax(x: Tensor, dim=-1) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``dim`` (stable)."""
    _float_only("log_softmax", x)
    d = normalize_dim(dim, x.rank, "log_softmax")
    if x.shape[d] == 0:
        return x.copy()
    if x._track:
        # One recorded op (its rule is ``g - exp(out) * sum(g)``) over the value
        # computed untracked: backward walks one node instead of eight.
        y = log_softmax(x.detach(), d)
        return Tensor._wrap(y._storage, y._layout, Op("log_softmax", (x,), d))
    mx = x.max_keepdim(d)
    shifted = x.broadcast_sub(mx)
    return shifted.broadcast_sub(shifted.exp().sum_keepdim(d).log())


# -- activations ---------------------------------------------------------------------------

def silu(x: Tensor) -> Tensor:
    """SiLU (swish): ``x * sigmoid(x)``, element-wise."""
    return x.silu()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def gelu(x: Tensor) -> Tensor:
    """GELU with the tanh approximation."""
    return x.gelu()


def gelu_erf(x: Tensor, bias: Tensor | None = None) -> Tensor:
    """Exact GELU, ``0.5 x (1 + erf(x / sqrt 2))``; of ``x + bias`` when a ``bias`` of
    the last dim's size is given (one pass on backends that fuse it: the bias of the
    linear layer before the activation)."""
    if bias is not None:
        _check_norm("gelu_erf", x, bias)
        if not (x._track or bias._track):
            out = fused("bias_gelu_erf", x, bias._storage, bias._layout)
            if out is not None:
                return out
        x = x.broadcast_add(bias)
    if not x._track:
        out = fused("gelu_erf_fast", x)
        if out is not None:
            return out
    return x.gelu_erf()


def relu(x: Tensor) -> Tensor:
    """ReLU: ``max(x, 0)``, element-wise."""
    return x.relu()


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return x.relu() - (x.neg().relu() * float(negative_slope))


def swiglu(x: Tensor) -> Tensor:
    """``silu(a) * b`` for the two halves ``a, b`` of the last dim."""
    a, b = x.chunk(2, -1)
    return a.silu() * b


ACTIVATIONS = {
    "gelu": gelu_erf,          # Hugging Face's "gelu" is the exact (erf) GELU
    "gelu_new": gelu,
    "gelu_pytorch_tanh": gelu,
    "gelu_fast": gelu,
    "relu": relu,
    "silu": silu,
    "swish": silu,
    "sigmoid": sigmoid,
    "tanh": lambda x: x.tanh(),
}


def activation(name: str):
    """The activation function a Hugging Face config calls ``name``."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r} (known: {', '.join(sorted(ACTIVATIONS))})") from None


# -- normalisations --------------------------------------------------------------------------

def _check_norm(op, x, *params):
    _float_only(op, x)
    if x.rank == 0:
        raise ShapeMismatchError(f"{op}: needs rank >= 1")
    n = x.shape[-1]
    for p in params:
        if p.shape != (n,):
            raise ShapeMismatchError(
                f"{op}: weight of shape {p.shape} does not match the last dim {n} of {x.shape}")
    same_dtype_device(op, (x,) + params)


def rms_norm(x: Tensor, alpha: Tensor, eps: float) -> Tensor:
    """``x / sqrt(mean(x^2, -1) + eps) * alpha`` (half dtypes computed in f32)."""
    _check_norm("rms_norm", x, alpha)
    eps = float(eps)
    if not (x._track or alpha._track):
        out = fused("rms_norm", x, alpha._storage, alpha._layout, eps)
        if out is not None:
            return out
    dtype = x.dtype
    xf = x.to_dtype("f32") if dtype.size_in_bytes < 4 else x
    norm = xf.sqr().mean_keepdim(-1)
    y = xf.broadcast_div((norm + eps).sqrt())
    return y.to_dtype(dtype).broadcast_mul(alpha)


def layer_norm(x: Tensor, alpha: Tensor, beta: Tensor | None, eps: float) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * alpha + beta`` over the last dim (biased var)."""
    params = (alpha,) if beta is None else (alpha, beta)
    _check_norm("layer_norm", x, *params)
    eps = float(eps)
    if not any(t._track for t in (x,) + params):
        if beta is None:  # the backend kernel always takes a bias
            from ..creation import zeros

            b = zeros(alpha.shape, dtype=alpha.dtype, device=alpha.device)
        else:
            b = beta
        out = fused("layer_norm", x, alpha._storage, alpha._layout, b._storage, b._layout, eps)
        if out is not None:
            return out
    dtype = x.dtype
    xf = x.to_dtype("f32") if dtype.size_in_bytes < 4 else x
    mean = xf.mean_keepdim(-1)
    centred = xf.broadcast_sub(mean)
    # Centred again on what the rounding of the mean left (as the fused kernels do).
    centred = centred.broadcast_sub(centred.mean_keepdim(-1))
    var = centred.sqr().mean_keepdim(-1)
    y = centred.broadcast_div((var + eps).sqrt()).to_dtype(dtype).broadcast_mul(alpha)
    return y if beta is None else y.broadcast_add(beta)


def add_layer_norm(x: Tensor, residual: Tensor, alpha: Tensor, beta: Tensor | None, eps: float,
                   bias: Tensor | None = None) -> Tensor:
    """``layer_norm(x + bias + residual, alpha, beta, eps)``: a transformer's residual
    connection and its norm, in one pass per row on backends that fuse them (``bias``:
    the linear layer's, left out of ``x``; None for none)."""
    params = tuple(t for t in (alpha, beta, bias) if t is not None)
    _check_norm("add_layer_norm", x, *params)
    if residual.shape != x.shape:
        raise ShapeMismatchError(
            f"add_layer_norm: residual of shape {residual.shape} does not match {x.shape}")
    same_dtype_device("add_layer_norm", (x, residual) + params)
    eps = float(eps)
    if not any(t._track for t in (x, residual) + params):
        out = fused("add_layer_norm", x, residual._storage, residual._layout,
                    None if bias is None else bias._storage, None if bias is None else bias._layout,
                    alpha._storage, alpha._layout, None if beta is None else beta._storage,
                    None if beta is None else beta._layout, eps)
        if out is not None:
            return out
    y = x + residual if bias is None else x.broadcast_add(bias) + residual
    return layer_norm(y, alpha, beta, eps)


# -- misc --------------------------------------------------------------------------------------

def dropout(x: Tensor, p: float, train: bool = False) -> Tensor:
    """Zero elements with probability ``p`` and rescale the rest (identity when not training)."""
    if not train or p == 0:
        return x
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    from ..creation import rand

    keep = rand(x.shape, dtype=x.dtype, device=x.device).ge(p).to_dtype(x.dtype)
    return x * keep * (1.0 / (1.0 - p))




# -- attention --------------------------------------------------------------------------------

def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """``(b, hk, s, d)`` -> ``(b, hk * n_rep, s, d)``, each kv head repeated ``n_rep`` times."""
    if n_rep == 1:
        return x
    b, hk, s, d = x.shape
    return x.unsqueeze(2).broadcast_as((b, hk, n_rep, s, d)).reshape((b, hk * n_rep, s, d))


def attention_packed(q: Tensor, k: Tensor, v: Tensor, lengths, scale: float | None = None) -> Tensor:
    """Self-attention over sequences packed one after another, without padding.

    q, k, v ``(tokens, heads, dim)`` hold the tokens of several sequences in turn
    (``lengths``: the token count of each, summing to ``tokens``); each token attends
    to the tokens of its own sequence only. Returns ``(tokens, heads, dim_v)``. One
    kernel on backends that have it, otherwise ``scaled_dot_product_attention`` per
    sequence.
    """
    import math

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.rank != 3:
            raise ShapeMismatchError(f"attention_packed: {name} must be (tokens, heads, dim), got {t.shape}")
    lengths = tuple(int(n) for n in lengths)
    if any(n < 0 for n in lengths) or sum(lengths) != q.shape[0]:
        raise ShapeMismatchError(
            f"attention_packed: lengths {lengths[:8]}{'...' if len(lengths) > 8 else ''} do not "
            f"sum to the {q.shape[0]} tokens")
    if k.shape != q.shape or v.shape[:2] != q.shape[:2]:
        raise ShapeMismatchError(f"attention_packed: q {q.shape}, k {k.shape}, v {v.shape} do not fit")
    same_dtype_device("attention_packed", (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)
    if not any(t._track for t in (q, k, v)):
        out = fused("attention_packed", q, k._storage, k._layout, v._storage, v._layout,
                    lengths, scale, shape=q.shape[:2] + (v.shape[2],))
        if out is not None:
            return out
    from ..creation import cat

    if q.shape[0] == 0:
        return v.copy()
    parts, start = [], 0
    for n in lengths:
        if n:
            qi, ki, vi = (t.narrow(0, start, n).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            parts.append(_attention(qi, ki, vi, None, scale)
                         .squeeze(0).transpose(0, 1))
        start += n
    return cat(parts, 0)


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float | None,
               dropout_p: float = 0.0) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` for rank-4 q ``(b, h, sq, d)``, k, v
    ``(b, hk, sk, d)`` (``h`` a multiple of ``hk``) and an additive float ``mask``;
    attention weights dropped with probability ``dropout_p``."""
    import math

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.rank != 4:
            raise ShapeMismatchError(f"attention: {name} must be (batch, heads, seq, dim), got {t.shape}")
    b, h, sq, d = q.shape
    hk = k.shape[1]
    if k.shape[0] != b or v.shape[:3] != k.shape[:3] or k.shape[3] != d or h % hk:
        raise ShapeMismatchError(f"attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit")
    tensors = (q, k, v) if mask is None else (q, k, v, mask)
    same_dtype_device("attention", tensors)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if mask is not None:
        from ..shape import broadcast_shapes

        broadcast_shapes(mask.shape, (b, h, sq, k.shape[2]), "attention mask")
    if not any(t._track for t in tensors) and not dropout_p:
        out = fused("attention", q, k._storage, k._layout, v._storage, v._layout,
                    None if mask is None else mask._storage,
                    None if mask is None else mask._layout, scale,
                    shape=(b, h, sq, v.shape[3]))
        if out is not None:
            return out
    k, v = repeat_kv(k, h // hk), repeat_kv(v, h // hk)
    scores = q.matmul(k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.broadcast_add(mask)
    weights = softmax(scores, -1)
    if dropout_p:
        weights = weights * 0.0 if dropout_p >= 1 else dropout(weights, dropout_p, True)
    return weights.matmul(v)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention``: ``softmax(q k^T * scale +
    bias) v``, with torch's arguments and values.

    query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``; with rank 4
    ``(batch, heads, seq, dim)`` the key/value heads may be fewer than the query heads
    (grouped-query attention: each serves ``heads / kv_heads`` query heads).
    ``attn_mask`` broadcasts to ``(..., L, S)``: a bool mask says where to attend (True
    = attend; a row with no True gives zeros, as torch), a float mask of the query's
    dtype is added to the scores; integer masks are refused (torch refuses them too:
    a 0/1 keep-mask is ``mask.bool()``). ``is_causal``: query ``i`` attends to keys
    ``0..i`` (a lower-triangular mask, aligned top-left; combined with ``attn_mask``).
    ``dropout_p`` zeroes attention weights with that probability (and scales the rest,
    as torch does whenever it is positive). ``scale`` defaults to ``1 / sqrt(E)``.
    """
    from ..creation import where
    from ..errors import DTypeMismatchError

    q, k, v = query, key, value
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ShapeMismatchError(
            f"attention: query {q.shape}, key {k.shape} and value {v.shape} must have one "
            "rank of at least 2 (..., seq, dim)")
    L, S = q.shape[-2], k.shape[-2]
    keep = None
    bias = None
    if attn_mask is not None:
        if attn_mask.device != q.device:
            attn_mask = attn_mask.to_device(q.device)
        if getattr(attn_mask.dtype, "is_bool", False):
            keep = attn_mask
        elif attn_mask.dtype.is_float and attn_mask.dtype is q.dtype:
            bias = attn_mask
        else:
            raise DTypeMismatchError(
                f"attention: attn_mask must be bool (True = attend) or a float mask of the "
                f"query's dtype {q.dtype} (added to the scores), got {attn_mask.dtype}; a 0/1 "
                "keep-mask is mask.bool()")
    if is_causal:
        causal = Tensor(np.tril(np.ones((L, S), np.bool_)), device=q.device)
        keep = causal if keep is None else keep.logical_and(causal)
    if keep is not None:
        # The dtype's lowest finite value, not -inf: a row with nowhere to attend stays
        # finite (no NaN reaches the gradients); it is set to zeros below.
        # (Half of it: the scores added to it stay finite in f16 too.)
        low = float(np.finfo(np.float32 if q.dtype is dt.bf16 else q.dtype.np).min) / 2
        bias = where(keep, 0.0, low).to_dtype(q.dtype)
    lead = q.shape[:-2]
    if q.rank == 4:
        out = _attention(q, k, v, bias, scale, dropout_p)
    else:
        # One (batch, 1, seq, dim) problem for any leading dims.
        n = 1
        for x in lead:
            n *= x
        q4, k4, v4 = (t.broadcast_as(lead + t.shape[-2:]).reshape((n, 1) + t.shape[-2:])
                      for t in (q, k, v))
        b4 = None if bias is None else bias.broadcast_as(lead + (L, S)).reshape((n, 1, L, S))
        out = _attention(q4, k4, v4, b4, scale, dropout_p).reshape(lead + (L, v.shape[-1]))
    if keep is not None:
        # A query row with nowhere to attend gives zeros (torch), not an average.
        out = where(keep.any(-1, keepdim=True), out, 0.0)
    return out
