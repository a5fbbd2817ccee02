"""The rest of ``torch.nn.functional``: padding, resampling, normalisations, distances,
losses and activations, composed from differentiable Tensor ops (so gradients and the
GPU come with them). Exported by ``tallow.nn.functional``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from ..errors import InvalidArgumentError, ShapeMismatchError
from ..grad_mode import no_grad
from ..shape import normalize_dim
from ..tensor_class import Tensor
from .ops import layer_norm as _layer_norm


def _ids(arr, like):
    return Tensor(np.ascontiguousarray(arr, dtype=np.int64), dtype=dt.i64, device=like.device)


def _reduce(per, reduction, op):
    if reduction == "mean":
        return per.mean()
    if reduction == "sum":
        return per.sum()
    if reduction == "none":
        return per
    raise InvalidArgumentError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# -- padding -----------------------------------------------------------------------------------

def _pad_ids(n, left, right, mode):
    """Source positions of a dim of size ``n`` padded by ``left``/``right`` (``mode``:
    reflect, replicate or circular)."""
    i = np.arange(-left, n + right)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        return np.mod(i, n)
    period = 2 * (n - 1)
    j = np.mod(np.abs(i), period) if period else np.zeros_like(i)
    return np.where(j >= n, period - j, j)


def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:
    """``F.pad``: ``pad`` gives (left, right) pairs from the last dim backwards;
    ``mode`` is 'constant' (``value``, default 0; negative pads crop), 'reflect',
    'replicate' or 'circular'."""
    if len(pad) % 2 or len(pad) // 2 > input.rank:
        raise ShapeMismatchError(
            f"pad: {len(pad)} pad sizes do not make (left, right) pairs for rank {input.rank}")
    out = input
    for k in range(len(pad) // 2):
        d = input.rank - 1 - k
        left, right = int(pad[2 * k]), int(pad[2 * k + 1])
        if mode == "constant":
            if left < 0:
                out = out.narrow(d, -left, out.shape[d] + left)
                left = 0
            if right < 0:
                out = out.narrow(d, 0, out.shape[d] + right)
                right = 0
            parts = []
            for size in (left,):
                if size:
                    parts.append(out.new_full(out.shape[:d] + (size,) + out.shape[d + 1:], value or 0))
            parts.append(out)
            if right:
                parts.append(out.new_full(out.shape[:d] + (right,) + out.shape[d + 1:], value or 0))
            out = out.cat(parts, d) if len(parts) > 1 else out
        elif mode in ("reflect", "replicate", "circular"):
            n = out.shape[d]
            if mode == "reflect" and (left >= n or right >= n):
                raise ShapeMismatchError(
                    f"pad: reflect padding ({left}, {right}) must be smaller than dim {d}'s size {n}")
            out = out.index_select(_ids(_pad_ids(n, left, right, mode), out), d)
        else:
            raise InvalidArgumentError(
                f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    return out


# -- encodings and resampling ------------------------------------------------------------------

def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``F.one_hot``: i64 rows with a 1 at each index (``num_classes`` = max + 1 by default)."""
    if not tensor.dtype.is_int:
        raise InvalidArgumentError(f"one_hot: expects an integer tensor, got {tensor.dtype}")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.nelement else 0
    classes = Tensor.arange(0, num_classes, dtype=tensor.dtype, device=tensor.device)
    return tensor.unsqueeze(-1).broadcast_as(tensor.shape + (num_classes,)).eq(
        classes.broadcast_as(tensor.shape + (num_classes,))).to_dtype(dt.i64)


def _source_coords(n_in, n_out, scale_factor, align_corners):
    """PyTorch's source coordinate of each output position (``area_pixel_compute_
    source_index``): the scale is ``1 / scale_factor`` when one was given."""
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    scale = 1.0 / scale_factor if scale_factor else n_in / n_out
    return np.maximum((i + 0.5) * scale - 0.5, 0.0)


