"""GGUF files (versions 2 and 3): a checked reader over a memory map, and a writer.

Layout (little-endian), as ggml's gguf.cpp reads it:

    "GGUF"  version:u32  n_tensors:u64  n_kv:u64
    n_kv x      key:string  type:u32  value
    n_tensors x name:string n_dims:u32  ne:u64[n_dims]  ggml_type:u32  offset:u64
    padding to ``general.alignment`` (default 32), then the tensor data;
    each tensor's offset is relative to that point and a multiple of the alignment.
    string = len:u64 + bytes;  array = item_type:u32 + count:u64 + items.

The reader trusts nothing in the header: every length and count is checked
against the bytes that remain *before* anything is allocated or looped over,
so a corrupt or hostile file fails at once with a :class:`GgufError` naming
the file and the byte offset, never with a huge allocation or a long loop.
Tensor data is not read: each tensor's bytes are a view of the file's
``np.memmap``.

Metadata values keep their GGUF type (:class:`GgufValue`), so a file read and
written back has the same types; plain Python values given to the writer get
GGUF's usual types (``int`` -> INT32, or INT64 when it does not fit,
``float`` -> FLOAT32, ``bool`` -> BOOL, ``str`` -> STRING, lists -> ARRAY).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterable, Mapping

import numpy as np

from ..atomic import atomic_write
from ..errors import FileFormatError
from .blocks import as_bytes
from .types import GgmlType, ggml_type, is_known_type_id

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 16
# ggml's names of the type ids tallow cannot read, so that an error names the format.
UNSUPPORTED_TYPE_NAMES = {16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 21: "IQ3_S",
                          22: "IQ2_S", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
                          29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}


class GgufError(FileFormatError):
    """A GGUF file that cannot be read (or a value that cannot be written).

    A :class:`tallow.FileFormatError`, hence a ``TallowError`` and a ``ValueError``.
    """


class ValueType(IntEnum):
    """The type codes of GGUF metadata values (the GGUF specification's ``gguf_type``)."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_NUMPY = {
    ValueType.UINT8: np.dtype("<u1"),
    ValueType.INT8: np.dtype("<i1"),
    ValueType.UINT16: np.dtype("<u2"),
    ValueType.INT16: np.dtype("<i2"),
    ValueType.UINT32: np.dtype("<u4"),
    ValueType.INT32: np.dtype("<i4"),
    ValueType.FLOAT32: np.dtype("<f4"),
    ValueType.BOOL: np.dtype("u1"),
    ValueType.UINT64: np.dtype("<u8"),
    ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT64: np.dtype("<f8"),
}
_BY_NUMPY = {np.dtype(v).newbyteorder("="): k for k, v in _NUMPY.items() if k is not ValueType.BOOL}
_BY_NUMPY[np.dtype(bool)] = ValueType.BOOL
# The fewest bytes one array item can take: what the count check multiplies by.
_MIN_ITEM = {**{k: v.itemsize for k, v in _NUMPY.items()}, ValueType.STRING: 8, ValueType.ARRAY: 12}
_INT_RANGE = {
    ValueType.UINT8: (0, 2**8 - 1), ValueType.INT8: (-(2**7), 2**7 - 1),
    ValueType.UINT16: (0, 2**16 - 1), ValueType.INT16: (-(2**15), 2**15 - 1),
    ValueType.UINT32: (0, 2**32 - 1), ValueType.INT32: (-(2**31), 2**31 - 1),
    ValueType.UINT64: (0, 2**64 - 1), ValueType.INT64: (-(2**63), 2**63 - 1),
}


