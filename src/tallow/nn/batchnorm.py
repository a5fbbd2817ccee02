"""BatchNorm1d and BatchNorm2d, with PyTorch's running statistics.

In training mode a batch is normalised with its own mean and biased variance, and
the running statistics move towards the batch's (the unbiased variance) by
``momentum`` (``None``: a cumulative average over ``num_batches_tracked``); in
eval mode the running statistics are used. ``weight`` (ones) and ``bias`` (zeros)
are trainable ``Var``s; ``running_mean``, ``running_var`` and
``num_batches_tracked`` are buffers (in ``state_dict``, not in ``parameters()``),
updated without being recorded.
"""

from __future__ import annotations

import math

from ..creation import full, ones, zeros
from ..dtype import i64
from ..errors import ShapeMismatchError
from ..tensor_class import Tensor
from .init import parameter
from .module import Module


class _BatchNorm(Module):
    _ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.num_features = int(num_features)
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        dtype = dtype or "f32"
        c = (self.num_features,)
        self.weight = parameter(ones(c, dtype=dtype, device=device)) if affine else None
        self.bias = parameter(zeros(c, dtype=dtype, device=device)) if affine else None
        if self.track_running_stats:
            self.register_buffer("running_mean", zeros(c, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(c, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", full((), 0, dtype=i64, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            rm = self.running_mean
            self.running_mean = zeros(rm.shape, dtype=rm.dtype, device=rm.device)
            self.running_var = ones(rm.shape, dtype=rm.dtype, device=rm.device)
            self.num_batches_tracked = full((), 0, dtype=i64, device=rm.device)

    def _check_input(self, x: Tensor) -> None:
        if x.rank not in self._ranks or x.shape[1] != self.num_features:
            raise ShapeMismatchError(
                f"{type(self).__name__}: expected rank {' or '.join(map(str, self._ranks))} "
                f"with {self.num_features} channels in dim 1, got {x.shape}")

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        per_channel = (1, self.num_features) + (1,) * (x.rank - 2)
        dims = (0,) + tuple(range(2, x.rank))
        if self.training or not self.track_running_stats:
            n = math.prod(x.shape) // self.num_features
            if self.training and n <= 1:
                raise ShapeMismatchError(
                    f"{type(self).__name__}: expected more than 1 value per channel when "
                    f"training, got input of shape {x.shape}")
            mean = x.mean_keepdim(dims)
            centred = x.broadcast_sub(mean)
            var = centred.sqr().mean_keepdim(dims)
            if self.training and self.track_running_stats:
                self._update_running_stats(mean.detach().reshape((self.num_features,)),
                                           var.detach().reshape((self.num_features,)), n)
            y = centred.broadcast_div((var + self.eps).sqrt())
        else:
            mean = self.running_mean.reshape(per_channel)
            std = (self.running_var + self.eps).sqrt().reshape(per_channel)
            y = x.broadcast_sub(mean).broadcast_div(std)
        if self.weight is not None:
            y = y.broadcast_mul(self.weight.reshape(per_channel)).broadcast_add(
                self.bias.reshape(per_channel))
        return y

    def _update_running_stats(self, mean: Tensor, var: Tensor, n: int) -> None:
        if self.momentum is None:  # a cumulative average needs the count itself
            count = int(self.num_batches_tracked.item()) + 1
            self.num_batches_tracked = full((), count, dtype=i64, device=mean.device)
            f = 1.0 / count
        else:  # no read back (on a GPU, no wait for the queue)
            self.num_batches_tracked = self.num_batches_tracked + 1
            f = self.momentum
        unbiased = var * (n / (n - 1))
        self.running_mean = self.running_mean * (1.0 - f) + mean.to_dtype(self.running_mean.dtype) * f
        self.running_var = self.running_var * (1.0 - f) + unbiased.to_dtype(self.running_var.dtype) * f

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """``BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True)`` over ``(batch, channels)`` or ``(batch, channels, length)``."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """``BatchNorm2d(num_features, eps=1e-5, momentum=0.1, affine=True,
    track_running_stats=True)`` over ``(batch, channels, h, w)``."""

    _ranks = (4,)
