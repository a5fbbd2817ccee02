"""Quantized weights on the GPU: dequantization of GGML blocks and products with
f32 activations.

The weights stay in their GGML block bytes (a u8 storage; blocks back to back
from byte 0). The kernels read them as ``array<u32>`` with shifts (blocks are
not 4-byte aligned in general: Q4_0 takes 18 bytes) and decode with
``wgsl/quantized_formats.wgsl``, one module per format.

* ``dequantize``: one invocation per piece of 16 values; bit for bit the NumPy
  codecs of ``tallow.quantized`` (f16 scales through the exact codec, every
  product and sum rounded in the codecs' order, never fused).
* ``qmatmul_t``: ``x (m, k) @ W(n, k)^T`` with the dequantized weights times the
  f32 activations, accumulated in f32, as candle's Metal and ggml's GPU kernels
  do (the activations are not quantized: the CPU's ``matmul_t`` quantizes them
  to the dot type, so the two differ by that rounding). Two kernels: ``qmv``
  (matrix-vector: a 64-wide workgroup per 4 rows of W and up to 16 rows of x,
  each invocation decoding pieces of 16 weights once and multiplying them with
  the matching activations of every x row, then a workgroup reduction) and
  ``qmm`` (a 16 x 16 workgroup computing a (16 TM) x 64 tile of y, the W tile
  dequantized straight into workgroup memory). ``qmv`` takes m <= 8; above, GPUs
  take ``qmm`` and CPU adapters (lavapipe, where ``qmv`` measured faster at every
  m) ``qmv`` in workgroups of 16 x rows. See docs/gpu.md.

Every call encodes into the device's queue and returns at once (no readback),
with buffers from the pool and pipelines from the kernel cache. A weight or an
output larger than the adapter's max storage binding size is split over
windows of rows; an operand that cannot be split that way raises.
"""

from __future__ import annotations

from ... import dtype as dt
from ...errors import TallowError
from .kernels import family
from .kernel_args import grid, max_groups, merge_dims

QDEQ = family("qdequantize", [("w", "in", "u32"), ("y", "out", 1)], main=1,
              file="quantized_dequantize.wgsl", includes=("quantized_formats.wgsl",))

