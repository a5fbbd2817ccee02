"""Constructors, dtype inference, values out, candle-pyo3's Tensor API."""

import pickle

import ml_dtypes
import numpy as np
import pytest
import torch

import tallow as tl


def test_dtype_inference_from_python_data():
    assert tl.Tensor(42.0).dtype == tl.f32 and tl.Tensor(42.0).shape == ()
    assert tl.Tensor([3.0, 1, 4]).dtype == tl.f32
    # Python ints infer to i64, as NumPy and PyTorch (docs/semantics.md, integers).
    assert tl.Tensor([1, 2, 3]).dtype == tl.i64
    assert tl.Tensor([0, 2**32 - 1]).dtype == tl.i64
    assert tl.Tensor([-1, 2]).dtype == tl.i64
    assert tl.Tensor([2**32]).dtype == tl.i64
    assert tl.Tensor([True, False]).dtype == tl.bool
    assert tl.Tensor(np.array([1.0, 2.0])).dtype == tl.f64  # NumPy keeps its dtype
    assert tl.Tensor(np.array([1, 2], np.int32)).dtype == tl.i32  # kept, as torch.tensor
    assert tl.Tensor(np.zeros(2, ml_dtypes.bfloat16)).dtype == tl.bf16
    assert tl.tensor([1, 2], dtype="f16").dtype == tl.f16
    assert tl.tensor([1, 2], dtype=tl.bf16).values() == [1.0, 2.0]
    with pytest.raises(ValueError):
        tl.Tensor([[1.0, 2.0], [3.0]])
    with pytest.raises(TypeError):
        tl.Tensor(["a", "b"])
    with pytest.raises(OverflowError):
        tl.Tensor([2**70])


def test_values_and_rank_checked_getters():
    t = tl.Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]])
    assert t.values() == [[3.0, 1, 4, 1], [5, 9, 2, 6]]
    assert t.to_vec2() == [[3.0, 1, 4, 1], [5, 9, 2, 6]]
    assert t[0].to_vec1() == [3.0, 1, 4, 1]
    assert t[0, 1].to_scalar() == 1.0 and t[0, 1].to_vec0() == 1.0 and t[0, 1].item() == 1.0
    assert tl.zeros((1, 2, 2)).to_vec3() == [[[0.0, 0.0], [0.0, 0.0]]]
    with pytest.raises(tl.ShapeMismatchError):
        t.to_vec1()
    with pytest.raises(tl.ShapeMismatchError):
        t.to_scalar()
    assert t.dims2() == (2, 4)
    with pytest.raises(tl.ShapeMismatchError):
        t.dims3()
    assert tl.zeros(5).dims1() == 5
    assert isinstance(tl.Tensor([1], dtype="u8").values()[0], int)
    assert tl.Tensor([1.5], dtype="bf16").values() == [1.5]


def test_properties():
    t = tl.zeros((2, 3, 4), dtype=tl.f16)
    assert t.shape == t.dims == (2, 3, 4)
    assert t.stride == (12, 4, 1)
    assert t.rank == 3 and t.nelement == 24 and t.elem_count == 24
    assert t.dtype == tl.f16 and str(t.dtype) == "f16"
    assert t.device == "cpu" and t.device == tl.cpu
    assert t.layout.is_contiguous() and not t.t().layout.is_contiguous()
    assert t.id != tl.zeros((2, 3, 4)).id
    assert t.transpose(0, 2).is_fortran_contiguous()
    assert len(t) == 2


def test_hash_is_identity_and_eq_returns_tensors():
    t, other = tl.Tensor(42.0), tl.Tensor(42.0)
    assert hash(t) != hash(other) and hash(t) == hash(t)
    assert (t == other).dtype == tl.bool
    assert t.equal(other)
    assert not tl.Tensor([42.0, 42.1]).equal(tl.Tensor([42.0, 42.0]))
    assert not tl.Tensor(42.0).equal(tl.Tensor([42.0, 42.0]))
    assert {t: 1}[t] == 1


