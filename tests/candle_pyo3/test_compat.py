"""Programs written for candle's Python binding run after ``import tallow as candle``.

A condensed first pass over candle-pyo3's tests; the faithful ports of all of them
(tensor, shape, utils, functional, module, linear, testing, and its examples) are in
tests/candle_pyo3/.
"""

import pytest

import tallow as candle
from tallow import Tensor
from tallow.utils import load_safetensors, parse_absolute_shape, save_safetensors


def test_construct_and_values():
    assert Tensor(42.0).values() == 42.0
    assert Tensor([3.0, 1, 4, 1, 5, 9, 2, 6]).values() == [3.0, 1, 4, 1, 5, 9, 2, 6]
    assert Tensor([[3.0, 1, 4, 1], [5, 9, 2, 6]]).values() == [[3.0, 1, 4, 1], [5, 9, 2, 6]]


def test_equality_with_scalars_and_tensors():
    t = Tensor(42.0)
    one, zero = Tensor(1).to_dtype(candle.u8), Tensor(0).to_dtype(candle.u8)
    assert (t == 42.0).equal(one) and (t == 43.0).equal(zero)
    assert (t != 42.0).equal(zero) and (t > 41.0).equal(one) and (t >= 43.0).equal(zero)
    assert (t < 43.0).equal(one) and (t <= 41.0).equal(zero)
    same, other = Tensor(42.0), Tensor(43.0)
    assert (t == same).equal(one) and (t < other).equal(one) and (t > other).equal(zero)
    assert (t <= other).equal(one) and (t >= same).equal(one)


def test_shapes():
    assert candle.rand((10, 20)).shape == (10, 20) and candle.rand(10, 20).shape == (10, 20)
    with pytest.raises(OverflowError):
        candle.rand((10, 20, -1))
    with pytest.raises(OverflowError):
        candle.rand(-1, 20)
    with pytest.raises(TypeError):
        candle.rand("foo", True)
    a = candle.rand(10, 20)
    assert a.reshape((1, -1)).shape == (1, 200) and a.reshape(-1, 1).shape == (200, 1)
    with pytest.raises(TypeError):
        a.reshape(1, "foo")
    with pytest.raises(ValueError):
        a.reshape(1, -2)
    with pytest.raises(ValueError):
        a.reshape((-2, 1))


def test_shape_parsing():
    assert parse_absolute_shape((1, 2, 3)) == [1, 2, 3]
    assert parse_absolute_shape(1, 2, 3) == [1, 2, 3]
    assert parse_absolute_shape(1, -1, element_count=6) == [1, 6]
    assert parse_absolute_shape(-1, 1, element_count=6) == [6, 1]
    assert parse_absolute_shape(1, 5, -1, element_count=25) == [1, 5, 5]


def test_safetensors_files_lists_and_folders(tmp_path):
    t1 = {"a": candle.randn((16, 256)), "b": candle.randn((16, 16))}
    t2 = {"c": candle.randn((8, 256)), "d": candle.randn((8, 16))}
    f1 = str(tmp_path / "model-00001-of-00002.safetensors")
    f2 = str(tmp_path / "model-00002-of-00002.safetensors")
    save_safetensors(f1, t1)
    save_safetensors(f2, t2)
    loaded = load_safetensors(f1)
    for k in t1:
        assert t1[k].values() == loaded[k].values() and str(t1[k].dtype) == str(loaded[k].dtype)
    assert set(load_safetensors(str(tmp_path))) == {"a", "b", "c", "d"}
    assert set(load_safetensors([f1, f2])) == {"a", "b", "c", "d"}


def test_module_level_api_names():
    for name in ("Tensor", "tensor", "cat", "stack", "zeros", "ones", "rand", "randn", "u8", "u32",
                 "bf16", "f16", "f32", "f64", "i64", "DType", "testing", "utils", "nn", "functional",
                 "QTensor"):
        assert hasattr(candle, name), name
    for name in ("cuda_is_available", "get_num_threads", "has_accelerate", "has_mkl",
                 "load_safetensors", "save_safetensors", "load_gguf", "save_gguf"):
        assert callable(getattr(candle.utils, name)), name
    x = candle.randn((2, 3))
    assert candle.cat([x, x], 0).shape == (4, 3) and candle.stack([x, x], 0).shape == (2, 2, 3)
    assert x.matmul(x.t()).shape == (2, 2) and x.get(1).shape == (3,)
    assert x.is_contiguous() and x.t().is_fortran_contiguous()
    assert candle.ones((2,), dtype=candle.u8).dtype == candle.u8
