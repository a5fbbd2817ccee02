"""Neural-network building blocks (candle-nn, with PyTorch's layer set and spellings):
modules, layers, losses, optimisers, learning-rate schedulers, weights.

A layer built from scratch (``tl.nn.Linear(2, 2)``) holds trainable ``tl.Var``
parameters; one built from loaded weights (``VarBuilder``, ``from_pretrained``,
GGUF) holds plain tensors, so inference records no graph.
``Module.requires_grad_(flag)`` switches between the two.
"""

from . import init, kv_cache, loss, lr_scheduler, ops, optim, utils
from . import functional
from . import rotary as rotary_emb
from .attention import MultiheadAttention
from .parameter import Parameter
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .transformer import (
    Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
)
from .activation import GELU, Dropout, Flatten, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .batchnorm import BatchNorm1d, BatchNorm2d
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .embedding import Embedding
from .errors import OptimizerVariablesError, UnsupportedOptionError
from .init import Init
from .kv_cache import KvCache, RotatingKvCache
from .linear import Identity, Linear, linear
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .module import Module
from .norm import GroupNorm, LayerNorm, RmsNorm, RMSNorm
# candle-pyo3 has these two at ``candle.nn`` level (its other functions: tl.functional).
from .ops import silu, softmax
from .optim import SGD, Adam, AdamW, Optimizer, RMSprop
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .utils import clip_grad_norm_, clip_grad_value_
from .var_builder import MissingTensorError, VarBuilder
from .var_map import VarMap

__all__ = [
    "Module", "Linear", "Identity", "Embedding", "LayerNorm", "RmsNorm", "RMSNorm", "GroupNorm",
    "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "ReLU", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Flatten",
    "Dropout", "Sequential", "ModuleList", "ModuleDict",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss",
    "VarBuilder", "VarMap", "Init", "MissingTensorError", "UnsupportedOptionError",
    "OptimizerVariablesError", "Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "linear",
    "clip_grad_norm_", "clip_grad_value_",
    "ops", "loss", "optim", "lr_scheduler", "init", "utils", "functional", "rotary_emb",
    "silu", "softmax", "Parameter", "MultiheadAttention", "Transformer", "TransformerEncoder",
    "TransformerEncoderLayer", "TransformerDecoder", "TransformerDecoderLayer",
    "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell", "kv_cache", "KvCache",
    "RotatingKvCache",
]
