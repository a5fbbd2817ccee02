"""Convolution layers: Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d (PyTorch's arguments).

Built from scratch, weight and bias are trainable ``Var``s drawn from
``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default, its
``kaiming_uniform_(a=sqrt(5))`` for the weight, with ``fan_in`` the weight's
dim 1 times the kernel's elements (``in_channels / groups * prod(kernel)`` for a
convolution, ``out_channels / groups * prod(kernel)`` for a transposed one, whose
weight is ``(in, out / groups, *kernel)``).
"""

from __future__ import annotations

from ..tensor_class import Tensor
from . import init
from .errors import UnsupportedOptionError
from .module import Module


def _tuple(v, n, name):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise UnsupportedOptionError(f"{name} must be an int or {n} ints, got {v}")
    return v


class _ConvNd(Module):
    _dims = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, padding_mode, output_padding, device, dtype):
        super().__init__()
        n = self._dims
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise UnsupportedOptionError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                f"must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise UnsupportedOptionError(f"{name}: padding_mode {padding_mode!r} (only 'zeros')")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        self.dilation = _tuple(dilation, n, "dilation")
        self.output_padding = _tuple(output_padding, n, "output_padding")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.padding = self._resolve_padding(padding)
        if self._transposed:
            shape = (self.in_channels, self.out_channels // self.groups) + self.kernel_size
        else:
            shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        fan_in = init.fan_in_of(shape)
        dtype = dtype or "f32"
        self.weight = init.parameter(init.uniform_fan_in(shape, fan_in, dtype, device))
        self.bias = init.parameter(init.uniform_fan_in((self.out_channels,), fan_in, dtype, device)) \
            if bias else None

    def _resolve_padding(self, padding):
        name = type(self).__name__
        if isinstance(padding, str):
            if self._transposed:
                raise UnsupportedOptionError(f"{name}: string padding {padding!r}")
            if padding == "valid":
                return (0,) * self._dims
            if padding == "same":
                if any(s != 1 for s in self.stride):
                    raise UnsupportedOptionError(f"{name}: padding='same' needs stride 1")
                total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
                if any(t % 2 for t in total):
                    # PyTorch pads asymmetrically here; tallow's kernels pad symmetrically.
                    raise UnsupportedOptionError(
                        f"{name}: padding='same' with an even effective kernel size")
                return tuple(t // 2 for t in total)
            raise UnsupportedOptionError(f"{name}: padding {padding!r}")
        return _tuple(padding, self._dims, "padding")

    def _bias_view(self):
        return self.bias.reshape((1, self.out_channels) + (1,) * self._dims)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if any(self.padding):
            s += f", padding={self.padding}"
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(_ConvNd):
    """``Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    groups=1, bias=True, padding_mode='zeros')`` over ``(batch, channels, length)``.
    ``padding`` may be ``'valid'`` or ``'same'`` (odd effective kernel, stride 1)."""

    _dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = x.conv1d(self.weight, padding=self.padding[0], stride=self.stride[0],
                     dilation=self.dilation[0], groups=self.groups)
        return y if self.bias is None else y.broadcast_add(self._bias_view())


class Conv2d(_ConvNd):
    """``Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    groups=1, bias=True, padding_mode='zeros')`` over ``(batch, channels, h, w)``.
    ``padding`` may be ``'valid'`` or ``'same'`` (odd effective kernel, stride 1)."""

    _dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = x.conv2d(self.weight, padding=self.padding, stride=self.stride,
                     dilation=self.dilation, groups=self.groups)
        return y if self.bias is None else y.broadcast_add(self._bias_view())


class ConvTranspose1d(_ConvNd):
    """``ConvTranspose1d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros')``;
    weight ``(in, out / groups, k)``."""

    _dims = 1
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = x.conv_transpose1d(self.weight, padding=self.padding[0],
                               output_padding=self.output_padding[0], stride=self.stride[0],
                               dilation=self.dilation[0], groups=self.groups)
        return y if self.bias is None else y.broadcast_add(self._bias_view())


class ConvTranspose2d(_ConvNd):
    """``ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros')``;
    weight ``(in, out / groups, kh, kw)``."""

    _dims = 2
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = x.conv_transpose2d(self.weight, padding=self.padding,
                               output_padding=self.output_padding, stride=self.stride,
                               dilation=self.dilation, groups=self.groups)
        return y if self.bias is None else y.broadcast_add(self._bias_view())
