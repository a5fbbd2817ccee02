"""Reading safetensors files: one header validator and one memory-mapped reader.

Every loader (``tl.utils.load_safetensors``, ``tl.utils.SafetensorsFile``,
``VarBuilder.from_safetensors`` and so ``Llama.load`` / ``tallow generate``,
``VarMap.load``) reads files through ``SafetensorsReader``, so they accept and
reject the same files. The header is checked as the format's own library does
before any tensor is read:

- an 8-byte little-endian header length that fits in the file, then a JSON object
  (UTF-8, no duplicate keys); ``__metadata__``, if present, maps strings to strings;
- each entry has exactly ``dtype`` (a known safetensors type), ``shape`` (a list of
  non-negative integers; ``true`` or ``1.9`` are not integers) and ``data_offsets``
  (two integers, ``0 <= begin <= end``);
- ``end - begin`` is the byte size of the shape and dtype, and the tensors tile the
  data section exactly: sorted by offset, each begins where the previous one ended,
  and the last ends at the end of the file (no overlaps, no holes, nothing past it).

A violation is a ``FileFormatError`` naming the file and, where one is at fault,
the tensor. A tensor is read through a slice of the map cut to its own
``[begin, end)``, so it can never see another tensor's bytes, and without a copy:
every type loads as the tallow dtype of the same name (BOOL as bool, I8/I16/I32 as
i8/i16/i32, F8_E4M3 and F8_E8M0 as f8e4m3 and f8e8m0). Two exceptions copy: U16
widens to u32 (tallow has no u16), and the packed F4/F6 types (two or four and a
third elements per byte in the file, low bits first) are unpacked to tallow's one
byte per element. Types tallow cannot hold (F8_E5M2, U64, complex) are an
``UnsupportedDTypeError`` when that tensor is asked for, not when the file opens.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct

import numpy as np

from . import dtype as dt
from .errors import FileFormatError, UnsupportedDTypeError
from .tensor_class import Tensor

# The safetensors type names, their size in bits, and how tallow holds them:
# (tallow dtype, NumPy type of the stored bytes) or None where tallow has no twin.
_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4,
    "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
TALLOW_TYPES = {
    "BOOL": (dt.bool_, dt.bool_.np), "U8": (dt.u8, dt.u8.np), "U32": (dt.u32, dt.u32.np),
    "I8": (dt.i8, dt.i8.np), "I16": (dt.i16, dt.i16.np), "I32": (dt.i32, dt.i32.np),
    "I64": (dt.i64, dt.i64.np), "F16": (dt.f16, dt.f16.np), "BF16": (dt.bf16, dt.bf16.np),
    "F32": (dt.f32, dt.f32.np), "F64": (dt.f64, dt.f64.np),
    "F8_E4M3": (dt.f8e4m3, dt.f8e4m3.np), "F8_E8M0": (dt.f8e8m0, dt.f8e8m0.np),
    # Packed in the file (see unpack_bits), one byte per element in tallow.
    "F4": (dt.f4, dt.f4.np), "F6_E2M3": (dt.f6e2m3, dt.f6e2m3.np),
    "F6_E3M2": (dt.f6e3m2, dt.f6e3m2.np),
    # tallow has no u16: widened losslessly when read, as NumPy arrays of it are.
    "U16": (dt.u32, np.dtype(np.uint16)),
}
# The safetensors name of each tallow dtype, for writing.
SAFETENSORS_NAMES = {d: name for name, (d, npd) in TALLOW_TYPES.items() if d.np == npd}
# Sub-byte types: bits per element, packed low bits first.
PACKED_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def unpack_bits(raw: np.ndarray, count: int, bits: int) -> np.ndarray:
    """``count`` codes of ``bits`` bits each, packed low bits first in ``raw`` (bytes),
    as one byte each."""
    flat = np.unpackbits(raw, bitorder="little")[:count * bits].reshape(count, bits)
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (flat * weights).sum(axis=1, dtype=np.uint8)


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of ``unpack_bits``: one-byte codes packed ``bits`` bits each."""
    flat = (codes.reshape(-1, 1) >> np.arange(bits, dtype=np.uint8)) & 1
    return np.packbits(flat.reshape(-1), bitorder="little")
MAX_HEADER_BYTES = 100_000_000  # the format library's own limit
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


class TensorEntry:
    """One tensor's header entry, validated: its type, shape and byte range in the data."""

    __slots__ = ("name", "kind", "shape", "begin", "end")

    def __init__(self, name, kind, shape, begin, end):
        self.name, self.kind, self.shape, self.begin, self.end = name, kind, shape, begin, end

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def _is_int(v) -> bool:
    # JSON true/false load as bool, a subclass of int; 1.0 loads as float.
    return type(v) is int


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(Exception):
    pass


