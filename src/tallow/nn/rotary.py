"""Rotary position embeddings (candle-nn's ``rotary_emb``).

``xs`` is ``(batch, heads, seq, head_dim)``; ``cos`` and ``sin`` are
``(seq, head_dim / 2)`` or ``(batch, seq, head_dim / 2)``.

* ``rope``: the two halves of the head dim rotate together (GPT-NeoX / Llama
  in Hugging Face's layout): ``[x1 cos - x2 sin, x2 cos + x1 sin]``.
* ``rope_i``: interleaved pairs ``(x[2i], x[2i+1])`` rotate (the original
  Llama / GPT-J layout).
* ``rope_thd``: ``rope`` for ``(batch, seq, heads, head_dim)`` inputs.

A backend may provide the fused kernel ``rope(layout, cos, cos_layout, sin,
sin_layout, interleaved)``; without it (or with a tracked input) the rotation
is composed from Tensor ops.
"""

from __future__ import annotations

from ..checks import same_dtype_device
from ..errors import ShapeMismatchError
from ..tensor_class import Tensor
from .fused import fused


def _check(op, xs, cos, sin):
    if xs.rank != 4:
        raise ShapeMismatchError(f"{op}: xs must be (batch, heads, seq, head_dim), got {xs.shape}")
    b, _h, t, d = xs.shape
    if d % 2:
        raise ShapeMismatchError(f"{op}: head_dim {d} must be even")
    ok = (t, d // 2)
    if cos.shape != sin.shape or (cos.shape != ok and cos.shape != (b,) + ok):
        raise ShapeMismatchError(
            f"{op}: cos/sin must be {ok} or {(b,) + ok}, got {cos.shape} and {sin.shape} "
            f"for xs {xs.shape}")
    same_dtype_device(op, (xs, cos, sin))


def _table(c, b, t, half):
    """cos/sin broadcastable against (b, h, t, half)."""
    if c.rank == 2:
        return c.reshape((1, 1, t, half))
    return c.reshape((b, 1, t, half))


def _fused(xs, cos, sin, interleaved):
    if xs._track or cos._track or sin._track:
        return None
    return fused("rope", xs, cos._storage, cos._layout, sin._storage, sin._layout, interleaved)


def rope(xs: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    _check("rope", xs, cos, sin)
    out = _fused(xs, cos, sin, False)
    if out is not None:
        return out
    b, _h, t, d = xs.shape
    half = d // 2
    c, s = _table(cos, b, t, half), _table(sin, b, t, half)
    x1 = xs.narrow(-1, 0, half)
    x2 = xs.narrow(-1, half, half)
    from ..creation import cat

    return cat([x1.broadcast_mul(c) - x2.broadcast_mul(s),
                x2.broadcast_mul(c) + x1.broadcast_mul(s)], -1)


def rope_i(xs: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    _check("rope_i", xs, cos, sin)
    out = _fused(xs, cos, sin, True)
    if out is not None:
        return out
    b, h, t, d = xs.shape
    half = d // 2
    c = _table(cos, b, t, half).unsqueeze(-1)
    s = _table(sin, b, t, half).unsqueeze(-1)
    pairs = xs.reshape((b, h, t, half, 2))
    x0 = pairs.narrow(-1, 0, 1)
    x1 = pairs.narrow(-1, 1, 1)
    from ..creation import cat

    y = cat([x0.broadcast_mul(c) - x1.broadcast_mul(s),
             x0.broadcast_mul(s) + x1.broadcast_mul(c)], -1)
    return y.reshape((b, h, t, d))


def rope_thd(xs: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``rope`` for ``(batch, seq, heads, head_dim)`` inputs."""
    if xs.rank != 4:
        raise ShapeMismatchError(f"rope_thd: xs must be (batch, seq, heads, head_dim), got {xs.shape}")
    return rope(xs.transpose(1, 2), cos, sin).transpose(1, 2)


def rope_tables(head_dim: int, max_positions: int, theta: float = 10000.0, dtype="f32", device=None):
    """``(cos, sin)`` of shape ``(max_positions, head_dim / 2)`` for base ``theta``."""
    import numpy as np

    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    freqs = np.outer(np.arange(max_positions, dtype=np.float64), inv).astype(np.float32)
    cos = Tensor(np.cos(freqs)).to_dtype(dtype)
    sin = Tensor(np.sin(freqs)).to_dtype(dtype)
    if device is not None:
        cos, sin = cos.to_device(device), sin.to_device(device)
    return cos, sin