# ---------------------------------------------------------------- values
class GgufValue:
    """A metadata value with its GGUF type.

    ``value`` is a Python ``int``/``float``/``bool``/``str`` for scalars.  For
    ``ARRAY``, ``item_type`` is the element type and ``value`` holds the
    elements: a 1-D NumPy array of the exact dtype for numbers and bools, a
    ``list[str]`` for strings, a ``list[GgufValue]`` for nested arrays.
    """

    __slots__ = ("type", "value", "item_type")

    def __init__(self, type: ValueType, value: Any, item_type: ValueType | None = None):
        self.type = ValueType(type)
        self.item_type = None if item_type is None else ValueType(item_type)
        if self.type is ValueType.ARRAY and self.item_type is None:
            raise GgufError("an ARRAY value needs an item_type")
        self.value = value

    def to_python(self) -> Any:
        """The value as plain Python objects (arrays become lists)."""
        if self.type is not ValueType.ARRAY:
            return self.value
        if self.item_type is ValueType.ARRAY:
            return [v.to_python() for v in self.value]
        if self.item_type is ValueType.STRING:
            return list(self.value)
        return np.asarray(self.value).tolist()

    def __eq__(self, other) -> bool:
        if not isinstance(other, GgufValue):
            return NotImplemented
        if (self.type, self.item_type) != (other.type, other.item_type):
            return False
        if self.type is ValueType.ARRAY and self.item_type not in (ValueType.STRING, ValueType.ARRAY):
            return np.array_equal(np.asarray(self.value), np.asarray(other.value))
        if self.type is ValueType.FLOAT32 or self.type is ValueType.FLOAT64:
            return np.array_equal(self.value, other.value, equal_nan=True)
        return self.value == other.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.type is ValueType.ARRAY:
            n = len(self.value)
            return f"GgufValue(ARRAY[{self.item_type.name}], {n} items)"
        return f"GgufValue({self.type.name}, {self.value!r})"


def to_gguf_value(v: Any) -> GgufValue:
    """A Python or NumPy value as a typed :class:`GgufValue` (see the module doc for the rules)."""
    if isinstance(v, GgufValue):
        return v
    if isinstance(v, (bool, np.bool_)):
        return GgufValue(ValueType.BOOL, bool(v))
    if isinstance(v, np.generic) and v.dtype.newbyteorder("=") in _BY_NUMPY:
        t = _BY_NUMPY[v.dtype.newbyteorder("=")]
        return GgufValue(t, v.item())
    if isinstance(v, int):
        return GgufValue(_int_type(v, v), v)
    if isinstance(v, float):
        return GgufValue(ValueType.FLOAT32, v)
    if isinstance(v, (str, bytes)):
        return GgufValue(ValueType.STRING, v if isinstance(v, str) else v.decode("utf-8", "surrogateescape"))
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise GgufError(f"only 1-D arrays can be metadata, got shape {v.shape}")
        if v.dtype.kind in "US":
            return GgufValue(ValueType.ARRAY, [str(s) for s in v], ValueType.STRING)
        key = v.dtype.newbyteorder("=")
        if key not in _BY_NUMPY:
            raise GgufError(f"no GGUF type for NumPy dtype {v.dtype}")
        return GgufValue(ValueType.ARRAY, v.copy(), _BY_NUMPY[key])
    if isinstance(v, (list, tuple)):
        return _list_value(list(v))
    raise GgufError(f"no GGUF type for a value of type {type(v).__name__}")


def _int_type(lo: int, hi: int) -> ValueType:
    """The type plain Python ints get: INT32, else INT64, else UINT64."""
    for t in (ValueType.INT32, ValueType.INT64, ValueType.UINT64):
        t_lo, t_hi = _INT_RANGE[t]
        if t_lo <= lo and hi <= t_hi:
            return t
    raise GgufError(f"integers in [{lo}, {hi}] do not fit one GGUF integer type")


