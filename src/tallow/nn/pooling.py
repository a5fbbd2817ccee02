"""2-D pooling with PyTorch's arguments: functions and the MaxPool2d, AvgPool2d and
AdaptiveAvgPool2d layers.

The stride defaults to the kernel size, as in PyTorch. Padding is done here (with
``-inf`` for max pooling, zeros for average pooling) before the Tensor's pool op,
so gradients flow through it. Inputs are ``(batch, channels, h, w)`` or unbatched
``(channels, h, w)``.
"""

from __future__ import annotations

import math

from ..creation import cat, full
from ..errors import ShapeMismatchError
from ..tensor_class import Tensor
from .errors import UnsupportedOptionError
from .module import Module


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise UnsupportedOptionError(f"{name} must be an int or 2 ints, got {v}")
    return v


def _batched(x: Tensor, op: str):
    if x.rank == 4:
        return x, False
    if x.rank == 3:
        return x.unsqueeze(0), True
    raise ShapeMismatchError(f"{op}: expects (batch, channels, h, w) or (channels, h, w), "
                             f"got {x.shape}")


def _pad_hw(x: Tensor, pad, value: float) -> Tensor:
    """Pad dims 2 and 3 of ``x`` by ``pad`` on both sides with ``value``."""
    for dim, p in ((2, pad[0]), (3, pad[1])):
        if p:
            if value == 0.0:
                x = x.pad_with_zeros(dim, p, p)
            else:
                shape = list(x.shape)
                shape[dim] = p
                edge = full(tuple(shape), value, dtype=x.dtype, device=x.device)
                x = cat([edge, x, edge], dim)
    return x


def _check_padding(op, kernel, padding):
    if any(p < 0 or p * 2 > k for p, k in zip(padding, kernel)):
        raise UnsupportedOptionError(
            f"{op}: padding {padding} must be at most half the kernel size {kernel}")


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """Max over ``kernel_size`` windows moved by ``stride`` (default: the kernel size);
    ``padding`` adds ``-inf`` borders. PyTorch's ``F.max_pool2d`` (without dilation,
    ceil_mode and return_indices)."""
    if dilation not in (1, (1, 1)) or ceil_mode or return_indices:
        raise UnsupportedOptionError(
            "max_pool2d: dilation, ceil_mode and return_indices are not supported")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None else _pair(stride, "stride")
    pad = _pair(padding, "padding")
    _check_padding("max_pool2d", k, pad)
    x, unbatched = _batched(input, "max_pool2d")
    y = _pad_hw(x, pad, -math.inf).max_pool2d(k, s)
    return y.squeeze(0) if unbatched else y


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    """Mean over ``kernel_size`` windows moved by ``stride`` (default: the kernel size);
    ``padding`` adds zero borders, counted in the mean unless ``count_include_pad`` is
    False; ``divisor_override`` replaces the window size as divisor. PyTorch's
    ``F.avg_pool2d`` (without ceil_mode)."""
    if ceil_mode:
        raise UnsupportedOptionError("avg_pool2d: ceil_mode is not supported")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None else _pair(stride, "stride")
    pad = _pair(padding, "padding")
    _check_padding("avg_pool2d", k, pad)
    x, unbatched = _batched(input, "avg_pool2d")
    y = _pad_hw(x, pad, 0.0).avg_pool2d(k, s)
    if divisor_override is not None:
        y = y * (k[0] * k[1] / float(divisor_override))
    elif not count_include_pad and any(pad):
        # Divide by the real (unpadded) elements of each window instead of k*k.
        ones = full((1, 1) + tuple(x.shape[2:]), 1.0, dtype=x.dtype, device=x.device)
        counts = _pad_hw(ones, pad, 0.0).avg_pool2d(k, s)
        y = y.broadcast_div(counts)
    return y.squeeze(0) if unbatched else y


def _adaptive_bounds(n_in: int, n_out: int):
    # PyTorch's windows: [floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out)).
    return [((i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)) for i in range(n_out)]


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed ``output_size`` (an int, or ``(h, w)`` where None keeps
    the input's size), with PyTorch's window bounds."""
    x, unbatched = _batched(input, "adaptive_avg_pool2d")
    h, w = x.shape[2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    oh, ow = h if oh is None else int(oh), w if ow is None else int(ow)
    if oh <= 0 or ow <= 0:
        raise ShapeMismatchError(f"adaptive_avg_pool2d: output size must be positive, got {(oh, ow)}")
    if h % oh == 0 and w % ow == 0:
        y = x.avg_pool2d((h // oh, w // ow), (h // oh, w // ow))
    else:
        rows = []
        for r0, r1 in _adaptive_bounds(h, oh):
            band = x.narrow(2, r0, r1 - r0)
            cols = [band.narrow(3, c0, c1 - c0).mean_keepdim((2, 3))
                    for c0, c1 in _adaptive_bounds(w, ow)]
            rows.append(cat(cols, 3))
        y = cat(rows, 2)
    return y.squeeze(0) if unbatched else y


class MaxPool2d(Module):
    """``MaxPool2d(kernel_size, stride=None, padding=0)``; stride defaults to the kernel
    size (PyTorch). No parameters."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        if dilation not in (1, (1, 1)) or ceil_mode or return_indices:
            raise UnsupportedOptionError(
                "MaxPool2d: dilation, ceil_mode and return_indices are not supported")
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """``AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)``; stride defaults to the kernel size."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        if ceil_mode:
            raise UnsupportedOptionError("AvgPool2d: ceil_mode is not supported")
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                          count_include_pad=self.count_include_pad,
                          divisor_override=self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """``AdaptiveAvgPool2d(output_size)``: average pooling to a fixed output size."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
