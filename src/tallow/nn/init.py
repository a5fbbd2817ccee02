"""Initialisation schemes (PyTorch's defaults and candle-nn's ``Init``)."""

from __future__ import annotations

import math

import numpy as np

from ..creation import eye, full, rand, randn
from ..grad_mode import no_grad
from ..tensor_class import Tensor


class Init:
    """How a new variable is filled: a constant, uniform or normal values, or Kaiming."""

    def __init__(self, kind: str, **params):
        self.kind = kind
        self.params = params

    @staticmethod
    def const(value: float) -> "Init":
        return Init("const", value=float(value))

    @staticmethod
    def uniform(low: float, high: float) -> "Init":
        return Init("uniform", low=float(low), high=float(high))

    @staticmethod
    def normal(mean: float = 0.0, std: float = 1.0) -> "Init":
        return Init("normal", mean=float(mean), std=float(std))

    @staticmethod
    def kaiming_uniform(fan_in_dim: int = 1, gain: float = math.sqrt(2.0)) -> "Init":
        return Init("kaiming_uniform", gain=gain)

    @staticmethod
    def kaiming_normal(gain: float = math.sqrt(2.0)) -> "Init":
        return Init("kaiming_normal", gain=gain)

    def tensor(self, shape, dtype="f32", device=None):
        shape = tuple(shape)
        if self.kind == "const":
            return full(shape, self.params["value"], dtype=dtype, device=device)
        if self.kind == "uniform":
            return rand(shape, low=self.params["low"], high=self.params["high"], dtype=dtype,
                        device=device)
        if self.kind == "normal":
            return randn(shape, mean=self.params["mean"], std=self.params["std"], dtype=dtype,
                         device=device)
        fan_in = fan_in_of(shape)
        std = self.params["gain"] / math.sqrt(max(fan_in, 1))
        if self.kind == "kaiming_uniform":
            bound = math.sqrt(3.0) * std
            return rand(shape, low=-bound, high=bound, dtype=dtype, device=device)
        if self.kind == "kaiming_normal":
            return randn(shape, mean=0.0, std=std, dtype=dtype, device=device)
        raise ValueError(f"unknown init {self.kind!r}")

    def __repr__(self):
        return f"Init.{self.kind}({', '.join(f'{k}={v}' for k, v in self.params.items())})"


ZERO = Init.const(0.0)
ONE = Init.const(1.0)
DEFAULT_KAIMING_NORMAL = Init.kaiming_normal()
DEFAULT_KAIMING_UNIFORM = Init.kaiming_uniform()


def fan_in_of(shape) -> int:
    """Inputs per output unit: dim 1 times the receptive field (PyTorch's rule)."""
    if len(shape) < 2:
        return shape[0] if shape else 1
    n = shape[1]
    for d in shape[2:]:
        n *= d
    return n


def parameter(t):
    """A new layer's parameter: a ``Var``, so a layer built from scratch is trainable.

    (Layers built from loaded weights keep what they are given: plain tensors from
    files record no graph; see ``Module.requires_grad_``.)
    """
    from ..var import Var

    return Var(t)


def uniform_fan_in(shape, fan_in: int, dtype="f32", device=None):
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default for the weights and
    biases of Linear and the convolutions (``kaiming_uniform_(a=sqrt(5))`` reduces to
    this bound for the weight)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return rand(tuple(shape), low=-bound, high=bound, dtype=dtype, device=device)


def linear_weight(in_features: int, out_features: int, dtype="f32", device=None):
    """PyTorch's ``nn.Linear`` weight: ``U(-1/sqrt(in), 1/sqrt(in))``.

    (kaiming_uniform with a = sqrt(5) reduces to this bound.)
    """
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    return rand((out_features, in_features), low=-bound, high=bound, dtype=dtype, device=device)


def linear_bias(in_features: int, out_features: int, dtype="f32", device=None):
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    return rand((out_features,), low=-bound, high=bound, dtype=dtype, device=device)


# -- PyTorch's in-place initialisers (``nn.init.xavier_uniform_(layer.weight)``) -------------

def calculate_gain(nonlinearity: str, param=None) -> float:
    """PyTorch's recommended gain for a nonlinearity."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                        "conv_transpose2d", "conv_transpose3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"negative_slope {slope} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for d in shape[2:]:
        receptive *= d
    return shape[1] * receptive, shape[0] * receptive


def _fill(tensor, values):
    """Write ``values`` into ``tensor`` in place, outside the graph (PyTorch's
    initialisers run under ``no_grad``); returns ``tensor``."""
    with no_grad():
        tensor.copy_(values)
    return tensor


def uniform_(tensor, a: float = 0.0, b: float = 1.0):
    return _fill(tensor, rand(tensor.shape, low=a, high=b, dtype=tensor.dtype, device=tensor.device))


def normal_(tensor, mean: float = 0.0, std: float = 1.0):
    return _fill(tensor, randn(tensor.shape, mean=mean, std=std, dtype=tensor.dtype, device=tensor.device))


def trunc_normal_(tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0):
    """Normal values redrawn until they lie in ``[a, b]`` (PyTorch's truncated normal,
    by the inverse CDF of a uniform draw between the bounds' CDFs)."""
    from scipy.special import erfinv  # loaded on first use: import tallow stays light

    cdf = lambda x: (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = rand(tuple(tensor.shape), low=2 * lo - 1, high=2 * hi - 1, dtype="f64").numpy()
    values = np.clip(erfinv(u) * (std * math.sqrt(2.0)) + mean, a, b)
    return _fill(tensor, Tensor.from_numpy(values).to_dtype(tensor.dtype).to_device(tensor.device))


def constant_(tensor, val: float):
    return _fill(tensor, full(tensor.shape, val, dtype=tensor.dtype, device=tensor.device))


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    if len(tensor.shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    n, m = tensor.shape
    square = eye(max(n, m), dtype=tensor.dtype, device=tensor.device)
    return _fill(tensor, square.narrow(0, 0, n).narrow(1, 0, m))


def xavier_uniform_(tensor, gain: float = 1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain: float = 1.0):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def orthogonal_(tensor, gain: float = 1.0):
    """A (semi-)orthogonal matrix (of the tensor's first dim by the rest), from the QR
    decomposition of a normal draw with the signs of R's diagonal, as PyTorch."""
    if len(tensor.shape) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = int(np.prod(tensor.shape[1:]))
    flat = randn((rows, cols), dtype="f64").numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    values = Tensor.from_numpy(np.ascontiguousarray(q * gain).reshape(tensor.shape))
    return _fill(tensor, values.to_dtype(tensor.dtype).to_device(tensor.device))