def _list_value(items: list) -> GgufValue:
    if not items:
        return GgufValue(ValueType.ARRAY, np.zeros(0, np.int32), ValueType.INT32)
    typed = [to_gguf_value(i) for i in items]
    kinds = {t.type for t in typed}
    if kinds == {ValueType.ARRAY}:
        return GgufValue(ValueType.ARRAY, typed, ValueType.ARRAY)
    if kinds == {ValueType.STRING}:
        return GgufValue(ValueType.ARRAY, [t.value for t in typed], ValueType.STRING)
    if kinds == {ValueType.BOOL}:
        return GgufValue(ValueType.ARRAY, np.array([t.value for t in typed], bool), ValueType.BOOL)
    if len(kinds) == 1 and not all(type(i) is int for i in items):  # NumPy scalars keep their type
        (t,) = kinds
        return GgufValue(ValueType.ARRAY, np.array([x.value for x in typed], _NUMPY[t].newbyteorder("=")), t)
    if all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in items):
        values = [int(i) for i in items]
        t = _int_type(min(values), max(values))
        return GgufValue(ValueType.ARRAY, np.array(values, _NUMPY[t].newbyteorder("=")), t)
    if kinds <= {ValueType.FLOAT32, ValueType.INT32, ValueType.INT64}:
        return GgufValue(ValueType.ARRAY, np.array([float(t.value) for t in typed], np.float32), ValueType.FLOAT32)
    raise GgufError(f"cannot store a list mixing {sorted(k.name for k in kinds)} as one GGUF array")


