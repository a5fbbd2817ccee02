"""Recurrent layers as PyTorch defines them: ``RNN``, ``LSTM``, ``GRU`` and their cells.

Parameters carry PyTorch's names and layouts (``weight_ih_l0``, ``weight_hh_l0``,
``bias_ih_l0``, ``bias_hh_l0``, ``..._reverse`` for the backward direction,
``weight_hr_l0`` for an LSTM's projection), gates stacked in PyTorch's order (LSTM:
input, forget, cell, output; GRU: reset, update, new), so a PyTorch state dict
loads as it is and the numbers are PyTorch's. Every step is Tensor ops, so the
layers differentiate and run on every device. Each layer's input projection is one
product over the whole sequence; the loop over time does the hidden products.
"""

from __future__ import annotations

import math

from ..creation import zeros
from ..errors import ShapeMismatchError
from ..tensor_class import Tensor
from . import init, ops
from .errors import UnsupportedOptionError
from .linear import linear
from .module import Module

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _rnn_step(mode, x_proj, h, w_hh, b_hh):
    pre = x_proj + linear(h, w_hh, b_hh)
    return pre.tanh() if mode == "RNN_TANH" else pre.relu()


def _gru_step(x_proj, h, w_hh, b_hh):
    """PyTorch's GRU: ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``."""
    hidden = h.shape[-1]
    hh = linear(h, w_hh, b_hh)
    r = (x_proj.narrow(-1, 0, hidden) + hh.narrow(-1, 0, hidden)).sigmoid()
    z = (x_proj.narrow(-1, hidden, hidden) + hh.narrow(-1, hidden, hidden)).sigmoid()
    n = (x_proj.narrow(-1, 2 * hidden, hidden) + r * hh.narrow(-1, 2 * hidden, hidden)).tanh()
    return (1.0 - z) * n + z * h


def _lstm_step(x_proj, h, c, w_hh, b_hh, w_hr):
    hidden = c.shape[-1]
    g = x_proj + linear(h, w_hh, b_hh)
    i = g.narrow(-1, 0, hidden).sigmoid()
    f = g.narrow(-1, hidden, hidden).sigmoid()
    cell = g.narrow(-1, 2 * hidden, hidden).tanh()
    o = g.narrow(-1, 3 * hidden, hidden).sigmoid()
    c = f * c + i * cell
    h = o * c.tanh()
    if w_hr is not None:
        h = linear(h, w_hr)
    return h, c


