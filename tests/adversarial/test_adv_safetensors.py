"""Corrupt safetensors files: every loader gives the exact tensors or a clear error.

The loaders (``load_safetensors``, ``SafetensorsFile``, ``VarBuilder.from_safetensors``,
``VarMap.load``) share one header validator. A hypothesis property mutates the header
and the bytes of a valid file; whatever a loader returns must be exactly the bytes
of each tensor's own ``[begin, end)`` range (checked here independently of tallow),
and whatever it refuses must be refused with a ``FileFormatError`` (or, for a type
tallow cannot hold, an ``UnsupportedDTypeError``) naming the file.
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save

import tallow as tl
from tallow.errors import FileFormatError, UnsupportedDTypeError
from tallow.nn import VarBuilder

NP_OF = {"F32": np.float32, "U8": np.uint8, "BF16": ml_dtypes.bfloat16, "I32": np.int32,
         "F64": np.float64, "I64": np.int64, "U32": np.uint32, "F16": np.float16,
         "BOOL": np.bool_, "I8": np.int8, "I16": np.int16, "U16": np.uint16}
SIZE_OF = {k: np.dtype(v).itemsize for k, v in NP_OF.items()}

GOOD = {
    "w": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "ids": np.array([1, 2, 3, 250, 7], dtype=np.uint8),
    "h": np.array([1.5, -2.0, 3.25, 0.0], dtype=ml_dtypes.bfloat16),
    "n": np.array([-7, 2**31 - 1], dtype=np.int32),
}


def split(blob: bytes):
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def join(header: dict, data: bytes, length=None) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


GOOD_HEADER, GOOD_DATA = split(save(GOOD, metadata={"format": "np"}))

# -- mutations ----------------------------------------------------------------------------

json_scalar = st.one_of(st.integers(-(2**65), 2**65), st.floats(allow_nan=False), st.booleans(),
                        st.none(), st.text(max_size=3))
json_value = st.recursive(json_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.text(max_size=3), c, max_size=2), max_leaves=6)
small_int = st.integers(-3, 80)
names = st.sampled_from(sorted(GOOD))


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["shape", "shape_ints", "offsets", "offsets_ints", "dtype",
                                 "drop_key", "extra_key", "entry", "metadata", "length",
                                 "truncate", "append", "flip"]))
    return (kind, draw(names), draw(json_value), draw(st.lists(small_int, min_size=0, max_size=4)),
            draw(st.integers(0, 200)), draw(st.sampled_from(sorted(_all_types()))))


def _all_types():
    return set(NP_OF) | {"F8_E4M3", "F8_E5M2", "C64", "U64", "F4", "X9", ""}


def apply(m) -> tuple[bytes, str | None]:
    """The mutated file, and the tensor whose entry was changed (None: file-level)."""
    kind, name, value, ints, k, dtype = m
    header = json.loads(json.dumps(GOOD_HEADER))
    data = GOOD_DATA
    entry = header[name]
    length = None
    if kind == "shape":
        entry["shape"] = value
    elif kind == "shape_ints":
        entry["shape"] = ints
    elif kind == "offsets":
        entry["data_offsets"] = value
    elif kind == "offsets_ints":
        entry["data_offsets"] = ints[:2] if len(ints) >= 2 else ints
    elif kind == "dtype":
        entry["dtype"] = dtype
    elif kind == "drop_key":
        del entry[sorted(entry)[k % 3]]
    elif kind == "extra_key":
        entry["extra"] = value
    elif kind == "entry":
        header[name] = value
    elif kind == "metadata":
        header["__metadata__"] = value
    elif kind == "length":
        h = json.dumps(header).encode()
        length = max(0, len(h) + (k - 100)) if k != 200 else 2**63
    elif kind == "truncate":
        data = data[:k % (len(data) + 1)]
    elif kind == "append":
        data = data + b"\0" * (k % 9)
    elif kind == "flip":
        # Corrupt data bytes: tensors still load, with exactly the file's bytes.
        b = bytearray(data)
        b[k % len(b)] ^= 0xFF
        data = bytes(b)
    touched = name if kind in ("shape", "shape_ints", "offsets", "offsets_ints", "dtype",
                               "drop_key", "extra_key", "entry") else None
    return join(header, data, length), touched


# -- the independent oracle -----------------------------------------------------------------

def expected_tensor(blob: bytes, name: str) -> np.ndarray:
    """The tensor as this header describes it, read from its own bytes only."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    e = header[name]
    begin, end = e["data_offsets"]
    shape = e["shape"]
    assert all(type(d) is int and d >= 0 for d in shape), f"accepted shape {shape}"
    assert type(begin) is int and type(end) is int and 0 <= begin <= end <= len(data), \
        f"accepted offsets {e['data_offsets']} for {len(data)} data bytes"
    for other, oe in header.items():
        if other not in (name, "__metadata__"):
            ob, oend = oe["data_offsets"]
            assert end <= ob or oend <= begin or begin == end or ob == oend, \
                f"{name} [{begin},{end}) overlaps {other} [{ob},{oend})"
    return np.frombuffer(data[begin:end], dtype=NP_OF[e["dtype"]]).reshape(shape)