# ---------------------------------------------------------------- tensors
@dataclass
class GgufTensor:
    """One tensor of a GGUF file.

    ``shape`` is row-major, outermost dimension first (GGUF stores ggml's
    ``ne``, innermost first; ``ne`` is that order).  ``data`` holds the raw
    GGML blocks as a uint8 array: for a file that was read, a view of its
    memory map.  ``offset`` is relative to the file's data section.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: GgmlType
    data: np.ndarray
    offset: int = 0

    @property
    def ne(self) -> tuple[int, ...]:
        return tuple(reversed(self.shape))

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    def dequantize(self) -> np.ndarray:
        """float32 array of ``shape`` (reads the bytes)."""
        return self.ggml_type.dequantize(self.data, self.n_elements).reshape(self.shape)


@dataclass
class GgufFile:
    """What :func:`read_gguf` returns: metadata and tensors, in file order."""

    path: str
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, GgufValue]
    tensors: dict[str, GgufTensor]

    def value(self, key: str, default: Any = None) -> Any:
        """A metadata value as plain Python, or ``default`` when the key is absent."""
        v = self.metadata.get(key)
        return default if v is None else v.to_python()


# ---------------------------------------------------------------- reading
class _Cursor:
    """Bounds-checked reads over the mapped file; every failure names file and offset."""

    def __init__(self, buf: np.ndarray, path: str):
        # A memoryview: slicing it and unpack_from on it cost far less than memmap slices.
        self.mv, self.path, self.pos, self.end = memoryview(buf), path, 0, int(buf.size)

    def fail(self, msg: str, at: int | None = None) -> GgufError:
        return GgufError(f"{self.path}: {msg} (at byte {self.pos if at is None else at})")

    def need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            raise self.fail(f"file truncated: {what} needs {n} bytes, {self.end - self.pos} left "
                            f"of {self.end}")

    def take(self, n: int, what: str) -> memoryview:
        self.need(n, what)
        out = self.mv[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        self.need(size, what)
        out = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += size
        return out

    def u32(self, what: str) -> int:
        return self.unpack("<I", what)[0]

    def u64(self, what: str) -> int:
        return self.unpack("<Q", what)[0]

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        # surrogateescape keeps any bytes, so a non-UTF-8 token survives a round trip.
        return str(self.take(n, f"{what} of {n} bytes"), "utf-8", "surrogateescape")

    def count(self, n: int, item_size: int, what: str) -> None:
        """Refuse a count whose smallest possible encoding would not fit in the file."""
        if n * item_size > self.end - self.pos:
            raise self.fail(f"file truncated or corrupt: {what} claims {n} items of at least "
                            f"{item_size} bytes, only {self.end - self.pos} bytes left")

    def value(self, vtype: int, what: str, depth: int = 0) -> GgufValue:
        start = self.pos
        try:
            t = ValueType(vtype)
        except ValueError:
            raise self.fail(f"{what}: unknown value type {vtype}", start - 4) from None
        if t is ValueType.STRING:
            return GgufValue(t, self.string(what))
        if t is ValueType.ARRAY:
            if depth >= MAX_ARRAY_NESTING:
                raise self.fail(f"{what}: arrays nested deeper than {MAX_ARRAY_NESTING}")
            item = self.u32(f"item type of {what}")
            n = self.u64(f"item count of {what}")
            try:
                it = ValueType(item)
            except ValueError:
                raise self.fail(f"{what}: unknown array item type {item}", self.pos - 12) from None
            self.count(n, _MIN_ITEM[it], what)
            if it is ValueType.STRING:
                return GgufValue(t, [self.string(f"{what}[{i}]") for i in range(n)], it)
            if it is ValueType.ARRAY:  # each item is an untagged array: item type, count, items
                return GgufValue(t, [self.value(it, f"{what}[{i}]", depth + 1) for i in range(n)], it)
            dt = _NUMPY[it]
            raw = np.frombuffer(self.take(n * dt.itemsize, what), dtype=dt)
            arr = raw.astype(bool) if it is ValueType.BOOL else raw.astype(dt.newbyteorder("="))
            return GgufValue(t, arr, it)
        dt = _NUMPY[t]
        scalar = np.frombuffer(self.take(dt.itemsize, what), dtype=dt)[0]
        if t is ValueType.BOOL:
            return GgufValue(t, bool(scalar))
        return GgufValue(t, scalar.item())


def read_gguf(path: str | os.PathLike) -> GgufFile:
    """Parse a GGUF file's header and map its tensor data (see the module doc)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size < 24:
        raise GgufError(f"{path}: file truncated: {size} bytes, a GGUF header needs 24 (at byte 0)")
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(mm, path)
    magic = cur.take(4, "magic")
    if bytes(magic) != GGUF_MAGIC:
        raise cur.fail(f"not a GGUF file: magic {bytes(magic)!r}, expected {GGUF_MAGIC!r}", 0)
    version = cur.u32("version")
    if version == 1:
        raise cur.fail("GGUF version 1 is not supported (only 2 and 3)", 4)
    if version not in (2, 3):
        hint = " (a big-endian file?)" if version in (0x02000000, 0x03000000) else ""
        raise cur.fail(f"unsupported GGUF version {version}{hint}", 4)
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    # Smallest encodings: a KV is key length, type and a 1-byte value; a
    # tensor info is name length, n_dims, type and offset.
    cur.count(n_kv, 8 + 4 + 1, "metadata count")
    cur.count(n_tensors, 8 + 4 + 4 + 8, "tensor count")

    metadata: dict[str, GgufValue] = {}
    kv_at: dict[str, int] = {}
    for i in range(n_kv):
        at = cur.pos
        key = cur.string(f"key of metadata entry {i}")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}", at)
        vtype = cur.u32(f"type of {key!r}")
        metadata[key], kv_at[key] = cur.value(vtype, repr(key)), at

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        a = metadata["general.alignment"]
        if a.type is not ValueType.UINT32 or a.value == 0 or a.value & (a.value - 1):
            raise cur.fail(f"general.alignment must be a power of two UINT32, got {a!r}", kv_at["general.alignment"])
        alignment = a.value

    infos = []
    for i in range(n_tensors):
        at = cur.pos
        name = cur.string(f"name of tensor {i}")
        n_dims = cur.u32(f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dimensions, at most {MAX_DIMS} allowed", cur.pos - 4)
        ne = cur.unpack(f"<{n_dims}Q", f"dimensions of {name!r}")
        type_id = cur.u32(f"type of {name!r}")
        offset = cur.u64(f"data offset of {name!r}")
        infos.append((at, name, ne, type_id, offset))

    data_offset = -(-cur.pos // alignment) * alignment
    tensors: dict[str, GgufTensor] = {}
    for at, name, ne, type_id, offset in infos:
        if name in tensors:
            raise GgufError(f"{path}: duplicate tensor name {name!r} (at byte {at})")
        if not is_known_type_id(type_id):
            kind = UNSUPPORTED_TYPE_NAMES.get(type_id)
            raise GgufError(
                f"{path}: tensor {name!r} has unsupported GGML type {type_id}"
                f"{f' ({kind})' if kind else ''} (at byte {at}); "
                "convert the model to a supported type (F32, F16, BF16, Q4_0..Q8_0, the K-quants, "
                "IQ4_NL, IQ4_XS)")
        t = ggml_type(type_id)
        # ggml's ne is int64_t: each dimension, and the element count of the
        # non-zero ones, must fit it (as gguf.cpp checks), or shapes overflow later.
        n_el = nonzero = 1
        for d in ne:
            n_el *= d
            nonzero *= max(d, 1)
        if nonzero >= 2**63:
            raise GgufError(f"{path}: tensor {name!r}: dimensions {list(ne)} give an element count "
                            f"past 2**63 (at byte {at})")
        row = ne[0] if ne else 1  # no dimensions: one element, as ggml's ne defaults to 1
        if row % t.block_size:
            raise GgufError(f"{path}: tensor {name!r}: row length {row} is not a multiple of "
                            f"the {t.name} block size {t.block_size} (at byte {at})")
        nbytes = n_el // t.block_size * t.type_size
        if offset % alignment:
            raise GgufError(f"{path}: tensor {name!r} data offset {offset} is not a multiple of "
                            f"the alignment {alignment} (at byte {at})")
        start = data_offset + offset
        if start + nbytes > size:
            raise GgufError(f"{path}: tensor {name!r} data runs past the end of the file: bytes "
                            f"{start}..{start + nbytes} of {size} (at byte {at})")
        shape = tuple(int(d) for d in reversed(ne))
        tensors[name] = GgufTensor(name, shape, t, mm[start : start + nbytes], offset)
    return GgufFile(path, version, alignment, data_offset, metadata, tensors)


# ---------------------------------------------------------------- writing
def _pack_string(s: str) -> bytes:
    b = s.encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _pack_value(v: GgufValue, depth: int = 0) -> bytes:
    t = v.type
    if t is ValueType.STRING:
        return _pack_string(v.value)
    if t is ValueType.ARRAY:
        if depth >= MAX_ARRAY_NESTING:
            raise GgufError(f"arrays nested deeper than {MAX_ARRAY_NESTING}")
        it = v.item_type
        head = struct.pack("<IQ", int(it), len(v.value))
        if it is ValueType.STRING:
            return head + b"".join(_pack_string(s) for s in v.value)
        if it is ValueType.ARRAY:
            parts = []
            for sub in v.value:
                sub = to_gguf_value(sub)
                if sub.type is not ValueType.ARRAY:
                    raise GgufError(f"an ARRAY of ARRAY holds a {sub.type.name}")
                parts.append(_pack_value(sub, depth + 1))  # items carry no type tag
            return head + b"".join(parts)
        arr = np.asarray(v.value)
        if it is ValueType.BOOL:
            arr = arr.astype(bool).astype(np.uint8)
        else:
            _check_range(arr, it)
        return head + np.ascontiguousarray(arr, dtype=_NUMPY[it]).tobytes()
    if t is ValueType.BOOL:
        return struct.pack("<B", 1 if v.value else 0)
    _check_range(np.asarray(v.value), t)
    return np.asarray(v.value, dtype=_NUMPY[t]).tobytes()


def _check_range(arr: np.ndarray, t: ValueType) -> None:
    if t in _INT_RANGE and arr.size:
        lo, hi = _INT_RANGE[t]
        vals = arr.astype(object) if arr.dtype.kind not in "iu" else arr
        if vals.min() < lo or vals.max() > hi:
            raise GgufError(f"value out of range for {t.name}")


def _as_tensor(name: str, t: Any) -> GgufTensor:
    if isinstance(t, GgufTensor):
        return t
    if isinstance(t, np.ndarray) and t.dtype in (np.float32, np.float16):
        kind = ggml_type("F32" if t.dtype == np.float32 else "F16")
        return GgufTensor(name, tuple(t.shape), kind, as_bytes(t))
    if isinstance(t, tuple) and len(t) == 3:
        data, shape, kind = t
        kind = ggml_type(kind)
        return GgufTensor(name, tuple(int(d) for d in shape), kind, as_bytes(data))
    raise GgufError(f"tensor {name!r}: give a float32/float16 array, a GgufTensor, or (bytes, shape, ggml_type)")


def write_gguf(
    path: str | os.PathLike,
    tensors: Mapping[str, Any] | Iterable[GgufTensor],
    metadata: Mapping[str, Any] | None = None,
    alignment: int | None = None,
) -> None:
    """Write a GGUF v3 file.

    ``tensors``: a mapping name -> float32/float16 array, ``GgufTensor`` or
    ``(raw bytes, shape, ggml type)``, or an iterable of ``GgufTensor`` (such
    as ``read_gguf(...).tensors.values()``).  Shapes are row-major.
    ``metadata``: key -> ``GgufValue`` or plain value.  The alignment is
    ``general.alignment`` if the metadata has it, else ``alignment`` (stored
    only when not the default 32).
    """
    meta = {k: to_gguf_value(v) for k, v in (metadata or {}).items()}
    if "general.alignment" in meta:
        a = meta["general.alignment"]
        if a.type is not ValueType.UINT32:
            meta["general.alignment"] = a = GgufValue(ValueType.UINT32, int(a.value))
        if alignment is not None and alignment != a.value:
            raise GgufError(f"alignment {alignment} disagrees with general.alignment {a.value}")
        alignment = a.value
    alignment = DEFAULT_ALIGNMENT if alignment is None else int(alignment)
    if alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"alignment must be a power of two, got {alignment}")
    if alignment != DEFAULT_ALIGNMENT:
        meta["general.alignment"] = GgufValue(ValueType.UINT32, alignment)

    items = tensors.items() if isinstance(tensors, Mapping) else ((t.name, t) for t in tensors)
    tlist = [_as_tensor(name, t) for name, t in items]
    seen = set()
    for t in tlist:
        if t.name in seen:
            raise GgufError(f"duplicate tensor name {t.name!r}")
        seen.add(t.name)
        if len(t.shape) > MAX_DIMS:
            raise GgufError(f"tensor {t.name!r} has {len(t.shape)} dimensions, at most {MAX_DIMS}")
        n_el = int(np.prod(t.shape, dtype=object)) if t.shape else 1
        if t.data.size != t.ggml_type.nbytes(n_el):
            raise GgufError(f"tensor {t.name!r}: {t.data.size} bytes for shape {t.shape} "
                            f"as {t.ggml_type.name} (expected {t.ggml_type.nbytes(n_el)})")

    header = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(tlist), len(meta))]
    for key, v in meta.items():
        header += [_pack_string(key), struct.pack("<I", int(v.type)), _pack_value(v)]
    offsets, pos = [], 0
    for t in tlist:
        offsets.append(pos)
        pos += -(-t.nbytes // alignment) * alignment
    for t, off in zip(tlist, offsets):
        header += [_pack_string(t.name), struct.pack(f"<I{len(t.shape)}Q", len(t.shape), *t.ne),
                   struct.pack("<IQ", t.ggml_type.type_id, off)]
    head = b"".join(header)
    # The tensors may be views of this very file's memory map (read, then saved
    # back with new metadata): truncating it in place would zero or unmap their
    # bytes mid-write.  A new file renamed over the old one leaves the old inode,
    # and so the map, intact until it is closed.
    with atomic_write(path) as f:
        f.write(head)
        f.write(b"\0" * (-len(head) % alignment))
        for t in tlist:
            f.write(memoryview(np.ascontiguousarray(t.data)))
            f.write(b"\0" * (-t.nbytes % alignment))