def parse_header(path: str, head: bytes, file_size: int):
    """(entries by name in file order, metadata, data start) of a safetensors file.

    ``head`` is at least the first 8 bytes plus the header they announce.
    """
    if file_size < 8 or len(head) < 8:
        raise FileFormatError(f"{path}: not a safetensors file (only {file_size} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER_BYTES or n > file_size - 8 or len(head) < 8 + n:
        raise FileFormatError(
            f"{path}: not a safetensors file (header length {n} does not fit a file of "
            f"{file_size} bytes)")
    try:
        header = json.loads(head[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise FileFormatError(f"{path}: the header names {e.args[0]!r} twice") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FileFormatError(f"{path}: not a safetensors file (header is not JSON: {e})") \
            from None
    if not isinstance(header, dict):
        raise FileFormatError(f"{path}: not a safetensors file (header is not a JSON object)")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise FileFormatError(f"{path}: __metadata__ must map strings to strings")
    data_start = 8 + n
    data_size = file_size - data_start
    entries = {name: _entry(path, name, info) for name, info in header.items()}
    _check_tiling(path, entries, data_size)
    return entries, metadata, data_start


def _entry(path, name, info) -> TensorEntry:
    def bad(why):
        return FileFormatError(f"{path}: tensor {name!r}: {why}")

    if not isinstance(info, dict):
        raise bad("its header entry is not a JSON object")
    if set(info) != _ENTRY_KEYS:
        raise bad(f"its header entry must have exactly the keys {sorted(_ENTRY_KEYS)}, "
                  f"found {sorted(info)}")
    kind, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(kind, str) or kind not in _BITS:
        raise bad(f"unknown dtype {kind!r}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise bad(f"shape {shape!r} is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_int, offsets))
            or not 0 <= offsets[0] <= offsets[1]):
        raise bad(f"data_offsets {offsets!r} are not two integers 0 <= begin <= end")
    bits = math.prod(shape) * _BITS[kind]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise bad(f"{kind} {shape} needs {bits / 8:g} bytes but data offsets {offsets} hold "
                  f"{offsets[1] - offsets[0]}")
    return TensorEntry(name, kind, tuple(shape), offsets[0], offsets[1])


def _check_tiling(path, entries, data_size):
    pos, prev = 0, None
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin != pos:
            where = f"after tensor {prev.name!r}" if prev else "at the start of the data"
            what = "overlaps" if e.begin < pos else "leaves a gap before"
            raise FileFormatError(
                f"{path}: tensor {e.name!r} {what} the bytes {where} (data offsets "
                f"[{e.begin}, {e.end}), expected to begin at {pos})")
        pos, prev = e.end, e
    if pos != data_size:
        who = (f"tensor {prev.name!r} (data offsets [{prev.begin}, {prev.end})) ends" if prev
               else "the header describes no data and ends")
        raise FileFormatError(
            f"{path}: {who} at data byte {pos}, but the file holds {data_size} data bytes")


class SafetensorsReader:
    """A safetensors file, memory-mapped after its header has been validated."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no such safetensors file: {self.path}")
        if os.path.isdir(self.path):
            raise FileFormatError(f"{self.path}: is a directory, not a safetensors file")
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
                if len(head) == 8:
                    (n,) = struct.unpack("<Q", head)
                    if n <= min(MAX_HEADER_BYTES, size - 8):
                        head += f.read(n)
                self.entries, self.metadata, self._base = parse_header(self.path, head, size)
                # A private (copy-on-write) map: tensors over it may be written in place
                # without touching the file.
                self._map = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                             if size > self._base else None)
        except OSError as e:
            raise FileFormatError(f"{self.path}: cannot read ({e})") from None

    def close(self):
        self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def keys(self):
        return list(self.entries)

    def __contains__(self, name):
        return name in self.entries

    def entry(self, name) -> TensorEntry:
        e = self.entries.get(name)
        if e is None:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        return e

    def shape(self, name) -> tuple:
        return self.entry(name).shape

    def _types(self, name):
        e = self.entry(name)
        found = TALLOW_TYPES.get(e.kind)
        if found is None:
            raise UnsupportedDTypeError(
                f"{self.path}: tensor {name!r} has dtype {e.kind}, which tallow cannot hold "
                f"(supported: {', '.join(sorted(TALLOW_TYPES))})")
        return found

    def dtype(self, name):
        """The tallow dtype the tensor loads as (its own; U16 widens to u32)."""
        return self._types(name)[0]

    def array(self, name) -> np.ndarray:
        """The tensor as stored, over the map (read when touched), cut to its own bytes."""
        e = self.entry(name)
        _, npd = self._types(name)
        if e.count == 0:
            return np.zeros(e.shape, npd)
        window = memoryview(self._map)[self._base + e.begin:self._base + e.end]
        bits = PACKED_BITS.get(e.kind)
        if bits is not None:
            return unpack_bits(np.frombuffer(window, np.uint8), e.count, bits).view(npd).reshape(e.shape)
        return np.frombuffer(window, dtype=npd).reshape(e.shape)

    def get(self, name, dtype=None, device=None):
        """The tensor (in ``dtype`` and on ``device`` when given)."""
        tdtype = self.dtype(name)
        arr = self.array(name)
        if arr.dtype != tdtype.np:
            arr = arr.astype(tdtype.np)  # U16 only
        t = Tensor.from_vec(arr, None)
        if dtype is not None and dt.DType.parse(dtype) is not t.dtype:
            t = t.to_dtype(dtype)
        if device is not None:
            t = t.to_device(device)
        return t


def serialize(arrays: dict, metadata=None) -> bytes:
    """A safetensors file's bytes for ``arrays`` (name -> (safetensors type, C-ordered
    array)), the packed types packed. The header is padded with spaces to 8 bytes, as
    the format's library writes it; tensors follow in the order given."""
    header, chunks, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, (kind, arr) in arrays.items():
        bits = PACKED_BITS.get(kind)
        data = (pack_bits(arr.view(np.uint8).reshape(-1), bits) if bits is not None
                else np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        header[name] = {"dtype": kind, "shape": list(arr.shape),
                        "data_offsets": [pos, pos + data.size]}
        chunks.append(data)
        pos += data.size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(c.tobytes() for c in chunks)
