"""tallow's compiled CPU kernels for quantized matmul (an optional C extension).

``_kernels.c`` holds byte dot-product kernels (AVX2 ``vpmaddubsw``, AVX-512
VNNI ``vpdpbusd``, a scalar C fallback; the widest the CPU supports is chosen
at import) over weights repacked once into rows interleaved eight at a time.
They compute exactly what the numba and NumPy paths of
:mod:`tallow.quantized` compute (ggml's block arithmetic), so those stay the
fallbacks and the test oracles.

The extension is built from source by ``pip install`` (``setup.py``) and loaded
by :mod:`.loader`; when it is missing (no compiler), or ``TALLOW_NO_NATIVE=1``,
:func:`available` is False and quantized matmul uses the numba path.
``TALLOW_NATIVE_ISA`` (``scalar``, ``avx2``, ``avx512vnni``) narrows the
instruction set.

Formats: Q4_0, Q5_0, Q4_1, Q5_1 and Q8_0 in layouts of the GGUF size (the
fifth bits of Q5_0/Q5_1 regrouped into one 32-bit mask per 32-byte vector;
Q4_1/Q5_1 with Q8_1 activations: Q8_0's integers plus the stored block sums),
Q4K and Q5K (the GGUF size plus unpacked 6-bit scales: 1.03x, 1.02x), Q6K
(the GGUF size: its values' low four bits as Q4K's nibbles, the top two
regrouped) and IQ4_XS (indices as Q4K's nibbles, signed scales unpacked:
1.01x), these with Q8K activations.
"""

from __future__ import annotations

import numpy as np

from .... import config
from ....ggml.blocks import as_bytes, byte_blocks
from .. import pieces
from ....ggml.types import ggml_type
from . import pool
from .pool import sync_threads  # noqa: F401  (published: the decode path sizes the pool per step)

from . import loader
from .loader import apply_isa  # noqa: F401  (published for the modules' users)

_kernels = loader.built("_kernels")  # optional: None without a compiler at install time
# The float decode kernels (_ops.c), published for tallow.models' decode path (None: not built).
decode_ops = loader.built("_ops")

ISAS = config.NATIVE_ISAS
ROWS = 8  # weight rows interleaved per group (the kernels' ROWS)
QK = 32
SUPPORTED = ("Q4_0", "Q8_0", "Q5_0", "Q4_1", "Q5_1", "Q4K", "Q6K", "Q5K", "IQ4_XS")
KQUANTS = ("Q4K", "Q6K", "Q5K", "IQ4_XS")  # Q8K activations, super-blocks of 256
HIGH_BITS = 0  # a field's granularity that marks Q5's fifth bits (regrouped across the eight rows)
K_HIGH_BITS = -1  # the same for Q5K's 32-byte qh (bit s of byte l: element 32 s + l)

def disabled() -> bool:
    """Whether ``TALLOW_NO_NATIVE`` turns the C kernels off (read at each call, so a
    test or a bench can switch paths)."""
    return config.settings.no_native


def isa_wanted():
    """``TALLOW_NATIVE_ISA``'s instruction set, or None for the CPU's widest."""
    return config.settings.native_isa


def available() -> bool:
    """True when the compiled kernels are built, importable and not disabled."""
    return _kernels is not None and not config.settings.no_native


def supports(type_name: str) -> bool:
    """Whether the compiled kernels multiply weights of this GGML type."""
    return type_name in SUPPORTED and available()


def status() -> dict:
    """Built or not (and why), the instruction set in use and the CPU's best."""
    usable = available()
    return {"native": usable, "disabled": disabled(), "error": loader.missing("_kernels"),
            "isa": _kernels.isa() if _kernels is not None else None,
            "best_isa": _kernels.best_isa() if _kernels is not None else None}


def set_isa(name: str) -> None:
    """Use the ``scalar``, ``avx2`` or ``avx512vnni`` kernels (at most what the CPU has)."""
    _kernels.set_isa(name)


def isa() -> str | None:
    return _kernels.isa() if _kernels is not None else None


# ------------------------------------------------------------------- the pool
def pool_available() -> bool:
    """True when the compiled kernels split their products over the backend's pool
    (:mod:`.pool`)."""
    return pool.available()


