"""GGUF reading and writing against the gguf package, plus every kind of corrupt header."""

import struct
import time
import tracemalloc

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tallow.quantized import ggml_type
from tallow.ggml.gguf_io import GgufError, GgufTensor, GgufValue, ValueType, read_gguf, write_gguf

F = np.float32
VT = ValueType


def gguf_package_file(path, alignment=None):
    """A file written by the gguf package with one of every value type and several tensor types."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", False)
    w.add_string("t.str", "unicode: ünï ✓")
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.strs", ["a", "", "ccc"])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_array("t.nested", [[1, 2], [3, 4, 5]])
    w.add_key_value("t.u16s", [1, 2, 65535], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT16)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 256)).astype(F)
    tensors = {"a.f32": (x, "F32"), "b.f16": (x.astype(np.float16), "F16")}
    w.add_tensor("a.f32", x)
    w.add_tensor("b.f16", x.astype(np.float16))
    for name in ["Q4_0", "Q8_0", "Q4K", "Q6K"]:
        raw = ggml_type(name).quantize(x)
        qt = gguf.GGMLQuantizationType[ggml_type(name).ggml_name.upper()]
        w.add_tensor(f"c.{name}", raw, raw_shape=raw.shape, raw_dtype=qt)
        tensors[f"c.{name}"] = (raw, name)
    w.add_tensor("d.vec", np.arange(5, dtype=F))
    tensors["d.vec"] = (np.arange(5, dtype=F), "F32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


EXPECTED_META = {
    "general.architecture": (VT.STRING, "llama"),
    "t.u8": (VT.UINT8, 255), "t.i8": (VT.INT8, -128), "t.u16": (VT.UINT16, 65535),
    "t.i16": (VT.INT16, -32768), "t.u32": (VT.UINT32, 4294967295), "t.i32": (VT.INT32, -2147483648),
    "t.u64": (VT.UINT64, 2**64 - 1), "t.i64": (VT.INT64, -(2**63)),
    "t.f32": (VT.FLOAT32, float(np.float32(0.1))), "t.f64": (VT.FLOAT64, 0.1),
    "t.bool": (VT.BOOL, False), "t.str": (VT.STRING, "unicode: ünï ✓"),
    "t.ints": (VT.ARRAY, [1, -2, 3]), "t.strs": (VT.ARRAY, ["a", "", "ccc"]),
    "t.floats": (VT.ARRAY, [0.5, 1.5]), "t.nested": (VT.ARRAY, [[1, 2], [3, 4, 5]]),
    "t.u16s": (VT.ARRAY, [1, 2, 65535]),
}


@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_files_written_by_gguf_package(tmp_path, alignment):
    path = tmp_path / "model.gguf"
    tensors = gguf_package_file(path, alignment)
    f = read_gguf(path)
    assert f.version == 3 and f.alignment == (alignment or 32)
    meta = {k: v for k, v in f.metadata.items() if k != "general.alignment"}
    assert list(meta) == list(EXPECTED_META)
    for key, (vtype, value) in EXPECTED_META.items():
        assert meta[key].type is vtype, key
        assert meta[key].to_python() == value, key
    assert meta["t.u16s"].item_type is VT.UINT16 and meta["t.u16s"].value.dtype == np.uint16
    assert meta["t.nested"].item_type is VT.ARRAY and meta["t.nested"].value[0].item_type is VT.INT32
    assert list(f.tensors) == list(tensors)
    for name, (data, tname) in tensors.items():
        t = f.tensors[name]
        assert isinstance(t.data, np.memmap)  # mapped, not read
        assert t.ggml_type is ggml_type(tname)
        expected_shape = data.shape if tname in ("F32", "F16") else (3, 256)
        assert t.shape == expected_shape
        np.testing.assert_array_equal(t.data, np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        assert (f.data_offset + t.offset) % f.alignment == 0
    np.testing.assert_array_equal(f.tensors["a.f32"].dequantize(), tensors["a.f32"][0])


def test_our_writer_is_read_back_by_gguf_package(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 512)).astype(F)
    raw = ggml_type("Q5K").quantize(x)
    meta = {
        "general.architecture": "test",
        "u8": GgufValue(VT.UINT8, 7),
        "f64": GgufValue(VT.FLOAT64, 1 / 3),
        "big": 2**40,
        "flag": True,
        "names": ["x", "yé"],
        "nested": [[1, 2], [3]],
        "u64s": np.array([1, 2**63], np.uint64),
    }
    path = tmp_path / "ours.gguf"
    write_gguf(path, {"w": (raw, (4, 512), "Q5K"), "v": x[0]}, meta)
    r = gguf.GGUFReader(str(path))
    fields = r.fields
    assert fields["u8"].types == [gguf.GGUFValueType.UINT8] and fields["u8"].contents() == 7
    assert fields["f64"].types == [gguf.GGUFValueType.FLOAT64] and fields["f64"].contents() == 1 / 3
    assert fields["big"].types == [gguf.GGUFValueType.INT64] and fields["big"].contents() == 2**40
    assert fields["flag"].contents() is True
    assert fields["names"].contents() == ["x", "yé"]
    # gguf-py flattens nested arrays in contents(), but reports their types.
    assert fields["nested"].types[:2] == [gguf.GGUFValueType.ARRAY] * 2 and fields["nested"].contents() == [1, 2, 3]
    assert fields["u64s"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64]
    ts = {t.name: t for t in r.tensors}
    assert ts["w"].tensor_type == gguf.GGMLQuantizationType.Q5_K
    assert list(ts["w"].shape) == [512, 4]  # gguf-py reports ggml's ne order
    np.testing.assert_array_equal(np.asarray(ts["w"].data).reshape(-1), raw.reshape(-1))
    np.testing.assert_array_equal(np.asarray(ts["v"].data), x[0])


def test_same_bytes_as_gguf_package_writer(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    gguf_package_file(a)
    f = read_gguf(a)
    write_gguf(b, f.tensors.values(), f.metadata)
    assert a.read_bytes() == b.read_bytes()


def test_plain_values_get_gguf_types_and_round_trip(tmp_path):
    meta = {"i": 5, "neg": -(2**40), "huge": 2**63 + 1, "f": 0.25, "b": True, "s": "x",
            "l": [1, 2, 3], "lf": [1, 2.5], "ls": ["a"], "lb": [True, False], "ll": [[1], ["a", "b"]],
            "empty": [], "np32": np.float32(1.5), "npu16": np.uint16(9), "npi8": np.array([-1, 2], np.int8),
            "lnp": [np.float64(1.0), np.float64(2.0)]}
    p1, p2 = tmp_path / "1.gguf", tmp_path / "2.gguf"
    write_gguf(p1, {}, meta)
    m = read_gguf(p1).metadata
    types = {k: (v.type, v.item_type) for k, v in m.items()}
    assert types == {
        "i": (VT.INT32, None), "neg": (VT.INT64, None), "huge": (VT.UINT64, None), "f": (VT.FLOAT32, None),
        "b": (VT.BOOL, None), "s": (VT.STRING, None), "l": (VT.ARRAY, VT.INT32), "lf": (VT.ARRAY, VT.FLOAT32),
        "ls": (VT.ARRAY, VT.STRING), "lb": (VT.ARRAY, VT.BOOL), "ll": (VT.ARRAY, VT.ARRAY),
        "empty": (VT.ARRAY, VT.INT32), "np32": (VT.FLOAT32, None), "npu16": (VT.UINT16, None),
        "npi8": (VT.ARRAY, VT.INT8), "lnp": (VT.ARRAY, VT.FLOAT64),
    }
    assert m["ll"].to_python() == [[1], ["a", "b"]] and m["huge"].value == 2**63 + 1
    write_gguf(p2, {}, m)
    assert p1.read_bytes() == p2.read_bytes()
    assert all(read_gguf(p2).metadata[k] == v for k, v in m.items())


scalars = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(width=32, allow_nan=False),
    st.booleans(),
    st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=5))
def test_round_trip_property(tmp_path, meta):
    p1, p2 = tmp_path / "h1.gguf", tmp_path / "h2.gguf"
    try:
        write_gguf(p1, {}, meta)
    except GgufError:
        return  # lists mixing kinds have no GGUF form; that refusal is tested elsewhere
    m = read_gguf(p1).metadata
    assert list(m) == list(meta)
    write_gguf(p2, {}, m)
    assert p1.read_bytes() == p2.read_bytes()


def test_writer_refuses_bad_input(tmp_path):
    p = tmp_path / "bad.gguf"
    good = ggml_type("Q4_0").quantize(np.ones((2, 32), F))
    with pytest.raises(GgufError, match="expected 36"):
        write_gguf(p, {"t": (good[:1], (2, 32), "Q4_0")})
    with pytest.raises(GgufError, match="duplicate tensor"):
        write_gguf(p, [GgufTensor("t", (2, 32), ggml_type("Q4_0"), good.reshape(-1))] * 2)
    with pytest.raises(GgufError, match="dimensions"):
        write_gguf(p, {"t": np.zeros((1, 1, 1, 1, 1), F)})
    with pytest.raises(GgufError, match="out of range"):
        write_gguf(p, {}, {"k": GgufValue(VT.UINT8, 300)})
    with pytest.raises(GgufError, match="mixing"):
        write_gguf(p, {}, {"k": [1, "a"]})
    with pytest.raises(GgufError, match="power of two"):
        write_gguf(p, {}, {}, alignment=48)
    assert issubclass(GgufError, ValueError)


# ---------------------------------------------------------------- corrupt files
def s_(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def header(n_tensors, n_kv, version=3):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv(key, vtype, payload):
    return s_(key) + struct.pack("<I", vtype) + payload


def tinfo(name, ne, type_id, offset):
    return s_(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, type_id, offset)


def small_file() -> bytes:
    """A valid file built by hand: two KVs, one 32-element Q8_0 tensor (34 bytes of data)."""
    body = header(1, 2) + kv("a", VT.UINT32, struct.pack("<I", 1)) + kv("b", VT.STRING, s_("xyz"))
    body += tinfo("t", [32], 8, 0)
    body += b"\0" * (-len(body) % 32)
    return body + bytes(range(34))


def expect_error(tmp_path, data: bytes, match: str, name="bad.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(GgufError, match=match) as info:
        read_gguf(path)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    msg = str(info.value)
    assert str(path) in msg and "at byte" in msg, msg
    assert elapsed < 1.0 and peak < 16 * 2**20, (elapsed, peak)
    return msg


def test_hand_built_file_is_valid(tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(small_file())
    f = read_gguf(path)
    assert f.metadata["a"].value == 1 and f.metadata["b"].value == "xyz"
    assert f.tensors["t"].shape == (32,)
    np.testing.assert_array_equal(f.tensors["t"].data, np.arange(34, dtype=np.uint8))


def test_empty_file(tmp_path):
    assert "at byte 0" in expect_error(tmp_path, b"", "truncated")


def test_every_truncation_fails_cleanly(tmp_path):
    data = small_file()
    for cut in range(len(data)):
        expect_error(tmp_path, data[:cut], "truncated|runs past the end", name=f"cut{cut}.gguf")


def test_truncating_a_real_file(tmp_path):
    full = tmp_path / "full.gguf"
    gguf_package_file(full)
    data = full.read_bytes()
    f = read_gguf(full)
    last = f.tensors["d.vec"]
    data_end = f.data_offset + last.offset + last.nbytes  # only padding follows
    for cut in list(range(0, f.data_offset, 7)) + [f.data_offset + 100, data_end - 1]:
        expect_error(tmp_path, data[:cut], "truncated|runs past the end", name="cut.gguf")
    # Losing the final padding loses no data.
    (tmp_path / "nopad.gguf").write_bytes(data[:data_end])
    np.testing.assert_array_equal(read_gguf(tmp_path / "nopad.gguf").tensors["d.vec"].data, last.data)


@pytest.mark.parametrize(
    "data,match",
    [
        (b"GGML" + bytes(20), "not a GGUF file"),
        (header(0, 0, version=1), "version 1"),
        (header(0, 0, version=7), "unsupported GGUF version 7"),
        (header(0, 0, version=0x03000000), "big-endian"),
        (header(0, 2**40), "metadata count claims 1099511627776"),
        (header(2**63, 0), "tensor count claims"),
        (header(0, 1) + s_("k") + struct.pack("<I", 13) + bytes(8), "unknown value type 13"),
        (header(0, 1) + s_("k") + struct.pack("<IIQ", 9, 99, 1) + bytes(8), "unknown array item type 99"),
        (header(0, 1) + struct.pack("<Q", 2**40) + b"k" * 16, "needs 1099511627776 bytes"),
        (header(0, 1) + kv("k", VT.STRING, struct.pack("<Q", 2**62)), "needs 4611686018427387904 bytes"),
        (header(0, 1) + kv("k", VT.ARRAY, struct.pack("<IQ", VT.UINT64, 2**31)), "claims 2147483648 items"),
        (header(0, 1) + kv("k", VT.ARRAY, struct.pack("<IQ", VT.STRING, 2**40)), "claims 1099511627776 items"),
        (header(0, 1) + kv("k", VT.ARRAY, struct.pack("<IQ", VT.ARRAY, 2**50)), "claims"),
        (header(0, 2) + kv("k", VT.UINT8, b"\1") + kv("k", VT.UINT8, b"\2"), "duplicate metadata key"),
        (header(1, 0) + tinfo("t", [32, 1, 1, 1, 1], 8, 0), "5 dimensions"),
        (header(1, 0) + tinfo("t", [32], 99, 0) + bytes(64), "unsupported GGML type 99"),
        (header(1, 0) + tinfo("t", [33], 8, 0) + bytes(64), "not a multiple"),
        (header(1, 0) + tinfo("t", [32], 8, 16) + bytes(128), "offset 16 is not a multiple"),
        (header(1, 0) + tinfo("t", [2**40, 2**20], 0, 0) + bytes(64), "runs past the end"),
        (header(1, 0) + tinfo("t", [2**63, 2**63, 2**63, 2**63], 0, 0) + bytes(64), "element count"),
        (header(1, 0) + tinfo("t", [2**30, 2**30, 2**2, 1], 0, 0) + bytes(64), "runs past the end"),
        (header(2, 0) + tinfo("t", [32], 0, 0) + tinfo("t", [32], 0, 128) + bytes(512), "duplicate tensor"),
        # ggml's ne is int64_t: a dimension or an element count past INT64_MAX is corrupt,
        # even when another dimension is 0 (gguf.cpp refuses both).
        (header(1, 0) + tinfo("t", [32, 2**63, 0], 2, 0) + bytes(64), "element count"),
        (header(1, 0) + tinfo("t", [32, 2**40, 2**40, 0], 2, 0) + bytes(64), "element count"),
        # No dimensions is one element, as in ggml: not a whole Q4_0 block.
        (header(1, 0) + tinfo("t", [], 2, 0) + bytes(64), "row length 1 is not a multiple"),
        (header(0, 1) + kv("general.alignment", VT.UINT32, struct.pack("<I", 24)), "power of two"),
        (header(0, 1) + kv("general.alignment", VT.UINT64, struct.pack("<Q", 32)), "power of two UINT32"),
    ],
)
def test_corrupt_headers(tmp_path, data, match):
    expect_error(tmp_path, data, match)


def test_deeply_nested_arrays_are_refused(tmp_path):
    # 100000 levels of "array of arrays, count 1": refused at the nesting limit, no recursion error.
    payload = struct.pack("<IQ", VT.ARRAY, 1) * 100000
    expect_error(tmp_path, header(0, 1) + kv("k", VT.ARRAY, payload[12:]), "nested deeper")


def test_millions_of_empty_strings_are_still_bounded(tmp_path):
    # A count that does fit the file is allowed, and costs only what the file holds.
    n = 200_000
    data = header(0, 1) + kv("k", VT.ARRAY, struct.pack("<IQ", VT.STRING, n) + bytes(8 * n))
    path = tmp_path / "many.gguf"
    path.write_bytes(data)
    assert read_gguf(path).metadata["k"].value == [""] * n


def test_version_2_reads_like_version_3(tmp_path):
    data = bytearray(small_file())
    data[4:8] = struct.pack("<I", 2)
    path = tmp_path / "v2.gguf"
    path.write_bytes(bytes(data))
    f = read_gguf(path)
    assert f.version == 2 and f.metadata["b"].value == "xyz" and f.tensors["t"].nbytes == 34


def test_strings_that_are_not_utf8_survive(tmp_path):
    # Some vocabularies hold raw byte tokens; they must come back byte for byte.
    raw_token = b"\xff\xfe<0x0A>"
    data = header(0, 1) + kv("toks", VT.ARRAY, struct.pack("<IQ", VT.STRING, 1) + struct.pack("<Q", len(raw_token)) + raw_token)
    p1, p2 = tmp_path / "a.gguf", tmp_path / "b.gguf"
    p1.write_bytes(data)
    f = read_gguf(p1)
    assert f.metadata["toks"].value[0].encode("utf-8", "surrogateescape") == raw_token
    write_gguf(p2, {}, f.metadata)
    out = p2.read_bytes()  # the writer pads the header to the alignment
    assert out[: len(data)] == data and out[len(data) :] == b"\0" * (-len(data) % 32)
