"""safetensors, npy and npz files; corrupted files raise errors naming the file."""

import json
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file as torch_load, save_file as torch_save

import tallow as tl


def test_safetensors_round_trip_all_dtypes(tmp_path):
    tensors = {
        str(d): (tl.arange(0, 6, dtype=d).reshape((2, 3)) if d.is_int else tl.randn((2, 3)).to_dtype(d))
        for d in (tl.u8, tl.u32, tl.i64, tl.f16, tl.bf16, tl.f32, tl.f64)
    }
    path = tmp_path / "t.safetensors"
    tl.utils.save_safetensors(path, tensors, metadata={"format": "pt"})
    back = tl.utils.load_safetensors(path)
    assert set(back) == set(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        np.testing.assert_array_equal(back[k].numpy(), t.numpy())


def test_safetensors_interoperate_with_the_reference(tmp_path):
    path = tmp_path / "ref.safetensors"
    ref = {"w": torch.randn(3, 4), "b": torch.randn(4).to(torch.bfloat16), "i": torch.arange(5)}
    torch_save(ref, str(path))
    back = tl.utils.load_safetensors(path)
    np.testing.assert_array_equal(back["w"].numpy(), ref["w"].numpy())
    assert back["b"].dtype == tl.bf16
    assert back["b"].to_dtype(tl.f32).values() == ref["b"].float().tolist()
    assert back["i"].dtype == tl.i64 and back["i"].values() == list(range(5))
    out = tmp_path / "ours.safetensors"
    tl.utils.save_safetensors(out, {"x": tl.Tensor(np.arange(4, dtype=np.float32)).reshape((2, 2)).t()})
    assert torch.equal(torch_load(str(out))["x"], torch.tensor([[0.0, 2.0], [1.0, 3.0]]))


def test_lazy_safetensors_file(tmp_path):
    path = tmp_path / "lazy.safetensors"
    tl.utils.save_safetensors(path, {"a": tl.zeros((2, 3)), "b": tl.ones(4, dtype=tl.f16)})
    with tl.utils.SafetensorsFile(path) as f:
        assert sorted(f.keys()) == ["a", "b"] and "a" in f
        assert f.shape("a") == (2, 3) and f.dtype("b") == tl.f16
        assert f.get("b").values() == [1.0] * 4
        with pytest.raises(KeyError):
            f.get("c")


def _corruptions(good: bytes):
    n = struct.unpack("<Q", good[:8])[0]
    yield "empty", b""
    yield "short header length", good[:5]
    yield "truncated header", good[:8 + n // 2]
    yield "truncated data", good[:-3]
    yield "huge header length", struct.pack("<Q", 2**60) + good[8:]
    yield "bad json", good[:8] + b"{" * n + good[8 + n:]
    header = json.loads(good[8:8 + n])
    header["a"]["data_offsets"] = [0, 10**9]
    h = json.dumps(header).encode()
    yield "offsets past the end", struct.pack("<Q", len(h)) + h + good[8 + n:]


def test_corrupted_safetensors_raise_file_errors(tmp_path):
    good_path = tmp_path / "good.safetensors"
    tl.utils.save_safetensors(good_path, {"a": tl.ones((4, 4))})
    good = good_path.read_bytes()
    for name, data in _corruptions(good):
        bad = tmp_path / f"bad-{name.replace(' ', '_')}.safetensors"
        bad.write_bytes(data)
        with pytest.raises(tl.FileFormatError) as e:
            tl.utils.load_safetensors(bad)
        assert str(bad) in str(e.value), name
    with pytest.raises(FileNotFoundError):
        tl.utils.load_safetensors(tmp_path / "missing.safetensors")


def test_npy_npz(tmp_path):
    t = tl.randn((3, 4)).to_dtype(tl.f64)
    tl.utils.save_npy(tmp_path / "t.npy", t)
    back = tl.utils.load_npy(tmp_path / "t.npy")
    assert back.dtype == tl.f64 and back.equal(t)
    np.savez(tmp_path / "z.npz", a=np.arange(3, dtype=np.int64), b=np.ones((2, 2), np.float32))
    z = tl.utils.load_npz(tmp_path / "z.npz")
    assert z["a"].values() == [0, 1, 2] and z["b"].shape == (2, 2)
    tl.utils.save_npz(tmp_path / "y.npz", {"x": t})
    assert tl.utils.load_npz(tmp_path / "y.npz")["x"].equal(t)
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(tl.FileFormatError, match="bad.npy"):
        tl.utils.load_npy(tmp_path / "bad.npy")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(tl.FileFormatError, match="bad.npz"):
        tl.utils.load_npz(tmp_path / "bad.npz")
    good = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "trunc.npy").write_bytes(good[:-8])
    with pytest.raises(tl.FileFormatError, match="trunc.npy"):
        tl.utils.load_npy(tmp_path / "trunc.npy")


def test_safetensors_narrow_ints_load_as_themselves_u16_widens(tmp_path):
    # I8/I16/I32/BOOL are tallow dtypes (loaded over the file's map); only U16 widens, to u32.
    from safetensors.numpy import save_file

    path = tmp_path / "ints.safetensors"
    arrays = {"i32": np.array([-(2**31), 5], np.int32), "u16": np.array([65535, 1], np.uint16),
              "i8": np.array([-128, 3], np.int8), "i16": np.array([-32768, 7], np.int16),
              "bool": np.array([True, False])}
    save_file(arrays, str(path))
    want = {"i32": tl.i32, "u16": tl.u32, "i8": tl.i8, "i16": tl.i16, "bool": tl.bool}
    back = tl.utils.load_safetensors(path)
    f = tl.utils.SafetensorsFile(path)
    for name, arr in arrays.items():
        assert back[name].dtype == want[name] and f.dtype(name) == want[name]
        assert back[name].values() == arr.tolist()
    ref = torch_load(str(path))
    assert back["i32"].values() == ref["i32"].tolist()


def test_safetensors_dtype_without_tallow_twin_names_file_and_tensor(tmp_path):
    path = tmp_path / "c.safetensors"
    torch_save({"z": torch.zeros(2, dtype=torch.complex64)}, str(path))
    with pytest.raises(tl.UnsupportedDTypeError, match=r"c\.safetensors.*'z'"):
        tl.utils.load_safetensors(path)
    with pytest.raises(tl.UnsupportedDTypeError, match=r"c\.safetensors.*'z'"):
        tl.utils.SafetensorsFile(path).dtype("z")


def test_corrupted_or_mistaken_npz_raise_file_errors(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", a=np.arange(1000.0))
    data = bytearray((tmp_path / "c.npz").read_bytes())
    data[100] ^= 0xFF
    data[120] ^= 0xFF
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    with pytest.raises(tl.FileFormatError, match="bad.npz"):
        tl.utils.load_npz(tmp_path / "bad.npz")
    np.save(tmp_path / "one.npy", np.arange(3.0))
    with pytest.raises(tl.FileFormatError, match="one.npy"):
        tl.utils.load_npz(tmp_path / "one.npy")


def test_big_endian_npy_loads_like_numpy(tmp_path):
    arr = np.arange(6, dtype=">f4").reshape(2, 3)
    np.save(tmp_path / "be.npy", arr)
    t = tl.utils.load_npy(tmp_path / "be.npy")
    assert t.dtype == tl.f32
    np.testing.assert_array_equal(t.numpy(), np.load(tmp_path / "be.npy"))
    assert tl.Tensor(np.array([1, 2], ">i8")).values() == [1, 2]
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.Tensor.from_vec(np.array([1.0], ">f4"))  # cannot share a swapped buffer
