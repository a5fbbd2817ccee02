"""Neural-network building blocks (candle-nn): modules, weights, ops, losses, optimisers."""

from . import init, loss, ops, optim
from . import rotary as rotary_emb
from .container import ModuleDict, ModuleList, Sequential
from .embedding import Embedding
from .init import Init
from .linear import Identity, Linear, linear
from .module import Module
from .norm import LayerNorm, RmsNorm
# candle-pyo3 has these two at ``candle.nn`` level (its other functions: tl.functional).
from .ops import silu, softmax
from .optim import SGD, AdamW
from .var_builder import MissingTensorError, VarBuilder
from .var_map import VarMap

__all__ = [
    "Module", "Linear", "Identity", "Embedding", "LayerNorm", "RmsNorm", "Sequential", "ModuleList",
    "ModuleDict",
    "VarBuilder", "VarMap", "Init", "MissingTensorError", "SGD", "AdamW", "linear",
    "ops", "loss", "optim", "init", "rotary_emb", "silu", "softmax",
]
