"""Losses (candle-nn's ``loss``): every one averages over the batch."""

from __future__ import annotations

from ..errors import ShapeMismatchError, UnsupportedDTypeError
from ..tensor_class import Tensor
from .ops import log_softmax


def nll(inp: Tensor, target: Tensor) -> Tensor:
    """Negative log likelihood: ``inp`` (N, C) log-probabilities, ``target`` (N,) class ids."""
    if inp.rank != 2:
        raise ShapeMismatchError(f"nll: inp must be (batch, classes), got {inp.shape}")
    if target.rank != 1 or target.shape[0] != inp.shape[0]:
        raise ShapeMismatchError(f"nll: target must be ({inp.shape[0]},), got {target.shape}")
    if not target.dtype.is_int:
        raise UnsupportedDTypeError(f"nll: target must hold integer class ids, got {target.dtype}")
    picked = inp.gather(target.unsqueeze(1), 1)
    return picked.sum_all() * (-1.0 / inp.shape[0])


def cross_entropy(inp: Tensor, target: Tensor) -> Tensor:
    """``nll(log_softmax(inp, 1), target)`` for logits ``inp`` (N, C)."""
    if inp.rank != 2:
        raise ShapeMismatchError(f"cross_entropy: inp must be (batch, classes), got {inp.shape}")
    return nll(log_softmax(inp, 1), target)


def mse(inp: Tensor, target: Tensor) -> Tensor:
    """Mean squared error over every element."""
    if inp.shape != target.shape:
        raise ShapeMismatchError(f"mse: shapes differ, {inp.shape} and {target.shape}")
    return (inp - target).sqr().mean_all()


def binary_cross_entropy_with_logit(inp: Tensor, target: Tensor) -> Tensor:
    """Mean of ``-(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)))``, computed stably as
    ``max(x, 0) - x t + log(1 + exp(-|x|))``."""
    if inp.shape != target.shape:
        raise ShapeMismatchError(
            f"binary_cross_entropy_with_logit: shapes differ, {inp.shape} and {target.shape}")
    per = inp.relu() - inp * target + (inp.abs().neg().exp() + 1.0).log()
    return per.mean_all()
