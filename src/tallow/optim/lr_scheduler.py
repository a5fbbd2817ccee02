"""``tl.optim.lr_scheduler``: the learning-rate schedulers under PyTorch's module name
(defined in ``tallow.nn.lr_scheduler``)."""

from ..nn.lr_scheduler import CosineAnnealingLR, LinearLR, LRScheduler, OneCycleLR, StepLR

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LinearLR", "OneCycleLR"]
