"""``tl.optim.lr_scheduler``: the learning-rate schedulers under PyTorch's module name
(defined in ``tallow.nn.lr_scheduler``)."""

from ..nn.lr_scheduler import (ConstantLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,
                               ExponentialLR, LambdaLR, LinearLR, LRScheduler,
                               MultiplicativeLR, MultiStepLR, OneCycleLR, ReduceLROnPlateau,
                               SequentialLR, StepLR)

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
           "ConstantLR", "LinearLR", "ExponentialLR", "CosineAnnealingLR", "SequentialLR",
           "ReduceLROnPlateau", "OneCycleLR", "CosineAnnealingWarmRestarts"]
