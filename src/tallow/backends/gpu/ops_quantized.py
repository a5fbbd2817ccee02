"""Quantized weights on the GPU: dequantization of GGML blocks and products with
f32 activations.

The weights stay in their GGML block bytes (a u8 storage; blocks back to back
from byte 0). The kernels read them as ``array<u32>`` with shifts (blocks are
not 4-byte aligned in general: Q4_0 takes 18 bytes) and decode with
``wgsl/quantized_formats.wgsl``, one module per format.

* ``dequantize``: one invocation per run of 16 values; bit for bit the NumPy
  codecs of ``tallow.quantized`` (f16 scales through the exact codec, every
  product and sum rounded in the codecs' order, never fused).
* ``qmatmul_t``: ``x (m, k) @ W(n, k)^T`` with the dequantized weights times the
  f32 activations, accumulated in f32, as candle's Metal and ggml's GPU kernels
  do (the activations are not quantized: the CPU's ``matmul_t`` quantizes them
  to the dot type, so the two differ by that rounding). Small m goes to the
  matrix-vector kernel (``qmv``: a 64-wide workgroup per 4 rows of W and up to 8
  rows of x, each invocation decoding runs of 16 weights and multiplying them
  with the matching activations, then a workgroup reduction); larger m to the
  tiled kernel (``qmm``: a 16 x 16 workgroup computing a 64 x 64 tile of y, the
  W tile dequantized straight into workgroup memory). See docs/gpu.md.

Every call encodes into the device's queue and returns at once (no readback),
with buffers from the pool and pipelines from the kernel cache. A weight or an
output larger than the adapter's max storage binding size is split over
windows of rows; an operand that cannot be split that way raises.
"""

from __future__ import annotations

from ... import dtype as dt
from ...errors import TallowError
from .kernels import family
from .layouts import grid, merge_dims
from .storage import wrap

QDEQ = family("qdequantize", [("w", "in", "u32"), ("y", "out", 1)], main=1,
              file="quantized_dequantize.wgsl", includes=("quantized_formats.wgsl",))

# Formats with GPU kernels (names as tallow.quantized.ggml_type spells them).
SUPPORTED = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
             "Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "Q8K")
_SUPPORTED = frozenset(SUPPORTED)
RUN = 16  # values decoded together by the kernels


class _Fmt:
    __slots__ = ("name", "qk", "qb", "is_float")

    def __init__(self, name, qk, qb):
        self.name = name
        self.qk = qk
        self.qb = qb
        self.is_float = qk == 1


_FMTS: dict = {}


def _fmt(type_name) -> _Fmt:
    f = _FMTS.get(type_name)
    if f is not None:
        return f
    from ...quantized.types import ggml_type

    try:
        t = ggml_type(type_name)
    except (ValueError, TypeError):
        raise TallowError(f"unknown GGML type {type_name!r}") from None
    if t.name not in _SUPPORTED:
        raise TallowError(f"GGML type {t.name} has no GPU kernels (supported: {', '.join(SUPPORTED)})")
    f = _FMTS[type_name] = _Fmt(t.name, t.block_size, t.type_size)
    return f


def supported(type_name: str) -> bool:
    """Whether ``dequantize`` and ``qmatmul_t`` take weights of this GGML type."""
    try:
        _fmt(type_name)
    except TallowError:
        return False
    return True


def _check_raw(raw, f: _Fmt, nbytes: int, what: str) -> None:
    if raw.dtype is not dt.u8:
        raise TallowError(f"{what}: the {f.name} blocks must be a u8 storage, got {raw.dtype}")
    if raw.count < nbytes:
        raise TallowError(f"{what}: {f.name} needs {nbytes} bytes of blocks, the storage holds {raw.count}")


def _align(state) -> int:
    return max(state.commands.storage_align, 16)


def _win(buf, b0: int, b1: int, align: int):
    """A window of ``buf`` covering bytes [b0, b1): (window, b0 - window start)."""
    a0 = b0 // align * align
    a1 = min(buf.size, (b1 + 3) & ~3)
    return (buf, a0, a1 - a0), b0 - a0


# -- dequantize ---------------------------------------------------------------------------

def dequantize(raw, type_name: str, n_elements: int):
    """A new contiguous f32 storage of ``n_elements`` values decoded from the GGML
    blocks of ``type_name`` at the start of ``raw`` (a u8 GpuStorage)."""
    f = _fmt(type_name)
    n = int(n_elements)
    if n < 0 or n % f.qk:
        raise TallowError(f"dequantize: {n} elements is not a whole number of {f.name} blocks of {f.qk}")
    nbytes = n // f.qk * f.qb
    _check_raw(raw, f, nbytes, "dequantize")
    state = raw.bdev
    pipe = state.kernels.get(QDEQ, (f.name, "f32"))
    cmd = state.commands
    mb = state.max_binding
    align = _align(state)
    # Elements per dispatch: whole runs and blocks, each window (blocks in, f32
    # out) within a binding even after its start is aligned down.
    unit = max(f.qk, RUN)
    limit = min((mb - align) // 4, (mb - align) // f.qb * f.qk)
    chunk = max(unit, limit // unit * unit)
    with cmd.lock:
        out = state.pool.alloc(n * 4)
        e0 = 0
        while e0 < n:
            e1 = min(n, e0 + chunk)
            cnt = e1 - e0
            w, woff = _win(raw.buf, e0 // f.qk * f.qb, e1 // f.qk * f.qb, align)
            y, yoff = _win(out, e0 * 4, e1 * 4, align)
            runs = (cnt + RUN - 1) // RUN
            wo = woff // f.qb if f.is_float else woff
            words = (runs, cnt, wo, yoff // 4) + (0,) * 12
            cmd.dispatch(pipe, (w, y), words, *grid(runs))
            e0 = e1
    return wrap(state, out, dt.f32, n)
