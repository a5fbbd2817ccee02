"""Convolutions, transposed convolutions, pooling and nearest upsampling.

Shapes follow candle and PyTorch: inputs (batch, channels, [h,] w); conv
kernels (c_out, c_in / groups, [kh,] kw); transposed-conv kernels
(c_in, c_out / groups, [kh,] kw). ``padding``, ``stride`` and ``dilation`` of
the 2-D ops take an int or an (h, w) pair.
"""

from __future__ import annotations

from .checks import same_dtype_device
from .errors import ShapeMismatchError
from .layout import Layout
from .op import record, record1

_contig = Layout.contiguous_of


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v}")
    return v


def _check_positive(op, **kw):
    for k, v in kw.items():
        vals = v if isinstance(v, tuple) else (v,)
        if any(x < 1 for x in vals):
            raise ValueError(f"{op}: {k} must be >= 1, got {v}")


def _check_non_negative(op, **kw):
    for k, v in kw.items():
        vals = v if isinstance(v, tuple) else (v,)
        if any(x < 0 for x in vals):
            raise ValueError(f"{op}: {k} must be >= 0, got {v}")


def _check_conv(op, x, k, rank, groups, transposed):
    same_dtype_device(op, (x, k))
    if x.rank != rank + 2 or k.rank != rank + 2:
        raise ShapeMismatchError(
            f"{op}: expects a rank-{rank + 2} input and kernel, got {x.shape} and {k.shape}"
        )
    if groups < 1:
        raise ValueError(f"{op}: groups must be >= 1, got {groups}")
    c_in = x.shape[1]
    if transposed:
        if k.shape[0] != c_in or c_in % groups:
            raise ShapeMismatchError(
                f"{op}: input channels {c_in} vs kernel {k.shape} with groups={groups}"
            )
    elif k.shape[1] * groups != c_in or k.shape[0] % groups:
        raise ShapeMismatchError(
            f"{op}: input channels {c_in} vs kernel {k.shape} with groups={groups}"
        )


def _out_size(op, n, k, pad, stride, dil):
    out = (n + 2 * pad - dil * (k - 1) - 1) // stride + 1
    if out < 1:
        raise ShapeMismatchError(
            f"{op}: input size {n} is too small for kernel {k} (padding {pad}, dilation {dil})"
        )
    return out


