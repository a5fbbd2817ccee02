"""load_gguf / save_gguf at the Tensor level (candle-pyo3's round trip), and their errors."""

import struct

import gguf
import numpy as np
import pytest

import tallow as tl
from tallow.quantized import GgufError, QTensor, load_gguf, save_gguf


def test_can_roundtrip_gguf(tmp_path):
    # candle-pyo3's test_can_roundtrip_gguf
    metadata = {"a": 1, "b": "foo", "c": [1, 2, 3], "d": [[1, 2], [3, 4]]}
    tensors = {"a": tl.randn((16, 256)).quantize("q4_0"), "b": tl.randn((16, 16)).quantize("f32")}
    path = str(tmp_path / "test.gguf")
    tl.utils.save_gguf(path, tensors, metadata)
    loaded_tensors, loaded_metadata = tl.utils.load_gguf(path)
    assert set(metadata) == set(loaded_metadata)
    for key in metadata:
        assert metadata[key] == loaded_metadata[key]
    assert set(tensors) == set(loaded_tensors)
    for key in tensors:
        assert tensors[key].dequantize().values() == loaded_tensors[key].dequantize().values()
        assert tensors[key].shape == loaded_tensors[key].shape
        assert str(tensors[key].ggml_dtype) == str(loaded_tensors[key].ggml_dtype)
        assert tensors[key].to_bytes() == loaded_tensors[key].to_bytes()
    assert isinstance(loaded_tensors["a"], QTensor)


def test_every_type_and_plain_tensors(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    names = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2K", "Q3K", "Q4K", "Q5K", "Q6K", "Q8K", "F16", "BF16"]
    tensors = {n.lower(): tl.Tensor(x).quantize(n) for n in names}
    tensors["plain32"] = tl.Tensor(x)
    tensors["plain16"] = tl.Tensor(x).to_dtype("f16")
    tensors["plainbf16"] = tl.Tensor(x).to_dtype("bf16")
    meta = {"general.architecture": "test", "f": 1.5, "flag": True, "big": 2**40, "names": ["x", "y"]}
    path = tmp_path / "all.gguf"
    save_gguf(path, tensors, meta)
    got, got_meta = load_gguf(path)
    assert got_meta == meta
    for n in names:
        assert got[n.lower()].ggml_dtype == n and got[n.lower()].to_bytes() == tensors[n.lower()].to_bytes()
    assert got["plain32"].ggml_dtype == "F32" and got["plain16"].ggml_dtype == "F16"
    assert got["plainbf16"].ggml_dtype == "BF16"
    np.testing.assert_array_equal(got["plain32"].dequantize().numpy(), x)
    # The gguf package reads what we wrote: names, types, shapes (its order is innermost first).
    r = gguf.GGUFReader(str(path))
    info = {t.name: t for t in r.tensors}
    assert info["q4k"].tensor_type == gguf.GGMLQuantizationType.Q4_K
    assert list(info["q4k"].shape) == [512, 2]
    assert bytes(info["q6k"].data.reshape(-1).view(np.uint8)) == tensors["q6k"].to_bytes()


def test_loaded_tensors_map_the_file(tmp_path):
    path = tmp_path / "m.gguf"
    save_gguf(path, {"w": tl.randn((64, 256)).quantize("q8_0")}, {})
    t, _ = load_gguf(path)
    raw, bases = t["w"].raw, []
    while raw is not None:
        bases.append(type(raw))
        raw = getattr(raw, "base", None)
    assert np.memmap in bases  # a view of the file's map: nothing read until used
    assert not t["w"].raw.flags.writeable
    assert t["w"].matmul_t(tl.randn((2, 256))).shape == (2, 64)


def test_save_refuses_what_gguf_cannot_hold(tmp_path):
    with pytest.raises(tl.UnsupportedDTypeError, match="u32"):
        save_gguf(tmp_path / "x.gguf", {"i": tl.ones((4,), dtype="u32")}, {})
    with pytest.raises(TypeError, match="QTensor or a Tensor"):
        save_gguf(tmp_path / "x.gguf", {"n": np.zeros(4, np.float32)}, {})
    with pytest.raises(GgufError):
        save_gguf(tmp_path / "x.gguf", {}, {"bad": object()})


def test_errors_are_tallow_errors_naming_file_and_offset(tmp_path):
    path = tmp_path / "ok.gguf"
    save_gguf(path, {"w": tl.randn((4, 32)).quantize("q4_0")}, {"k": "v"})
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:40])
    with pytest.raises(tl.TallowError) as e:
        load_gguf(cut)
    assert isinstance(e.value, tl.FileFormatError) and isinstance(e.value, GgufError)
    assert isinstance(e.value, ValueError)
    assert str(cut) in str(e.value) and "at byte" in str(e.value)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(tl.FileFormatError, match=r"empty.gguf.*at byte 0"):
        tl.utils.load_gguf(empty)
    with pytest.raises(FileNotFoundError):
        load_gguf(tmp_path / "missing.gguf")


def test_huge_array_count_fails_at_once(tmp_path):
    # A header claiming a 2**31-element array in a tiny file: refused before any loop or allocation.
    key = b"k"
    body = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", 1) + key
    body += struct.pack("<IIQ", 9, 5, 2**31) + b"\0" * 16
    path = tmp_path / "huge.gguf"
    path.write_bytes(body)
    with pytest.raises(GgufError, match=r"huge.gguf: .*2147483648 items.*at byte"):
        load_gguf(path)


def test_saving_over_the_file_the_tensors_map(tmp_path):
    # load_gguf's tensors are views of the file's memory map: writing them back to
    # that same path (to change the metadata, say) must not truncate the mapped
    # file under them (zeroed data or a crash).
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    path = tmp_path / "m.gguf"
    save_gguf(path, {"w": tl.Tensor(x).quantize("q4_0"), "v": tl.Tensor(x)}, {"a": 1})
    expected = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q4_0).tobytes()
    tensors, meta = load_gguf(path)
    save_gguf(path, tensors, {**meta, "b": 2})
    got, got_meta = load_gguf(path)
    assert got_meta == {"a": 1, "b": 2}
    assert got["w"].to_bytes() == expected
    np.testing.assert_array_equal(got["v"].dequantize().numpy(), x)
    r = gguf.GGUFReader(str(path))
    assert bytes(r.get_tensor(0).data.reshape(-1).view(np.uint8)) == expected
