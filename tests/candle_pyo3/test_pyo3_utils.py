"""Port of candle-pyo3/tests/native/test_utils.py.

candle writes into a ``tests/_workdir`` folder next to its tests; here the same
files go to pytest's ``tmp_path`` (the only change), so parallel runs cannot collide.
"""

import pytest

import tallow as candle
from tallow import QTensor, Tensor  # noqa: F401  (imported as candle's test does)
from tallow.utils import load_gguf, load_safetensors, parse_absolute_shape, save_gguf, save_safetensors


@pytest.fixture
def TEST_DIR(tmp_path):
    return tmp_path


def test_can_roundtrip_safetensors(TEST_DIR):
    tensors = {
        "a": candle.randn((16, 256)),
        "b": candle.randn((16, 16)),
    }

    file = str(TEST_DIR / "test.safetensors")
    save_safetensors(file, tensors)
    loaded_tensors = load_safetensors(file)
    assert set(tensors.keys()) == set(loaded_tensors.keys())
    for key in tensors.keys():
        assert tensors[key].values() == loaded_tensors[key].values(), "Values are not equal"
        assert tensors[key].shape == loaded_tensors[key].shape, "Shapes are not equal"
        assert str(tensors[key].dtype) == str(loaded_tensors[key].dtype), "Dtypes are not equal"


def test_can_roundtrip_multiple_safetensor_files(TEST_DIR):
    tensors_1 = {
        "a": candle.randn((16, 256)),
        "b": candle.randn((16, 16)),
    }

    tensors_2 = {
        "c": candle.randn((8, 256)),
        "d": candle.randn((8, 16)),
    }

    directory = TEST_DIR / "test_multiple_safetensors"
    directory.mkdir(exist_ok=True)
    file_1 = str(directory / "model-00001-of-00002.safetensors")
    file_2 = str(directory / "model-00002-of-00002.safetensors")

    save_safetensors(file_1, tensors_1)
    save_safetensors(file_2, tensors_2)
    loaded_tensors = load_safetensors(str(directory))
    assert set(list(tensors_1.keys()) + list(tensors_2.keys())) == set(loaded_tensors.keys())
    loaded_tensors_from_files = load_safetensors([file_1, file_2])
    assert set(list(tensors_1.keys()) + list(tensors_2.keys())) == set(loaded_tensors_from_files.keys())


def test_can_roundtrip_gguf(TEST_DIR):
    metadata = {
        "a": 1,
        "b": "foo",
        "c": [1, 2, 3],
        "d": [[1, 2], [3, 4]],
    }

    tensors = {
        "a": candle.randn((16, 256)).quantize("q4_0"),
        "b": candle.randn((16, 16)).quantize("f32"),
    }

    file = str(TEST_DIR / "test.gguf")
    save_gguf(file, tensors, metadata)
    loaded_tensors, loaded_metadata = load_gguf(file)

    assert set(metadata.keys()) == set(loaded_metadata.keys())
    for key in metadata.keys():
        assert metadata[key] == loaded_metadata[key]

    assert set(tensors.keys()) == set(loaded_tensors.keys())
    for key in tensors.keys():
        assert tensors[key].dequantize().values() == loaded_tensors[key].dequantize().values(), "Values are not equal"
        assert tensors[key].shape == loaded_tensors[key].shape, "Shapes are not equal"
        assert str(tensors[key].ggml_dtype) == str(loaded_tensors[key].ggml_dtype), "Dtypes are not equal"


def test_shape_parsing():
    result = parse_absolute_shape((1, 2, 3))
    assert result == [1, 2, 3]

    result = parse_absolute_shape(1, 2, 3)
    assert result == [1, 2, 3]

    result = parse_absolute_shape(1, -1, element_count=6)
    assert result == [1, 6]

    result = parse_absolute_shape(-1, 1, element_count=6)
    assert result == [6, 1]

    result = parse_absolute_shape(1, 5, -1, element_count=25)
    assert result == [1, 5, 5]
