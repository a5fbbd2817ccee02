"""NumPy, safetensors and DLPack carry every dtype, without copies or widening where
the layout allows; NumPy's functions take tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tallow as tl

ALL = tl.dtype.ALL
NUMPY_DLPACK = [d for d in ALL if d not in (tl.bf16,) and not d.is_small_float]


def _array(dtype, shape=(2, 3)):
    vals = (np.arange(int(np.prod(shape))) % 4).astype(np.float32).reshape(shape)
    return vals.astype(dtype.np)


def _ptr(arr):
    return arr.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_from_numpy_shares_the_buffer_and_keeps_the_dtype(dtype):
    a = _array(dtype)
    t = tl.from_numpy(a)
    assert t.dtype is dtype
    assert np.shares_memory(t.numpy(), a) and np.shares_memory(np.asarray(t), a)
    a.view(np.uint8)[0] = 1  # a write through NumPy shows in the tensor (same memory)
    assert t.numpy().view(np.uint8)[0, 0] == 1
    # tl.tensor copies, as torch.tensor does.
    assert not np.shares_memory(tl.tensor(a).numpy(), a)
    assert tl.tensor(a).dtype is dtype


def test_numpy_int32_no_longer_widens():
    a = np.array([1, -2, 3], np.int32)
    assert tl.from_numpy(a).dtype is tl.i32 and tl.tensor(a).dtype is tl.i32
    assert torch.from_numpy(a).dtype == torch.int32
    assert tl.tensor(np.array([True, False])).dtype is tl.bool
    assert tl.tensor(np.array([1], np.uint16)).dtype is tl.u32  # tallow has no u16: widened
    strided = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    t = tl.from_numpy(strided)  # not contiguous: copied, dtype kept
    assert t.dtype is tl.i16 and t.values() == strided.tolist()


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_safetensors_round_trip_every_dtype_without_copies(dtype, tmp_path):
    a = _array(dtype, (3, 4))
    path = tmp_path / "t.safetensors"
    tl.utils.save_safetensors(path, {"x": tl.from_numpy(a)})
    with tl.utils.SafetensorsFile(path) as f:
        assert f.dtype("x") is dtype
        t = f.get("x")
        np.testing.assert_array_equal(t.numpy().view(np.uint8), a.view(np.uint8))
        if dtype not in (tl.f4, tl.f6e2m3, tl.f6e3m2):  # packed in the file: unpacked
            # The tensor is a view of the file's map: the reader's array and the tensor
            # share memory (nothing was copied on the way).
            assert np.shares_memory(t.numpy(), f.array("x"))
    back = tl.utils.load_safetensors(path)["x"]
    assert back.dtype is dtype


def test_safetensors_files_of_pytorch_load_with_their_dtypes(tmp_path):
    from safetensors.torch import load_file, save_file

    ref = {"b": torch.tensor([True, False]), "i8": torch.tensor([-3, 4], dtype=torch.int8),
           "i16": torch.tensor([-300, 4], dtype=torch.int16),
           "i32": torch.tensor([-(2**31), 4], dtype=torch.int32),
           "f8": torch.tensor([0.5, -448.0]).to(torch.float8_e4m3fn),
           "e8": torch.tensor([0.25, 1024.0]).to(torch.float8_e8m0fnu)}
    save_file(ref, str(tmp_path / "p.safetensors"))
    got = tl.utils.load_safetensors(tmp_path / "p.safetensors")
    names = {"b": "bool", "i8": "i8", "i16": "i16", "i32": "i32", "f8": "f8e4m3", "e8": "f8e8m0"}
    for k, v in ref.items():
        assert str(got[k].dtype) == names[k]
        assert got[k].to_dtype(tl.f32).values() == v.float().tolist()
    # And back: PyTorch reads tallow's files with the same dtypes.
    tl.utils.save_safetensors(tmp_path / "q.safetensors", got)
    again = load_file(str(tmp_path / "q.safetensors"))
    for k, v in ref.items():
        assert again[k].dtype == v.dtype and torch.equal(again[k].view(torch.uint8) if v.element_size() == 1 else again[k], v.view(torch.uint8) if v.element_size() == 1 else v)


@pytest.mark.parametrize("dtype", [d for d in ALL if d not in (tl.f4, tl.f6e2m3, tl.f6e3m2)], ids=str)
def test_dlpack_round_trips_share_memory(dtype):
    a = _array(dtype)
    t = tl.from_numpy(a)
    pt = torch.from_dlpack(t)
    assert pt.data_ptr() == _ptr(a)
    assert str(pt.dtype).replace("torch.", "") in {
        "bool": "bool", "u8": "uint8", "u32": "uint32", "i8": "int8", "i16": "int16",
        "i32": "int32", "i64": "int64", "f16": "float16", "bf16": "bfloat16", "f32": "float32",
        "f64": "float64", "f8e4m3": "float8_e4m3fn", "f8e8m0": "float8_e8m0fnu"}[dtype.name]
    back = tl.from_dlpack(pt)
    assert back.dtype is dtype and _ptr(back.numpy()) == _ptr(a)
    if dtype in NUMPY_DLPACK:
        n = np.from_dlpack(t)
        assert n.dtype == dtype.np and _ptr(n) == _ptr(a)
        assert _ptr(tl.from_dlpack(n).numpy()) == _ptr(a)


def test_dlpack_refuses_the_six_and_four_bit_floats_clearly():
    t = tl.tensor([1.0, 2.0]).to_dtype(tl.f4)
    with pytest.raises(BufferError, match="f4"):
        t.__dlpack__()
    assert tl.from_dlpack(t).dtype is tl.f4  # tallow to tallow shares the buffer instead


def test_numpy_functions_take_tensors(device):
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]], np.float32)
    t = tl.tensor(a, device=device)
    for f in (np.mean, np.sum, np.max, np.min, np.std, np.var, np.argmax, np.median, np.ptp,
              np.cumsum, np.prod, np.any, np.all, np.transpose, np.ravel, np.sort, np.round):
        np.testing.assert_allclose(f(t), f(a), rtol=1e-6, err_msg=f.__name__)
    for f in (np.mean, np.sum, np.max, np.std, np.argmin):
        np.testing.assert_allclose(f(t, axis=0), f(a, axis=0), rtol=1e-6)
        np.testing.assert_allclose(f(t, axis=1, keepdims=True), f(a, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([t, t]), np.concatenate([a, a]))
    np.testing.assert_array_equal(np.where(t > 2, t, 0.0), np.where(a > 2, a, 0.0))
    np.testing.assert_array_equal(np.reshape(t, (3, 2)), np.reshape(a, (3, 2)))
    assert np.allclose(t, a) and np.array_equal(t, a) and np.shape(t) == (2, 3)
    np.testing.assert_allclose(np.exp(t), np.exp(a), rtol=1e-6)  # ufuncs read __array__
    assert np.mean(tl.tensor([True, False, True], device=device)) == np.mean([True, False, True])


def test_astype_converts_as_numpy_names_it():
    t = tl.tensor([1.5, -2.0])
    assert t.astype(np.int32).dtype is tl.i32 and t.astype(np.int32).values() == [1, -2]
    assert t.astype("float16").dtype is tl.f16 and t.astype(tl.bf16).dtype is tl.bf16
    assert t.astype(float).dtype is tl.f64 and t.astype(bool).dtype is tl.bool
    assert t.astype(int).dtype is tl.i64 and np.array([1.5]).astype(int).dtype == np.int64


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_to_torch_keeps_every_dtype_pytorch_has(dtype):
    t = tl.tensor([1.5, 0.0, -2.0, 448.0]).to_dtype(dtype)
    p = t.to_torch()
    want = {"u32": torch.int64, "f6e2m3": torch.float32, "f6e3m2": torch.float32,
            "f4": torch.float32}.get(dtype.name)
    assert p.dtype == (want or getattr(torch, {
        "bool": "bool", "u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32",
        "i64": "int64", "f16": "float16", "bf16": "bfloat16", "f32": "float32",
        "f64": "float64", "f8e4m3": "float8_e4m3fn", "f8e8m0": "float8_e8m0fnu"}[dtype.name]))
    np.testing.assert_array_equal(p.to(torch.float64).numpy(), t.to_dtype(tl.f64).numpy())