# ------------------------------------------------------------------- repacking
def _interleave(fields, n: int, nb: int) -> np.ndarray:
    """Per-block byte fields of an (n, nb blocks) weight -> (groups, nb, bytes) in the x8 layout.

    ``fields``: ``(array (n*nb, W) uint8, g)`` pairs, in layout order; each field
    is interleaved across eight rows ``g`` bytes at a time (g = W: the rows'
    fields one after another; g = 1: element by element; g = 4: the quants).
    g = HIGH_BITS: the field is Q5's 32-bit ``qh`` (W = 4), regrouped so that
    mask word u (u < 4: low nibbles of vector u, else high nibbles of vector
    u - 4) has bit 4r + j = the fifth bit of row r's element 4(u mod 4) + j
    (+16 for the high nibbles): nibble u of each row's ``qh``, row r at nibble r.
    Rows are padded with zero blocks to a multiple of eight.  Done a slice of
    groups at a time, so the temporaries stay small next to the result.
    """
    groups = -(-n // ROWS)
    widths = [a.shape[1] for a, _ in fields]
    total = ROWS * sum(widths)
    out = np.empty((groups, nb, total), np.uint8)
    step = max(1, (1 << 20) // max(1, nb * total))  # about 1 MiB per slice
    for g0 in range(0, groups, step):
        g1 = min(groups, g0 + step)
        r0, r1 = g0 * ROWS, min(n, g1 * ROWS)
        gs, pad = g1 - g0, (g1 - g0) * ROWS - (r1 - r0)
        col = 0
        for (a, gran), width in zip(fields, widths):
            part = a.rows(r0, r1, nb) if isinstance(a, _Unpacked) else a.reshape(n, nb, width)[r0:r1]
            if pad:
                part = np.concatenate([part, np.zeros((pad, nb, width), np.uint8)])
            if gran == K_HIGH_BITS:
                # word 8 sb + v, bit 4 r + j: the fifth bit of row r's element 4 v + j of sub-block sb
                bits = np.unpackbits(np.ascontiguousarray(part), axis=-1, bitorder="little")
                bits = bits.reshape(gs, ROWS, nb, 8, 4, 8).transpose(0, 2, 5, 3, 1, 4)
                out[g0:g1, :, col:col + ROWS * width] = np.packbits(
                    bits.reshape(gs, nb, -1), axis=-1, bitorder="little")
            elif gran == HIGH_BITS:
                qh = np.ascontiguousarray(part).view("<u4").reshape(gs, ROWS, nb).astype(np.uint64)
                nib = (qh[..., None] >> (4 * np.arange(8, dtype=np.uint64))) & 15  # (gs, 8 rows, nb, 8 words)
                words = (nib << (4 * np.arange(ROWS, dtype=np.uint64))[None, :, None, None]).sum(axis=1)
                out[g0:g1, :, col:col + ROWS * width] = words.astype("<u4").view(np.uint8).reshape(gs, nb, 32)
            else:
                part = part.reshape(gs, ROWS, nb, width // gran, gran).transpose(0, 2, 3, 1, 4)
                out[g0:g1, :, col:col + ROWS * width] = part.reshape(gs, nb, ROWS * width)
            col += ROWS * width
    return out


class _Unpacked:
    """A field computed from the blocks (uint8, ``width`` bytes a block) one slice of rows at
    a time as :func:`_interleave` takes them, never whole: the unpacking's temporaries and
    its result stay small next to a vocabulary-sized weight."""

    def __init__(self, fn, blocks: np.ndarray, width: int):
        self.fn, self.blocks, self.shape = fn, blocks, (blocks.shape[0], width)

    def rows(self, r0: int, r1: int, nb: int) -> np.ndarray:
        return self.fn(self.blocks[r0 * nb:r1 * nb]).reshape(r1 - r0, nb, self.shape[1])


def repack(raw, type_name: str, n: int, k: int) -> tuple[int, np.ndarray]:
    """GGML blocks of an ``(n, k)`` weight -> (kernel format, interleaved bytes)."""
    t = ggml_type(type_name)
    blocks = byte_blocks(raw, n * k, t.block_size, t.type_size, t.name)
    nb = k // t.block_size
    if t.name in ("Q4_0", "Q8_0"):
        fmt = _kernels.Q4_0 if t.name == "Q4_0" else _kernels.Q8_0
        return fmt, _interleave([(blocks[:, :2], 2), (blocks[:, 2:], 4)], n, nb)
    if t.name == "Q5_0":  # d | qh | qs
        return _kernels.Q5_0, _interleave([(blocks[:, :2], 2), (blocks[:, 2:6], HIGH_BITS), (blocks[:, 6:], 4)], n, nb)
    if t.name == "Q4_1":  # d | m | qs
        return _kernels.Q4_1, _interleave([(blocks[:, :2], 2), (blocks[:, 2:4], 2), (blocks[:, 4:], 4)], n, nb)
    if t.name == "Q5_1":  # d | m | qh | qs
        fields = [(blocks[:, :2], 2), (blocks[:, 2:4], 2), (blocks[:, 4:8], HIGH_BITS), (blocks[:, 8:], 4)]
        return _kernels.Q5_1, _interleave(fields, n, nb)
    if t.name == "Q6K":
        from ....ggml import kquants

        def planes(b):  # values + 32: per 64, low four bits as Q4K's nibbles, then the top two bits in fours
            u = (kquants.q6_values(b) + np.int8(32)).view(np.uint8)
            top = (u >> 4).reshape(-1, 4, 4, 4, 4) << np.array([4, 6, 0, 2], np.uint8)[:, None]
            nibbles, tops = kquants.pack_4bit_32(u & 15).reshape(-1, 4, 32), np.bitwise_or.reduce(top, axis=3)
            return np.concatenate([nibbles, tops.reshape(-1, 4, 16)], axis=2).reshape(-1, 192)

        fields = [(blocks[:, 208:210], 2), (blocks[:, 192:208], 1), (_Unpacked(planes, blocks, 192), 4)]
        return _kernels.Q6K, _interleave(fields, n, nb)
    if t.name == "Q4K":
        from ....ggml import kquants

        sc, mn = kquants.k4_scales(blocks[:, 4:16])
        fields = [(blocks[:, 0:2], 2), (blocks[:, 2:4], 2), (np.ascontiguousarray(sc, np.uint8), 1),
                  (np.ascontiguousarray(mn, np.uint8), 1), (blocks[:, 16:144], 4)]
        return _kernels.Q4K, _interleave(fields, n, nb)
    if t.name == "Q5K":  # Q4K's fields with the fifth bits before the nibbles
        from ....ggml import kquants

        sc, mn = kquants.k4_scales(blocks[:, 4:16])
        fields = [(blocks[:, 0:2], 2), (blocks[:, 2:4], 2), (np.ascontiguousarray(sc, np.uint8), 1),
                  (np.ascontiguousarray(mn, np.uint8), 1), (blocks[:, 16:48], K_HIGH_BITS), (blocks[:, 48:176], 4)]
        return _kernels.Q5K, _interleave(fields, n, nb)
    if t.name == "IQ4_XS":  # the level indices rearranged as Q4K's nibbles
        from ....ggml import iq4, kquants

        indices = _Unpacked(lambda b: kquants.pack_4bit_32(iq4.iq4_xs_indices(b)), blocks, 128)
        fields = [(blocks[:, 0:2], 2), (iq4.iq4_xs_scales(blocks).view(np.uint8), 1), (indices, 4)]
        return _kernels.IQ4XS, _interleave(fields, n, nb)
    raise ValueError(f"{t.name} has no compiled kernel (supported: {', '.join(SUPPORTED)})")


class NativeWeight:
    """A ``(n, k)`` quantized weight repacked for the compiled kernels.

    ``matmul_t(x)`` is ``x @ W.T`` with ggml's arithmetic; ``matvec(x, out)``
    the single-row product written into ``out``, in one call and no checks
    (the decode path's form).  A non-finite activation falls back to the NumPy
    path of :mod:`tallow.backends.cpu.quantized.vec_dot`, which defines those cases
    (``source``: when ``raw`` is a temporary concatenation, the parts it was
    made of, kept instead of the copy).
    """

    def __init__(self, raw, w_type, n: int, k: int, source=None):
        t = ggml_type(w_type)
        if k <= 0 or k % t.block_size:
            raise ValueError(f"{t.name} weight: k={k} must be a positive multiple of {t.block_size}")
        self.type, self.n, self.k = t, int(n), int(k)
        self.nb = self.k // t.block_size
        self.groups = -(-self.n // ROWS)
        self.fmt, self.packed = repack(raw, t.name, self.n, self.k)
        self.kquant = t.name in KQUANTS
        self.q8_1 = t.name in ("Q4_1", "Q5_1")
        self._matvec = _kernels.matvec
        # For the non-finite fallback only: the blocks (a view of the file's map), or
        # ``source``, parts whose concatenation they are (not kept as a copy).
        self._source = [raw] if source is None else list(source)
        self._splittable = self.n * self.k >= 2 * MIN_WORK_PER_THREAD

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes

    def _fallback(self, x2: np.ndarray) -> np.ndarray:
        from ..quantized.vec_dot import matmul_t

        raw = self._source[0] if len(self._source) == 1 else np.concatenate([as_bytes(p) for p in self._source])
        return matmul_t(x2, raw, self.type, self.n, self.k, num_threads=1)

    def matvec(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = W @ x`` for contiguous f32 ``x`` (k,) and ``out`` (n,); no argument checks.

        One call on this thread, except for weights large enough to be worth a
        second thread (a vocabulary-sized output layer).
        """
        if self._splittable and not pool_available() and plan_threads(1, self.n, self.k, self.groups, None) > 1:
            out[:] = self.matmul_t(x.reshape(1, -1)).reshape(-1)
            return out
        if not self._matvec(self.fmt, self.packed, self.n, self.k, x, out):
            out[:] = self._fallback(x.reshape(1, -1)).reshape(-1)
        return out

    def matmul_t(self, x: np.ndarray, num_threads: int | None = None) -> np.ndarray:
        """``x @ W.T`` for ``x`` (..., k)."""
        x2, lead = pieces.activation_rows(x, self.n, self.k)
        m = x2.shape[0]
        out = np.empty((m, self.n), np.float32)
        if m == 0 or self.n == 0:
            return out.reshape(lead + (self.n,))
        threads = plan_threads(m, self.n, self.k, self.groups, num_threads)
        if m == 1 and (threads == 1 or pool_available()):
            sync_threads()  # the compiled pool splits it when worth it
            if not self._matvec(self.fmt, self.packed, self.n, self.k, x2.reshape(-1), out.reshape(-1)):
                out = self._fallback(x2)
            return out.reshape(lead + (self.n,))
        xq = np.empty((m, self.k), np.int8)
        xd = np.empty((m, self.nb), np.float32)
        if self.kquant:  # Q8K: sixteen 16-element sums per super-block
            quantize, sums = _kernels.quantize_q8k, (np.empty((m, self.nb * 16), np.int32),)
        else:  # Q4_1/Q5_1 take Q8_1 activations, whose stored block sums multiply m_w
            quantize = _kernels.quantize_q8_0
            sums = (np.empty((m, self.nb), np.int32),) + ((np.empty((m, self.nb), np.float32),) if self.q8_1 else ())
        failed = []

        def quantize_rows(a: int, b: int) -> None:
            if not quantize(x2[a:b], b - a, self.k, xq[a:b], xd[a:b], *(part[a:b] for part in sums)):
                failed.append(a)

        if threads > 1 and m >= 2 * threads:  # a prompt's rows, split as its product is
            pool.run_ranges(quantize_rows, m, threads, pieces=threads)
        else:
            quantize_rows(0, m)
        if failed:
            return self._fallback(x2).reshape(lead + (self.n,))
        xs, tail = sums[0], sums[1:]
        kernel = _kernels.matmul
        args = (self.fmt, self.packed, self.n, self.k, xq, xd, xs, m, out)
        if threads == 1:
            kernel(*args, 0, self.groups, *tail)
        else:
            pool.run_ranges(lambda a, b: kernel(*args, a, b, *tail), self.groups, threads)
        return out.reshape(lead + (self.n,))


# ------------------------------------------------------------------- threads
# A product is split across threads only when each thread gets a few hundred
# microseconds of work (a hand-off costs tens): the matrix-vector products of a
# decoder layer never are, so a busy core cannot stall them; prompt-sized
# products and a vocabulary-sized output layer are, in pieces (pool.run_ranges).
MIN_WORK_PER_THREAD = 1 << 23  # multiply-adds


def plan_threads(m: int, n: int, k: int, groups: int, num_threads: int | None) -> int:
    """Threads for an (m, k) x (k, n) product: 1 for small ones (every layer's matrix-vector product)."""
    if m * n * k < 2 * MIN_WORK_PER_THREAD:
        return 1
    if num_threads is None:
        num_threads = pool.CONFIG.get()
    return max(1, min(num_threads, groups, (m * n * k) // MIN_WORK_PER_THREAD))

