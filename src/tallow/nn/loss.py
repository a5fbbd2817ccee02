"""Losses with PyTorch's arguments (candle-nn's ``loss`` names kept).

Every loss takes ``reduction`` = ``'mean'`` (the default, as PyTorch and candle),
``'sum'`` or ``'none'``. Class-index losses take ``(N, C)`` scores with ``(N,)``
integer targets, or ``(N, C, d1, ...)`` with ``(N, d1, ...)``.
"""

from __future__ import annotations

from ..creation import full, zeros
from ..errors import ShapeMismatchError, UnsupportedDTypeError
from ..layout import Layout
from ..op import Op
from ..tensor_class import Tensor
from .errors import UnsupportedOptionError
from .module import Module
from .ops import log_softmax

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op, reduction):
    if reduction not in _REDUCTIONS:
        raise UnsupportedOptionError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _reduce(per: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per.mean_all()
    if reduction == "sum":
        return per.sum_all()
    return per


def _classes_last(op, inp: Tensor, target: Tensor):
    """``inp`` (N, C, d...) and ``target`` (N, d...) as (M, C) and (M,), and the
    per-element shape (N, d...)."""
    if inp.rank < 2:
        raise ShapeMismatchError(f"{op}: input must be (batch, classes, ...), got {inp.shape}")
    n, c = inp.shape[:2]
    if not target.dtype.is_int:
        raise UnsupportedDTypeError(f"{op}: target must hold integer class ids, got {target.dtype}")
    expected = (n,) + tuple(inp.shape[2:])
    if tuple(target.shape) != expected:
        raise ShapeMismatchError(f"{op}: target must be {expected}, got {target.shape}")
    if inp.rank > 2:
        perm = (0,) + tuple(range(2, inp.rank)) + (1,)
        inp = inp.permute(*perm).reshape((-1, c))
        target = target.reshape((-1,))
    return inp, target, expected


def _valid_mask(target: Tensor, ignore_index: int):
    """1 where the target counts, 0 at ``ignore_index`` (None when nothing is ignored),
    and the targets with ignored ids replaced by 0 (safe to gather)."""
    if target.dtype.name.startswith("u") and ignore_index < 0:
        return None, target  # an unsigned target cannot hold a negative index
    keep = target.ne(ignore_index)
    safe = keep.where_cond(target, zeros(target.shape, dtype=target.dtype, device=target.device))
    return keep, safe


def nll(inp: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
        reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities ``inp`` at the ``target`` classes
    (PyTorch's ``nll_loss``): with ``weight`` (per class) the mean is the weighted mean;
    targets equal to ``ignore_index`` count for nothing."""
    _check_reduction("nll", reduction)
    logp, tgt, out_shape = _classes_last("nll", inp, target)
    keep, safe = _valid_mask(tgt, ignore_index)
    if reduction != "none" and logp._track and not (weight is not None and weight._track):
        return _nll_recorded(logp, safe, weight, keep, reduction)
    picked = logp.gather(safe.unsqueeze(1), 1).squeeze(1).neg()
    w = None
    if weight is not None:
        w = weight.to_dtype(logp.dtype).index_select(safe, 0)  # weight of each target's class
    if keep is not None:
        k = keep.to_dtype(logp.dtype)
        w = k if w is None else w * k
    per = picked if w is None else picked * w
    if reduction == "none":
        return per.reshape(out_shape)
    if reduction == "sum" or w is None:
        return _reduce(per, reduction)
    return per.sum_all() / w.sum_all()


def _nll_recorded(logp: Tensor, safe: Tensor, weight, keep, reduction: str) -> Tensor:
    """The reduced nll of a tracked ``logp`` (M, C) as one recorded op: the loss is
    ``sum_i coef_i * logp[i, safe_i]`` with ``coef = -w / sum(w)`` for the mean (``-w``
    for the sum), ``w`` the class weight times the keep mask (ones by default)."""
    ids = safe.to_dtype("i64").unsqueeze(1)
    w = None
    if weight is not None:
        w = weight.to_dtype(logp.dtype).index_select(safe, 0)
    if keep is not None:
        k = keep.to_dtype(logp.dtype)
        w = k if w is None else w * k
    if w is None:
        m = ids.shape[0]
        coef = full((m,), -1.0 / m if reduction == "mean" else -1.0, dtype=logp.dtype,
                    device=logp.device)
    else:
        coef = w.neg() if reduction == "sum" else w.neg().broadcast_div(w.sum_all())
    coef = coef.unsqueeze(1)
    picked = logp.detach().gather(ids, 1)
    value = (picked * coef).sum_all()
    return Tensor._wrap(value._storage, value._layout, Op("nll", (logp,), (ids, coef)))


def _cross_entropy_fused(inp: Tensor, target: Tensor, ignore_index: int, mean: bool):
    """The backend's one-pass cross entropy of (N, C) logits at (N,) class ids, recorded
    as one op whose gradient was made in the same pass; None where the backend has no
    such kernel or an id is out of range (the composed path then answers)."""
    if target.shape[0] != inp.shape[0]:
        return None  # the composed path names the mismatch
    if target._storage.bdev is not inp._storage.bdev:
        return None
    try:
        loss, grad = inp._storage.cross_entropy_ids(
            inp._layout, target._storage, target._layout, int(ignore_index), mean, inp._track)
    except NotImplementedError:
        return None
    lay = Layout.contiguous_of(())
    if grad is None:
        return Tensor._wrap(loss, lay)
    g = Tensor._wrap(grad, Layout.contiguous_of(inp._layout.shape))
    return Tensor._wrap(loss, lay, Op("cross_entropy", (inp,), g))


def cross_entropy(inp: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits ``inp`` (``log_softmax`` over dim 1, then ``nll``), as
    PyTorch's: ``target`` holds class ids, or class probabilities of ``inp``'s shape;
    ``label_smoothing`` mixes the target with the uniform distribution."""
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise UnsupportedOptionError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if inp.rank < 2:
        raise ShapeMismatchError(f"cross_entropy: input must be (batch, classes, ...), got {inp.shape}")
    if (weight is None and label_smoothing == 0 and reduction != "none" and inp.rank == 2
            and target.rank == 1 and target.dtype.is_int and inp.dtype.is_float):
        loss = _cross_entropy_fused(inp, target, ignore_index, reduction == "mean")
        if loss is not None:
            return loss
    logp = log_softmax(inp, 1)
    c = inp.shape[1]
    w_view = None
    if weight is not None:
        w_view = weight.to_dtype(logp.dtype).reshape((1, c) + (1,) * (inp.rank - 2))
    if target.dtype.is_float:  # class probabilities
        if tuple(target.shape) != tuple(inp.shape):
            raise ShapeMismatchError(
                f"cross_entropy: probability targets must have the input's shape {inp.shape}, got {target.shape}")
        t = target if label_smoothing == 0 else target * (1.0 - label_smoothing) + label_smoothing / c
        prod = logp * t if w_view is None else logp.broadcast_mul(w_view) * t
        per = prod.sum_keepdim(1).squeeze(1).neg()
        return _reduce(per, reduction)
    loss = nll(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0:
        return loss
    # PyTorch's smoothing term: the (weighted) sum of -log p over the classes, divided
    # by C, reduced like the nll term (its mean divides by the same total weight).
    smooth = (logp if w_view is None else logp.broadcast_mul(w_view)).sum_keepdim(1).squeeze(1).neg()
    flat_t = target.reshape((-1,))
    keep, safe = _valid_mask(flat_t, ignore_index)
    smooth = smooth.reshape((-1,))
    if keep is not None:
        smooth = smooth * keep.to_dtype(smooth.dtype)
    if reduction == "none":
        smooth = smooth.reshape(target.shape)
    elif reduction == "sum":
        smooth = smooth.sum_all()
    else:
        if weight is not None:
            tw = weight.to_dtype(logp.dtype).index_select(safe, 0)
            denom = (tw if keep is None else tw * keep.to_dtype(tw.dtype)).sum_all()
        else:
            denom = float(flat_t.shape[0]) if keep is None else keep.to_dtype(logp.dtype).sum_all()
        smooth = smooth.sum_all() / denom
    return loss * (1.0 - label_smoothing) + smooth * (label_smoothing / c)


def _same_shape(op, inp, target):
    if tuple(inp.shape) != tuple(target.shape):
        raise ShapeMismatchError(f"{op}: shapes differ, {inp.shape} and {target.shape}")


def mse(inp: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean squared error (PyTorch's ``mse_loss``)."""
    _check_reduction("mse", reduction)
    _same_shape("mse", inp, target)
    return _reduce((inp - target).sqr(), reduction)


def l1(inp: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean absolute error (PyTorch's ``l1_loss``)."""
    _check_reduction("l1", reduction)
    _same_shape("l1", inp, target)
    return _reduce((inp - target).abs(), reduction)


def binary_cross_entropy_with_logits(inp: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """``-(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)))``, computed stably as
    ``(1 - t) x + (1 + (pw - 1) t) (log(1 + exp(-|x|)) + max(-x, 0))`` (PyTorch's form;
    ``pw`` = ``pos_weight``, broadcast over the last dim; ``weight`` scales each element)."""
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    _same_shape("binary_cross_entropy_with_logits", inp, target)
    softplus_neg = (inp.abs().neg().exp() + 1.0).log() + inp.neg().relu()  # -log sigmoid(x)
    if pos_weight is None:
        per = (1.0 - target) * inp + softplus_neg
    else:
        lw = target.broadcast_mul(pos_weight - 1.0) + 1.0
        per = (1.0 - target) * inp + lw * softplus_neg
    if weight is not None:
        per = per.broadcast_mul(weight)
    return _reduce(per, reduction)


def binary_cross_entropy_with_logit(inp: Tensor, target: Tensor) -> Tensor:
    """candle-nn's name: the mean of ``binary_cross_entropy_with_logits``."""
    return binary_cross_entropy_with_logits(inp, target)


# PyTorch's functional names.
nll_loss = nll
mse_loss = mse
l1_loss = l1


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        _check_reduction(type(self).__name__, reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """``CrossEntropyLoss(weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0)``."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        if weight is not None:
            self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = int(ignore_index), float(label_smoothing)

    def forward(self, inp, target):
        return cross_entropy(inp, target, self._buffers.get("weight"), self.ignore_index,
                             self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    """``NLLLoss(weight=None, ignore_index=-100, reduction='mean')``."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        if weight is not None:
            self.register_buffer("weight", weight)
        self.ignore_index = int(ignore_index)

    def forward(self, inp, target):
        return nll(inp, target, self._buffers.get("weight"), self.ignore_index, self.reduction)


class MSELoss(_Loss):
    """``MSELoss(reduction='mean')``."""

    def forward(self, inp, target):
        return mse(inp, target, self.reduction)


class L1Loss(_Loss):
    """``L1Loss(reduction='mean')``."""

    def forward(self, inp, target):
        return l1(inp, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """``BCEWithLogitsLoss(weight=None, reduction='mean', pos_weight=None)``."""

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__(reduction)
        if weight is not None:
            self.register_buffer("weight", weight)
        if pos_weight is not None:
            self.register_buffer("pos_weight", pos_weight)

    def forward(self, inp, target):
        return binary_cross_entropy_with_logits(inp, target, self._buffers.get("weight"),
                                                self.reduction, self._buffers.get("pos_weight"))