# Formats with GPU kernels (names as tallow.quantized.ggml_type spells them).
SUPPORTED = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
             "Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "Q8K", "IQ4_NL", "IQ4_XS")
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
    from ...ggml.types import ggml_type

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
    limit = min((mb - 2 * align) // 4, (mb - 2 * align) // f.qb * f.qk)
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
            cmd.dispatch(pipe, (w, y), words, *grid(state, runs))
            e0 = e1
    return state.storage(out, dt.f32, n)


# -- x (m, k) @ W(n, k)^T -------------------------------------------------------------------

QMM = family("qmatmul", [("x", "in", 1), ("w", "in", "u32"), ("y", "out", 1)], main=1,
             file="quantized_matmul.wgsl", includes=("quantized_formats.wgsl",))
MAX_ROW_RANK = 8
NR = 4  # W rows per matrix-vector workgroup
QMM_N = 64  # W rows per tile
# The matrix-vector kernel takes m up to MV_UP_TO (a workgroup takes up to 16 rows
# of x, each workgroup decoding its W rows again), the tiled kernel larger m, except on
# CPU adapters (lavapipe), where the matrix-vector kernel is the faster one at
# every m measured (1 ... 128; docs/gpu.md). FORCE ("qmv" / "qmm") overrides the
# choice (tests).
MV_UP_TO = 8
FORCE = None


def pick_kernel(m: int, cpu_adapter: bool) -> tuple:
    """("qmv", x rows per workgroup) or ("qmm", TM) for a product with m rows of x."""
    kind = FORCE or ("qmv" if m <= MV_UP_TO or cpu_adapter else "qmm")
    if kind == "qmv":
        return "qmv", _mc(m)
    return "qmm", 4 if m >= 64 else (2 if m > 16 else 1)


def _mc(m: int) -> int:
    """x rows per matrix-vector workgroup."""
    for c in (1, 2, 4, 8):
        if m <= c:
            return c
    return 16


def _x_rows(x, x_layout, k: int):
    """(x, layout, row shape, row strides) with x's row dims merged (at most
    MAX_ROW_RANK of them, else compacted first)."""
    shape, stride = x_layout.shape, x_layout.stride
    if len(shape) == 1:
        return x, x_layout, (1,), (0,)
    rshape, (rstride,) = merge_dims(tuple(shape[:-1]), (tuple(stride[:-1]),))
    if len(rshape) > MAX_ROW_RANK:
        from ...layout import Layout

        x = x.copy_strided(x_layout)
        x_layout = Layout.contiguous_of(tuple(shape))
        rshape, (rstride,) = merge_dims(tuple(shape[:-1]), (tuple(x_layout.stride[:-1]),))
    if not rshape:
        rshape, rstride = (1,), (0,)
    return x, x_layout, rshape, rstride


def qmatmul_t(x, x_layout, raw, type_name: str, n: int, k: int):
    """``x (m, k) @ W(n, k)^T`` as a new contiguous (m, n) f32 storage, where x is
    an f32 GpuStorage read through ``x_layout`` of shape (..., k) (any strides; the
    leading dims are the m rows) and W is ``n`` rows of ``k / block_size`` GGML
    blocks of ``type_name`` at the start of ``raw`` (a u8 GpuStorage)."""
    f = _fmt(type_name)
    n, k = int(n), int(k)
    if x.dtype is not dt.f32:
        raise TallowError(f"qmatmul_t: activations must be f32, got {x.dtype}")
    shape = tuple(x_layout.shape)
    if not shape or shape[-1] != k:
        raise TallowError(f"qmatmul_t: x of shape {shape} does not end in k = {k}")
    if k % f.qk:
        raise TallowError(f"qmatmul_t: k = {k} is not a whole number of {f.name} blocks of {f.qk}")
    row_bytes = k // f.qk * f.qb
    _check_raw(raw, f, n * row_bytes, "qmatmul_t")
    if raw.bdev is not x.bdev:
        raise TallowError("qmatmul_t: x and the weight are on different devices")
    state = x.bdev
    m = 1
    for d in shape[:-1]:
        m *= d
    cmd = state.commands
    if m * n == 0:
        with cmd.lock:
            out = state.pool.alloc(m * n * 4)
        return state.storage(out, dt.f32, m * n)
    if k == 0:
        return state.zeros(m * n, dt.f32)
    x, x_layout, rshape, rstride = _x_rows(x, x_layout, k)
    mb = state.max_binding
    align = _align(state)
    kind, c = pick_kernel(m, state.adapter_info.get("adapter_type") == "CPU")
    if kind == "qmv":
        pipe = state.kernels.get(QMM, (f.name, "f32"), "qmv", (("MC", c),))
        n_quantum, m_quantum = NR, c
    else:
        pipe = state.kernels.get(QMM, (f.name, "f32"), "qmm", (("TM", c),))
        n_quantum, m_quantum = QMM_N, 16 * c
    # Rows of W per dispatch (their blocks within one binding, even after the
    # window's start is aligned down), and rows of x (their rows of y likewise).
    room = mb - 2 * align
    rows_w = room // row_bytes
    if rows_w < 1:
        raise TallowError(
            f"qmatmul_t: one weight row takes {row_bytes} bytes, more than the adapter's max "
            f"storage binding size ({mb} bytes) allows")
    rows_w = min(n, rows_w if rows_w < n_quantum else rows_w // n_quantum * n_quantum)
    rows_w = min(rows_w, max_groups(state) * n_quantum)
    rows_x = room // (n * 4)
    if rows_x < 1:
        raise TallowError(
            f"qmatmul_t: one output row takes {n * 4} bytes, more than the adapter's max "
            f"storage binding size ({mb} bytes) allows")
    rows_x = min(m, rows_x, max_groups(state) * m_quantum)
    if rows_x < m and rows_x >= m_quantum:
        rows_x = rows_x // m_quantum * m_quantum
    # x: the window covering its layout's extent.
    lo, hi = x_layout.extent()
    xw, xoff = _win(x.buf, lo * 4, hi * 4, align)
    if xw[2] > mb:
        raise TallowError(
            f"qmatmul_t: the activations span {xw[2]} bytes, more than the adapter's max storage "
            f"binding size ({mb} bytes); split x by rows")
    x_start = x_layout.start_offset - (lo * 4 - xoff) // 4
    tail = rshape + (0,) * (8 - len(rshape)) + rstride + (0,) * (8 - len(rstride))
    with cmd.lock:
        out = state.pool.alloc(m * n * 4)
        for m0 in range(0, m, rows_x):
            m1 = min(m, m0 + rows_x)
            y, yoff = _win(out, m0 * n * 4, m1 * n * 4, align)
            for n0 in range(0, n, rows_w):
                n1 = min(n, n0 + rows_w)
                w, woff = _win(raw.buf, n0 * row_bytes, n1 * row_bytes, align)
                words = (m1 - m0, n1 - n0, k, x_start, x_layout.stride[-1], len(rshape),
                         woff // f.qb if f.is_float else woff, k if f.is_float else row_bytes,
                         yoff // 4 + n0, n, m0, 0, 0, 0, 0, 0) + tail
                gx = (n1 - n0 + n_quantum - 1) // n_quantum
                gy = (m1 - m0 + m_quantum - 1) // m_quantum
                cmd.dispatch(pipe, (xw, w, y), words, gx, gy)
    return state.storage(out, dt.f32, m * n)


def _blocks(raw, layout):
    """The blocks' storage with the bytes starting at element 0 (a copy for a view)."""
    if layout.contiguous and layout.start_offset == 0:
        return raw
    return raw.copy_strided(layout)


class GpuQuantized:
    """Quantized methods of ``GpuStorage`` (GGML blocks held as u8), for the types in
    ``SUPPORTED``; the device's ``qmatmul_path`` says which."""

    __slots__ = ()

    def dequantize(self, layout, ggml_type, n_elements):
        return dequantize(_blocks(self, layout), ggml_type.name, n_elements)

    def qmatmul_t(self, layout, weight, weight_layout, ggml_type, n, k):
        return qmatmul_t(self, layout, _blocks(weight, weight_layout), ggml_type.name, n, k)