def same_values(t: tl.Tensor, want: np.ndarray):
    got = t.numpy()
    assert got.shape == want.shape
    if want.dtype == np.bool_:
        want = want.astype(np.uint8)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def check_refusal(err, path, touched):
    assert isinstance(err, (FileFormatError, UnsupportedDTypeError)), repr(err)
    assert str(path) in str(err), f"error does not name the file: {err}"
    if touched is not None:
        assert any(repr(n) in str(err) for n in GOOD), f"error names no tensor: {err}"


LOADERS = ["load_safetensors", "VarBuilder", "SafetensorsFile"]


def load_with(loader, path) -> dict:
    if loader == "load_safetensors":
        return tl.utils.load_safetensors(path)
    if loader == "SafetensorsFile":
        with tl.utils.SafetensorsFile(path) as f:
            return {k: f.get(k) for k in f.keys()}
    vb = VarBuilder.from_safetensors([path], dtype=tl.f64)  # exact for every stored type here
    return {k: vb.get(None, k) for k in vb.keys()}


@pytest.mark.parametrize("loader", LOADERS)
def test_the_valid_file_loads_exactly(tmp_path, loader):
    path = tmp_path / "good.safetensors"
    path.write_bytes(join(GOOD_HEADER, GOOD_DATA))
    got = load_with(loader, str(path))
    assert sorted(got) == sorted(GOOD)
    for k, v in GOOD.items():
        same_values(got[k], v)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=mutation())
def test_mutated_files_load_exactly_or_are_refused(tmp_path_factory, m):
    blob, touched = apply(m)
    path = tmp_path_factory.mktemp("st") / "mutated.safetensors"
    path.write_bytes(blob)
    outcomes = {}
    for loader in LOADERS:
        try:
            got = load_with(loader, str(path))
        except Exception as e:  # noqa: BLE001 - the property is about which errors
            check_refusal(e, path, touched)
            outcomes[loader] = type(e).__name__
            continue
        for k, t in got.items():
            same_values(t, expected_tensor(blob, k))
        outcomes[loader] = "loaded"
    # One validator: every loader takes the same decision.
    assert len(set(outcomes.values())) == 1, outcomes


# -- the reported cases, one by one ------------------------------------------------------------

def _file(tmp_path, header, data=b"\0" * 16):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(join(header, data))
    return p


@pytest.mark.parametrize("entry", [
    {"dtype": "F32", "shape": [-1, 1], "data_offsets": [4, 0]},
    {"dtype": "F32", "shape": [1.9], "data_offsets": [0, 4]},
    {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]},
    {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]},
    {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
    {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]},
])
@pytest.mark.parametrize("loader", LOADERS)
def test_bad_entries_are_refused_naming_file_and_tensor(tmp_path, entry, loader):
    other = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    p = _file(tmp_path, {"bad": entry, "other": other})
    with pytest.raises(FileFormatError, match=r"bad\.safetensors.*'bad'"):
        load_with(loader, str(p))


@pytest.mark.parametrize("loader", LOADERS)
def test_overlapping_tensors_are_refused(tmp_path, loader):
    p = _file(tmp_path, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})
    with pytest.raises(FileFormatError, match=r"bad\.safetensors.*'b'.*overlaps"):
        load_with(loader, str(p))


@pytest.mark.parametrize("loader", LOADERS)
def test_deep_json_is_a_format_error(tmp_path, loader):
    p = tmp_path / "deep.safetensors"
    h = b"[" * 100000 + b"]" * 100000
    p.write_bytes(struct.pack("<Q", len(h)) + h)
    with pytest.raises(FileFormatError, match="deep.safetensors"):
        load_with(loader, str(p))


@pytest.mark.parametrize("loader", LOADERS)
def test_f8_e5m2_tensors_are_unsupported_dtype_errors(tmp_path, loader):
    # F8_E5M2 is no candle dtype (F8_E4M3 and F8_E8M0 are, and load).
    p = _file(tmp_path, {"f8": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [0, 4]},
                         "ok": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}})
    with pytest.raises(UnsupportedDTypeError, match=r"bad\.safetensors.*'f8'.*F8_E5M2"):
        load_with(loader, str(p))
    # The other tensors of the file stay readable.
    vb = VarBuilder.from_safetensors(str(p))
    assert vb.get((3,), "ok").shape == (3,)