class RNNBase(Module):
    """The shared machinery of RNN, LSTM and GRU (PyTorch's ``RNNBase``)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise UnsupportedOptionError(f"hidden_size must be a positive int, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise UnsupportedOptionError(f"num_layers must be a positive int, got {num_layers!r}")
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise UnsupportedOptionError(f"dropout must be a number in [0, 1], got {dropout!r}")
        if proj_size < 0 or (proj_size and mode != "LSTM") or proj_size >= hidden_size and proj_size:
            raise UnsupportedOptionError(
                f"proj_size must be 0, or (LSTM only) positive and smaller than hidden_size, got {proj_size}")
        self.mode, self.input_size, self.hidden_size = mode, int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = num_layers, bool(bias), bool(batch_first)
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bool(bidirectional), int(proj_size)
        dtype = dtype or "f32"
        gates = GATES[mode] * hidden_size
        out_size = proj_size or hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        new = lambda *shape: init.parameter(init.Init.uniform(-bound, bound).tensor(shape, dtype, device))
        for layer in range(num_layers):
            layer_in = self.input_size if layer == 0 else out_size * (2 if bidirectional else 1)
            for suffix in ("", "_reverse")[: 2 if bidirectional else 1]:
                names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
                setattr(self, names[0], new(gates, layer_in))
                setattr(self, names[1], new(gates, out_size))
                if bias:
                    names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
                    setattr(self, names[2], new(gates))
                    setattr(self, names[3], new(gates))
                if proj_size:
                    names.append(f"weight_hr_l{layer}{suffix}")
                    setattr(self, names[-1], new(proj_size, hidden_size))

    def _weights(self, layer, direction):
        suffix = "_reverse" if direction else ""
        get = lambda name: getattr(self, f"{name}_l{layer}{suffix}", None)
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def _run_direction(self, x, h, c, layer, direction):
        """One layer in one direction over ``x`` (T, N, in): outputs (T, N, out), h, c."""
        w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
        T = x.shape[0]
        proj = linear(x, w_ih, b_ih)  # (T, N, gates): every step's input product at once
        outputs = [None] * T
        steps = range(T - 1, -1, -1) if direction else range(T)
        for t in steps:
            xp = proj[t]
            if self.mode == "LSTM":
                h, c = _lstm_step(xp, h, c, w_hh, b_hh, w_hr)
            elif self.mode == "GRU":
                h = _gru_step(xp, h, w_hh, b_hh)
            else:
                h = _rnn_step(self.mode, xp, h, w_hh, b_hh)
            outputs[t] = h
        return Tensor.stack(outputs, 0), h, c

    def forward(self, input, hx=None):
        x = input
        if x.rank not in (2, 3):
            raise ShapeMismatchError(
                f"{type(self).__name__}: input must be (L, N, {self.input_size}) "
                f"((N, L, {self.input_size}) with batch_first) or unbatched (L, {self.input_size}), "
                f"got {x.shape}")
        batched = x.rank == 3
        if not batched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise ShapeMismatchError(
                f"{type(self).__name__}: input has {x.shape[-1]} features, expected {self.input_size}")
        N = x.shape[1]
        dirs = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        h0, c0 = self._initial_state(hx, batched, N, dirs, out_size, x)
        hs, cs = [], []
        for layer in range(self.num_layers):
            results = [self._run_direction(x, h0[layer * dirs + d],
                                           None if c0 is None else c0[layer * dirs + d], layer, d)
                       for d in range(dirs)]
            x = results[0][0] if dirs == 1 else Tensor.cat([r[0] for r in results], -1)
            hs += [r[1] for r in results]
            cs += [r[2] for r in results]
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = ops.dropout(x, self.dropout, True)
        h_n = Tensor.stack(hs, 0)
        c_n = Tensor.stack(cs, 0) if self.mode == "LSTM" else None
        if not batched:
            x, h_n = x.squeeze(1), h_n.squeeze(1)
            c_n = None if c_n is None else c_n.squeeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, ((h_n, c_n) if self.mode == "LSTM" else h_n)

    def _initial_state(self, hx, batched, N, dirs, out_size, x):
        layers = self.num_layers * dirs
        expect_h = (layers, N, out_size)
        expect_c = (layers, N, self.hidden_size)
        if hx is None:
            h = zeros(expect_h, dtype=x.dtype, device=x.device)
            c = zeros(expect_c, dtype=x.dtype, device=x.device) if self.mode == "LSTM" else None
            return h, c
        if self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ShapeMismatchError("LSTM: hx must be a tuple (h_0, c_0)")
            h, c = hx
        else:
            h, c = hx, None
        if not batched:
            h = h.unsqueeze(1)
            c = None if c is None else c.unsqueeze(1)
        if h.shape != expect_h:
            raise ShapeMismatchError(f"{type(self).__name__}: h_0 of shape {h.shape}; expected {expect_h}")
        if c is not None and c.shape != expect_c:
            raise ShapeMismatchError(f"LSTM: c_0 of shape {c.shape}; expected {expect_c}")
        return h, c

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``: ``h' = tanh(W_ih x + b_ih +
    W_hh h + b_hh)`` (or relu). ``forward(input, hx=None)`` -> ``(output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None, proj_size=0):
        if nonlinearity not in ("tanh", "relu"):
            raise UnsupportedOptionError(f"RNN: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, proj_size, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, proj_size=0)``. ``forward(input, hx=None)`` ->
    ``(output, (h_n, c_n))``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)``. ``forward(input, hx=None)`` -> ``(output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, proj_size=0):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class _CellBase(Module):
    def __init__(self, gates, input_size, hidden_size, bias, device, dtype):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        bound = 1.0 / math.sqrt(hidden_size)
        new = lambda *shape: init.parameter(init.Init.uniform(-bound, bound).tensor(shape, dtype or "f32", device))
        self.weight_ih = new(gates * hidden_size, input_size)
        self.weight_hh = new(gates * hidden_size, hidden_size)
        self.bias_ih = new(gates * hidden_size) if bias else None
        self.bias_hh = new(gates * hidden_size) if bias else None

    def _prepare(self, x, hx):
        if x.rank not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeMismatchError(
                f"{type(self).__name__}: input must be (N, {self.input_size}) or ({self.input_size},), got {x.shape}")
        batched = x.rank == 2
        if not batched:
            x = x.unsqueeze(0)
        if hx is None:
            hx = zeros((x.shape[0], self.hidden_size), dtype=x.dtype, device=x.device)
        elif not batched:
            hx = hx.unsqueeze(0)
        return x, hx, batched

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """One step of an RNN: ``forward(input, hx=None)`` -> ``h'``."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise UnsupportedOptionError(f"RNNCell: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__(1, input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, h, batched = self._prepare(input, hx)
        mode = "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"
        h = _rnn_step(mode, linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class GRUCell(_CellBase):
    """One step of a GRU: ``forward(input, hx=None)`` -> ``h'``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(3, input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        x, h, batched = self._prepare(input, hx)
        h = _gru_step(linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(_CellBase):
    """One step of an LSTM: ``forward(input, hx=None)`` with ``hx = (h, c)`` ->
    ``(h', c')``."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(4, input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        if hx is None:
            x, h, batched = self._prepare(input, None)
            c = zeros(h.shape, dtype=h.dtype, device=h.device)
        else:
            x, h, batched = self._prepare(input, hx[0])
            c = hx[1] if batched else hx[1].unsqueeze(0)
        h, c = _lstm_step(linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))
