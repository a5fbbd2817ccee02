"""``tl.optim``: the optimisers under PyTorch's module name (``torch.optim.AdamW`` ->
``tl.optim.AdamW``); they live in ``tallow.nn.optim``, candle-nn's place."""

from ..nn.optim import SGD, Adam, AdamW, Optimizer, RMSprop
from . import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