def test_negative_sizes_raise_overflow_error():
    for f in (tl.zeros, tl.ones, tl.rand, tl.randn):
        with pytest.raises(OverflowError):
            f((-1, 2))
    with pytest.raises(OverflowError):
        tl.full((2, -3), 1.0)


def test_shapes_as_tuples_or_varargs():
    assert tl.rand(10, 20).shape == (10, 20)
    assert tl.zeros((2, 3)).shape == tl.zeros(2, 3).shape == tl.zeros([2, 3]).shape == (2, 3)
    assert tl.zeros((2, 3), tl.u8).dtype == tl.u8
    assert tl.ones(3, dtype=tl.i64).values() == [1, 1, 1]
    assert tl.zeros(()).shape == ()
    t = tl.arange(0, 24, dtype=tl.f32)
    assert t.reshape(2, -1, 4).shape == (2, 3, 4)
    assert t.reshape((-1, 6)).shape == (4, 6)
    with pytest.raises(tl.ShapeMismatchError):
        t.reshape(-1, -1)
    with pytest.raises(tl.ShapeMismatchError):
        t.reshape(5, -1)
    with pytest.raises(tl.ShapeMismatchError):
        t.reshape(5, 5)


def test_filled_and_ranges():
    assert tl.full((2,), 3.5).values() == [3.5, 3.5]
    assert tl.full((2,), 3).dtype == tl.i64
    assert tl.zeros_like(tl.zeros((2, 2), dtype=tl.u8)).dtype == tl.u8
    assert tl.ones_like(tl.zeros(3)).values() == [1.0] * 3
    assert tl.full_like(tl.zeros(2), 7).values() == [7.0, 7.0]
    assert tl.arange(5).dtype == tl.i64 and tl.arange(5).values() == [0, 1, 2, 3, 4]
    assert tl.arange(0.0, 1.0, 0.25).values() == [0.0, 0.25, 0.5, 0.75]
    assert tl.arange(0, 1.0, 0.25).dtype == tl.f32
    assert tl.arange(5, 0, -2).values() == [5, 3, 1]
    assert tl.arange(0, 10, 3, dtype=tl.f64).values() == [0.0, 3.0, 6.0, 9.0]
    np.testing.assert_allclose(tl.arange(0.0, 1.0, 0.1).numpy(), np.arange(0.0, 1.0, 0.1, dtype=np.float32), atol=1e-7)
    np.testing.assert_allclose(tl.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), atol=1e-7)
    np.testing.assert_array_equal(tl.eye(3).numpy(), np.eye(3))
    with pytest.raises(ValueError):
        tl.arange(0, 5, 0)


def test_random_is_seeded_per_device(device):
    device.set_seed(42)
    a = tl.randn((100,), device=device).numpy()
    u = tl.rand((100,), low=2.0, high=3.0, device=device).numpy()
    device.set_seed(42)
    b = tl.randn((100,), device=device).numpy()
    v = tl.rand((100,), low=2.0, high=3.0, device=device).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(u, v)
    assert u.min() >= 2.0 and u.max() < 3.0
    big = tl.randn((20000,), mean=1.0, std=2.0, device=device).numpy()
    assert abs(big.mean() - 1.0) < 0.1 and abs(big.std() - 2.0) < 0.1
    assert tl.rand_like(tl.zeros((3, 2), device=device)).shape == (3, 2)
    assert tl.randn_like(tl.zeros(4, dtype=tl.f16, device=device) if device.supports_dtype(tl.f16) else tl.zeros(4, device=device)).shape == (4,)
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.rand((2,), dtype=tl.u32, device=device)