def _resample(x, d, n_out, scale_factor, mode, align_corners):
    n_in = x.shape[d]
    if mode == "nearest":
        scale = 1.0 / scale_factor if scale_factor else n_in / n_out
        src = np.minimum(np.floor(np.arange(n_out) * scale).astype(np.int64), n_in - 1)
        return x.index_select(_ids(src, x), d)
    src = _source_coords(n_in, n_out, scale_factor, align_corners)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_shape = [1] * x.rank
    w_shape[d] = n_out
    w = Tensor((src - lo).reshape(w_shape), dtype=x.dtype, device=x.device)
    a, b = x.index_select(_ids(lo, x), d), x.index_select(_ids(hi, x), d)
    return a.broadcast_mul(1 - w) + b.broadcast_mul(w)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor=None,
                antialias: bool = False) -> Tensor:
    """``F.interpolate`` for (N, C, L) and (N, C, H, W) inputs: ``mode`` 'nearest',
    'linear' or 'bilinear' (``align_corners`` as PyTorch; candle's
    ``upsample_bilinear2d``), to ``size`` or by ``scale_factor``."""
    spatial = input.rank - 2
    if spatial not in (1, 2):
        raise ShapeMismatchError(f"interpolate: expects a 3-D or 4-D input, got shape {input.shape}")
    if mode not in ("nearest", "linear", "bilinear"):
        raise InvalidArgumentError(
            f"interpolate: mode {mode!r} is not supported; use 'nearest', 'linear' or 'bilinear'")
    if mode == "nearest" and align_corners is not None:
        raise InvalidArgumentError("interpolate: align_corners applies to linear modes only")
    if antialias:
        raise InvalidArgumentError("interpolate: antialias is not supported")
    if (size is None) == (scale_factor is None):
        raise InvalidArgumentError("interpolate: give exactly one of size and scale_factor")
    factors = [None] * spatial
    if size is not None:
        sizes = [size] * spatial if isinstance(size, int) else list(size)
    else:
        factors = [scale_factor] * spatial if not isinstance(scale_factor, (tuple, list)) \
            else list(scale_factor)
        sizes = [int(math.floor(n * f)) for n, f in zip(input.shape[2:], factors)]
        if recompute_scale_factor:
            factors = [None] * spatial
    out = input
    for k in range(spatial):
        out = _resample(out, 2 + k, sizes[k], factors[k], "nearest" if mode == "nearest" else "linear",
                        bool(align_corners))
    return out


# -- normalisations ----------------------------------------------------------------------------