class ConvOps:
    __slots__ = ()

    def conv1d(self, kernel, padding=0, stride=1, dilation=1, groups=1):
        """1-D convolution of (batch, c_in, l) with a (c_out, c_in / groups, k) kernel (PyTorch's cross-correlation)."""
        _check_conv("conv1d", self, kernel, 1, groups, False)
        _check_positive("conv1d", stride=stride, dilation=dilation)
        _check_non_negative("conv1d", padding=padding)
        b, _, n = self.shape
        lout = _out_size("conv1d", n, kernel.shape[2], padding, stride, dilation)
        out = self._storage.conv1d(self._layout, kernel._storage, kernel._layout,
                                   padding, stride, dilation, groups)
        params = (padding, stride, dilation, groups)
        return self._wrap(out, _contig((b, kernel.shape[0], lout)),
                          record("conv1d", (self, kernel), params))

    def conv2d(self, kernel, padding=0, stride=1, dilation=1, groups=1):
        """2-D convolution of (batch, c_in, h, w) with a (c_out, c_in / groups, kh, kw) kernel; ``padding``/``stride``/``dilation`` an int or a pair."""
        _check_conv("conv2d", self, kernel, 2, groups, False)
        pad, st, dil = _pair(padding, "padding"), _pair(stride, "stride"), _pair(dilation, "dilation")
        _check_positive("conv2d", stride=st, dilation=dil)
        _check_non_negative("conv2d", padding=pad)
        b, _, h, w = self.shape
        oh = _out_size("conv2d", h, kernel.shape[2], pad[0], st[0], dil[0])
        ow = _out_size("conv2d", w, kernel.shape[3], pad[1], st[1], dil[1])
        out = self._storage.conv2d(self._layout, kernel._storage, kernel._layout,
                                   pad, st, dil, groups)
        return self._wrap(out, _contig((b, kernel.shape[0], oh, ow)),
                          record("conv2d", (self, kernel), (pad, st, dil, groups)))

    def conv_transpose1d(self, kernel, padding=0, output_padding=0, stride=1, dilation=1,
                         groups=1):
        """1-D transposed convolution with a (c_in, c_out / groups, k) kernel, as PyTorch's ``conv_transpose1d``."""
        _check_conv("conv_transpose1d", self, kernel, 1, groups, True)
        _check_positive("conv_transpose1d", stride=stride, dilation=dilation)
        _check_non_negative("conv_transpose1d", padding=padding, output_padding=output_padding)
        if output_padding >= max(stride, dilation):
            raise ValueError("conv_transpose1d: output_padding must be smaller than stride or dilation")
        b, _, n = self.shape
        k = kernel.shape[2]
        lout = (n - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
        if lout < 1:
            raise ShapeMismatchError(f"conv_transpose1d: empty output for input size {n}")
        out = self._storage.conv_transpose1d(self._layout, kernel._storage, kernel._layout,
                                             padding, output_padding, stride, dilation, groups)
        params = (padding, output_padding, stride, dilation, groups)
        return self._wrap(out, _contig((b, kernel.shape[1] * groups, lout)),
                          record("conv_transpose1d", (self, kernel), params))

    def conv_transpose2d(self, kernel, padding=0, output_padding=0, stride=1, dilation=1,
                         groups=1):
        """2-D transposed convolution with a (c_in, c_out / groups, kh, kw) kernel, as PyTorch's ``conv_transpose2d``."""
        _check_conv("conv_transpose2d", self, kernel, 2, groups, True)
        pad, opad = _pair(padding, "padding"), _pair(output_padding, "output_padding")
        st, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
        _check_positive("conv_transpose2d", stride=st, dilation=dil)
        _check_non_negative("conv_transpose2d", padding=pad, output_padding=opad)
        for i in range(2):
            if opad[i] >= max(st[i], dil[i]):
                raise ValueError("conv_transpose2d: output_padding must be smaller than stride or dilation")
        b, _, h, w = self.shape
        kh, kw = kernel.shape[2:]
        oh = (h - 1) * st[0] - 2 * pad[0] + dil[0] * (kh - 1) + opad[0] + 1
        ow = (w - 1) * st[1] - 2 * pad[1] + dil[1] * (kw - 1) + opad[1] + 1
        if oh < 1 or ow < 1:
            raise ShapeMismatchError(f"conv_transpose2d: empty output for input {self.shape}")
        out = self._storage.conv_transpose2d(self._layout, kernel._storage, kernel._layout,
                                             pad, opad, st, dil, groups)
        return self._wrap(out, _contig((b, kernel.shape[1] * groups, oh, ow)),
                          record("conv_transpose2d", (self, kernel), (pad, opad, st, dil, groups)))

    # -- pooling ---------------------------------------------------------------------------
    def _pool(self, name, kernel, stride):
        if self.rank != 4:
            raise ShapeMismatchError(f"{name}: expects (batch, channels, h, w), got {self.shape}")
        k = _pair(kernel, "kernel")
        s = k if stride is None else _pair(stride, "stride")
        _check_positive(name, kernel=k, stride=s)
        b, c, h, w = self.shape
        if k[0] > h or k[1] > w:
            raise ShapeMismatchError(f"{name}: kernel {k} larger than input {h}x{w}")
        shape = (b, c, (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1)
        out = getattr(self._storage, name)(self._layout, k, s)
        return self._wrap(out, _contig(shape), record1(name, self, (k, s)))

    def avg_pool2d(self, kernel, stride=None):
        """Average pooling of (batch, c, h, w) over ``kernel`` windows; ``stride`` defaults to the kernel (as PyTorch)."""
        return self._pool("avg_pool2d", kernel, stride)

    def max_pool2d(self, kernel, stride=None):
        """Max pooling of (batch, c, h, w) over ``kernel`` windows; ``stride`` defaults to the kernel (as PyTorch)."""
        return self._pool("max_pool2d", kernel, stride)

    # -- upsampling --------------------------------------------------------------------------
    def upsample_nearest1d(self, size):
        """Nearest-neighbour resize of (batch, c, l) to length ``size``."""
        if self.rank != 3:
            raise ShapeMismatchError(f"upsample_nearest1d: expects (b, c, l), got {self.shape}")
        size = int(size)
        _check_positive("upsample_nearest1d", size=size)
        out = self._storage.upsample_nearest1d(self._layout, size)
        return self._wrap(out, _contig(self.shape[:2] + (size,)),
                          record1("upsample_nearest1d", self, size))

    def upsample_nearest2d(self, h, w):
        """Nearest-neighbour resize of (batch, c, h, w) to ``h`` x ``w``."""
        if self.rank != 4:
            raise ShapeMismatchError(f"upsample_nearest2d: expects (b, c, h, w), got {self.shape}")
        h, w = int(h), int(w)
        _check_positive("upsample_nearest2d", size=(h, w))
        out = self._storage.upsample_nearest2d(self._layout, h, w)
        return self._wrap(out, _contig(self.shape[:2] + (h, w)),
                          record1("upsample_nearest2d", self, (h, w)))

    def interpolate1d(self, size):
        """= ``upsample_nearest1d(size)`` (candle's name)."""
        return self.upsample_nearest1d(size)

    def interpolate2d(self, h, w):
        """= ``upsample_nearest2d(h, w)`` (candle's name)."""
        return self.upsample_nearest2d(h, w)