def test_numpy_dlpack_torch_interop():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tl.from_numpy(x)
    np.testing.assert_array_equal(np.asarray(t), x)
    np.testing.assert_array_equal(t.numpy(), x)
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    np.testing.assert_array_equal(tl.from_dlpack(tt).numpy(), tt.numpy())
    np.testing.assert_array_equal(np.from_dlpack(t), x)
    back = t.t().to_torch()
    assert torch.equal(back, torch.from_numpy(x.T.copy()))
    b16 = tl.Tensor([1.5, -2.0], dtype="bf16").to_torch()
    assert b16.dtype == torch.bfloat16 and b16.tolist() == [1.5, -2.0]
    assert tl.from_dlpack(torch.tensor([1.0, 2.0], dtype=torch.bfloat16)).dtype == tl.bf16
    assert float(tl.Tensor(2.5)) == 2.5 and int(tl.Tensor(3)) == 3


def test_to_follows_candle_pyo3_rules():
    t = tl.Tensor([1.0, 2.0])
    assert t.to(tl.f64).dtype == tl.f64
    assert t.to("f16").dtype == tl.f16
    assert t.to("cpu").device == "cpu"
    assert t.to(dtype=tl.u8).dtype == tl.u8
    assert t.to("cpu", tl.bf16).dtype == tl.bf16
    other = tl.Tensor([1], dtype="i64")
    assert t.to(other).dtype == tl.i64
    with pytest.raises(TypeError):
        t.to()
    with pytest.raises(TypeError):
        t.to(3)
    with pytest.raises(TypeError):
        t.to("nonsense")
    with pytest.raises(ValueError):
        t.to(tl.f16, tl.f32)
    with pytest.raises(ValueError):
        t.to("cpu", device="cpu")
    with pytest.raises(ValueError):
        t.to(other, tl.f16)
    with pytest.raises(ValueError):
        t.to(other, device="cpu")


def test_repr_shows_values_shape_dtype_device():
    r = repr(tl.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert r.endswith("Tensor[[2, 2], f32, cpu]") and "3." in r
    assert "bf16" in repr(tl.zeros(2, dtype=tl.bf16))


def test_pickle_round_trip():
    t = tl.Tensor([[1.0, 2.0]], dtype="bf16")
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == tl.bf16 and u.values() == [[1.0, 2.0]]


def test_dtype_object():
    assert tl.DType.parse("bf16") is tl.bf16 and tl.DType.parse("float32") is tl.f32
    assert tl.f32.size_in_bytes == 4 and tl.bf16.size_in_bytes == 2 and tl.i64.size_in_bytes == 8
    assert tl.f16.is_float and tl.u8.is_int and not tl.u8.is_float
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.DType.parse("f8")


def test_device_handles():
    assert tl.Device.cpu() == tl.cpu == "cpu"
    assert tl.Device.parse("cpu").same_device(tl.cpu)
    assert tl.cpu.id == tl.Device.cpu().id
    assert tl.cpu != "gpu"
    with pytest.raises(tl.TallowError, match="cuda"):
        tl.Device.parse("cuda")
    with pytest.raises(tl.TallowError):
        tl.Device.parse("tpu")
    assert tl.cpu.supports_dtype("bf16")
    info = tl.cpu.info()
    assert info["backend"] == "cpu" and info["threads"] >= 1
    with pytest.raises(tl.TallowError):
        tl.cpu.memory_stats()
    assert not tl.utils.cuda_is_available()


def test_iteration_and_truthiness():
    t = tl.Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert [r.values() for r in t] == [[1.0, 2.0], [3.0, 4.0]]
    assert bool(tl.Tensor([1.0])) and not bool(tl.Tensor(0.0))
    with pytest.raises(ValueError):
        bool(t)
    with pytest.raises(TypeError):
        len(tl.Tensor(1.0))


def test_bf16_tensors_export_through_dlpack():
    # NumPy's DLPack has no bfloat16; PyTorch's does (and from_dlpack reads it back).
    t = tl.Tensor([[1.5, -2.0, 3.0], [0.25, 8.0, -1.0]], dtype="bf16").t()
    x = torch.from_dlpack(t)
    assert x.dtype == torch.bfloat16 and x.shape == (3, 2)
    assert x.tolist() == torch.tensor([[1.5, -2.0, 3.0], [0.25, 8.0, -1.0]]).t().tolist()
    assert tl.from_dlpack(x).values() == t.values()