def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``F.layer_norm``: normalise over the trailing ``normalized_shape`` dims."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.shape[input.rank - len(shape):] != shape:
        raise ShapeMismatchError(
            f"layer_norm: normalized_shape {shape} does not match the trailing dims of {input.shape}")
    n = int(np.prod(shape))
    flat = input.reshape(input.shape[:input.rank - len(shape)] + (n,))
    w = weight.reshape((n,)) if weight is not None else flat.new_ones((n,))
    b = bias.reshape((n,)) if bias is not None else None
    return _layer_norm(flat, w, b, eps).reshape(input.shape)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``F.group_norm``: normalise each of ``num_groups`` channel groups of (N, C, ...)."""
    n, c = input.shape[:2]
    if c % num_groups:
        raise ShapeMismatchError(f"group_norm: {c} channels do not split into {num_groups} groups")
    g = input.reshape((n, num_groups, -1))
    mean = g.mean(-1, keepdim=True)
    centred = g.broadcast_sub(mean)
    var = centred.sqr().mean(-1, keepdim=True)
    y = centred.broadcast_div((var + eps).sqrt()).reshape(input.shape)
    per_channel = (1, c) + (1,) * (input.rank - 2)
    if weight is not None:
        y = y.broadcast_mul(weight.reshape(per_channel))
    if bias is not None:
        y = y.broadcast_add(bias.reshape(per_channel))
    return y


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """``F.batch_norm`` over dim 1 of (N, C, ...): the batch's statistics when
    ``training`` (updating the running ones in place, the variance unbiased, as
    PyTorch), else the running ones."""
    c = input.shape[1]
    dims = tuple(d for d in range(input.rank) if d != 1)
    per_channel = (1, c) + (1,) * (input.rank - 2)
    if training:
        mean = input.mean(dims, keepdim=True)
        centred = input.broadcast_sub(mean)
        var = centred.sqr().mean(dims, keepdim=True)
        count = input.nelement // c
        if running_mean is not None and running_var is not None:
            with no_grad():
                new_mean = running_mean * (1 - momentum) + mean.detach().reshape((c,)) * momentum
                unbiased = var.detach().reshape((c,)) * (count / max(count - 1, 1))
                new_var = running_var * (1 - momentum) + unbiased * momentum
                running_mean.copy_(new_mean)
                running_var.copy_(new_var)
    else:
        if running_mean is None or running_var is None:
            raise InvalidArgumentError("batch_norm: evaluation needs running_mean and running_var")
        mean, var = running_mean.reshape(per_channel), running_var.reshape(per_channel)
        centred = input.broadcast_sub(mean)
    y = centred.broadcast_div((var + eps).sqrt())
    if weight is not None:
        y = y.broadcast_mul(weight.reshape(per_channel))
    if bias is not None:
        y = y.broadcast_add(bias.reshape(per_channel))
    return y


def _p_norm(x, p, dim, keepdim):
    if p == 2:
        return x.sqr().sum(dim, keepdim=keepdim).sqrt()
    if p == 1:
        return x.abs().sum(dim, keepdim=keepdim)
    if p == math.inf:
        return x.abs().amax(dim, keepdim=keepdim)
    return x.abs().pow(p).sum(dim, keepdim=keepdim).pow(1.0 / p)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``F.normalize``: ``input / max(||input||_p, eps)`` along ``dim``."""
    norm = _p_norm(input, p, dim, True).clamp(eps, None)
    return input.broadcast_div(norm)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``F.cosine_similarity``: the cosine of the angle between ``x1`` and ``x2`` along
    ``dim``, each norm held at least ``eps``."""
    shape = tuple(np.broadcast_shapes(x1.shape, x2.shape))
    x1, x2 = x1.broadcast_as(shape), x2.broadcast_as(shape)
    n1 = _p_norm(x1, 2, dim, True).clamp(eps, None)
    n2 = _p_norm(x2, 2, dim, True).clamp(eps, None)
    return (x1.broadcast_div(n1) * x2.broadcast_div(n2)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """``F.pairwise_distance``: ``||x1 - x2 + eps||_p`` along the last dim."""
    diff = x1.broadcast_sub(x2) + eps
    return _p_norm(diff, p, -1, keepdim)


# -- losses ------------------------------------------------------------------------------------

def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """``F.smooth_l1_loss``: ``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - beta / 2``."""
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    per = d.lt(beta).where_cond(d.sqr() * (0.5 / beta), d - 0.5 * beta)
    return _reduce(per, reduction, "smooth_l1_loss")


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """``F.kl_div``: ``target * (log(target) - input)`` with ``input`` log-probabilities
    (0 where target is 0); ``reduction='batchmean'`` divides the sum by the batch size."""
    if log_target:
        per = target.exp() * (target - input)
    else:
        zero = target.eq(0)
        log_t = target.masked_fill(zero, 1).log()
        per = (target * (log_t - input)).masked_fill(zero, 0)
    if reduction == "batchmean":
        return per.sum() / (input.shape[0] if input.rank else 1)
    return _reduce(per, reduction, "kl_div")


# -- patches -----------------------------------------------------------------------------------

def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``F.unfold`` (im2col): the (kh, kw) patches of (N, C, H, W) as (N, C*kh*kw, L)."""
    if input.rank != 4:
        raise ShapeMismatchError(f"unfold: expects a 4-D input, got shape {input.shape}")
    kh, kw = _pair(kernel_size)
    dh, dw = _pair(dilation)
    ph, pw = _pair(padding)
    sh, sw = _pair(stride)
    x = pad(input, (pw, pw, ph, ph)) if ph or pw else input
    n, c, h, w = x.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeMismatchError(f"unfold: kernel {(kh, kw)} does not fit the input {input.shape}")
    patches = []
    for i in range(kh):
        rows = x.index_select(_ids(i * dh + np.arange(oh) * sh, x), 2)
        for j in range(kw):
            patches.append(rows.index_select(_ids(j * dw + np.arange(ow) * sw, x), 3))
    return Tensor.stack(patches, 2).reshape((n, c * kh * kw, oh * ow))


# -- activations -------------------------------------------------------------------------------

def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``F.softplus``: ``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold``."""
    bx = input * beta
    smooth = bx.clamp(None, threshold).exp().log1p() / beta
    return bx.gt(threshold).where_cond(input, smooth)


def logsigmoid(input: Tensor) -> Tensor:
    """``F.logsigmoid``: ``log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|))``, stable."""
    return input.clamp(None, 0) - input.abs().neg().exp().log1p()


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``F.elu``: ``x`` where positive, else ``alpha * (exp(x) - 1)``."""
    return input.elu(alpha)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """``F.hardtanh``: values clamped to ``[min_val, max_val]``."""
    return input.clamp(min_val, max_val)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``F.glu``: the first half of ``dim`` times the sigmoid of the second."""
    d = normalize_dim(dim, input.rank, "glu")
    if input.shape[d] % 2:
        raise ShapeMismatchError(f"glu: dim {d} of {input.shape} must have an even size")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``F.mish``: ``x * tanh(softplus(x))``."""
    return input * softplus(input).tanh()


__all__ = ["batch_norm", "cosine_similarity", "elu", "glu", "group_norm", "hardtanh",
           "interpolate", "kl_div", "layer_norm", "logsigmoid", "mish", "normalize", "one_hot",
           "pad", "pairwise_distance", "smooth_l1_loss", "softplus", "unfold"]
