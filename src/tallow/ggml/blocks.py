"""Shared helpers for the GGML block formats.

Everything here works on whole arrays of blocks at once: a block format's
code is a handful of array expressions over ``(n_blocks, block_size)`` floats
or ``(n_blocks, type_size)`` bytes, never a Python loop per block.

The rounding helpers reproduce Rust's float semantics, because the K-quant
quantizers follow candle's Rust code bit for bit:

* ``f32::round`` rounds half away from zero (NumPy's ``rint`` rounds half to
  even), and
* ``f32 as i32`` saturates and maps NaN to 0 (NumPy's cast is undefined there).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def float_blocks(x: np.ndarray, block_size: int, type_name: str) -> np.ndarray:
    """View ``x`` as float32 blocks of ``block_size`` elements.

    The last dimension must be a multiple of the block size: GGML blocks never
    straddle two rows, so a row that does not fill whole blocks has no
    encoding.
    """
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError(f"cannot quantize a scalar to {type_name}")
    if x.shape[-1] % block_size != 0:
        raise ValueError(
            f"cannot quantize to {type_name}: last dimension {x.shape[-1]} "
            f"(shape {tuple(x.shape)}) is not a multiple of the block size {block_size}"
        )
    x = np.ascontiguousarray(x, dtype=F32)
    return x.reshape(-1, block_size)


def as_bytes(raw) -> np.ndarray:
    """Any array or buffer as a flat uint8 array (a view when possible)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=np.uint8)
    data = np.asarray(raw)
    if data.dtype != np.uint8:
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return data.reshape(-1)


def byte_blocks(raw, n_elements: int, block_size: int, type_size: int, type_name: str) -> np.ndarray:
    """View raw bytes as ``(n_blocks, type_size)`` uint8 blocks, checking the size."""
    if n_elements < 0 or n_elements % block_size != 0:
        raise ValueError(
            f"{type_name}: element count {n_elements} is not a multiple of the block size {block_size}"
        )
    data = as_bytes(raw)
    n_blocks = n_elements // block_size
    expected = n_blocks * type_size
    if data.size != expected:
        raise ValueError(
            f"{type_name}: {n_elements} elements need {expected} bytes "
            f"({n_blocks} blocks of {type_size}), got {data.size}"
        )
    return data.reshape(n_blocks, type_size)


def f16_bytes(values: np.ndarray) -> np.ndarray:
    """float32 values -> their IEEE half bytes (round to nearest even, as ``half::f16::from_f32``)."""
    return np.ascontiguousarray(values, dtype=F32).astype(np.float16).view(np.uint8)


def f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    """The little-endian f16 at byte ``start`` of every block, as float32 of shape (n, 1)."""
    return np.ascontiguousarray(blocks[:, start : start + 2]).view(np.float16).astype(F32)


def f16_round(values: np.ndarray) -> np.ndarray:
    """What a value becomes after a trip through f16 (as stored in a block)."""
    return np.asarray(values, dtype=F32).astype(np.float16).astype(F32)


def round_away(v: np.ndarray) -> np.ndarray:
    """Round half away from zero, exactly (Rust ``f32::round``).

    ``trunc(v + 0.5)`` is wrong for 0.49999997 (the sum rounds up to 1.0);
    ``v - trunc(v)`` is exact, so deciding on the fraction is not.
    """
    v = np.asarray(v, dtype=F32)
    t = np.trunc(v)
    with np.errstate(invalid="ignore"):
        step = np.where(np.abs(v - t) >= F32(0.5), np.sign(v), F32(0))
    return t + step


def nearest_int(v: np.ndarray, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """candle's ``nearest_int`` (``v.round() as i32``), optionally followed by ``clamp(lo, hi)``.

    Returns int32.  NaN gives 0 and infinities saturate, as Rust's cast does,
    so degenerate blocks (a zero scale, say) encode exactly as in candle.
    """
    r = round_away(v)
    r = np.where(np.isnan(r), F32(0), r)
    lo_f = -(2.0**31) if lo is None else lo
    hi_f = 2.0**31 if hi is None else hi
    r = np.clip(r, lo_f, hi_f).astype(np.int64)
    if hi is None:
        r = np.minimum(r, 2**31 - 1)
    return r.astype(np.int32)


def seq_sum(a: np.ndarray) -> np.ndarray:
    """Left-to-right float32 sum over the last axis.

    The reference code accumulates in a plain loop; NumPy's ``sum`` is
    pairwise and rounds differently.  ``cumsum`` is a sequential loop, so its
    last column is the reference sum bit for bit.
    """
    return np.cumsum(np.asarray(a, dtype=F32), axis=-1, dtype=F32)[..., -1]


def first_absmax(x: np.ndarray) -> np.ndarray:
    """Per row, the signed value of largest magnitude, first one on ties.

    candle scans with ``if ax > amax`` from ``amax = 0``: the first maximum
    wins (its sign matters, several formats divide by it), NaN never wins,
    and a row with nothing above zero gives 0.
    """
    a = np.abs(x)
    if np.isnan(a).any():
        a = np.where(np.isnan(a), F32(-1), a)
    idx = np.argmax(a, axis=-1)[..., None]
    best = np.take_along_axis(x, idx, axis=-1)[..., 0]
    return np.where(np.take_along_axis(a, idx, axis=-1)[..., 0] > 0, best, F32(0)).astype(F32)


def pack_nibbles(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Two arrays of 4-bit values -> bytes ``lo | hi << 4``."""
    return (lo.astype(np.uint8) & 0x0F) | (hi.astype(np.uint8) << 4)


def bits_le(values: np.ndarray) -> np.ndarray:
    """Bit ``i`` of ``values[..., i]`` (0/1) packed little-endian into bytes."""
    return np.packbits(values.astype(np.uint8) & 1, axis=-1, bitorder="little")


def unpack_bits_le(data: np.ndarray) -> np.ndarray:
    """Inverse of :func:`bits_le`: bytes -> 0/1 uint8, bit ``i`` at index ``i``."""
    return np.unpackbits(data, axis=-1, bitorder="little")
