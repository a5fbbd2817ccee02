"""tl.save / tl.load: safetensors inside, nested structure and metadata kept, read
back by tallow and by the safetensors library."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

import tallow as tl


def test_a_flat_state_dict_keeps_its_names(tmp_path):
    sd = {"fc.weight": tl.randn((3, 2)), "fc.bias": tl.zeros((3,)), "steps": tl.tensor([1, 2], dtype=tl.i32)}
    path = tmp_path / "sd.safetensors"
    tl.save(sd, path)
    plain = load_file(str(path))  # an ordinary safetensors state dict to other readers
    assert sorted(plain) == sorted(sd)
    back = tl.load(path)
    assert sorted(back) == sorted(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())
        np.testing.assert_array_equal(plain[k], v.numpy())


def test_nested_structure_values_and_metadata_round_trip(tmp_path):
    w = tl.randn((2, 2))
    obj = {"model": {"w": w, "layers": [tl.ones((1,)), tl.tensor([True, False])]},
           "tied": w, "optim": {"lr": 1e-3, "betas": (0.9, 0.999), "step": 12, "name": "adamw", "none": None}}
    path = tmp_path / "ck.safetensors"
    tl.save(obj, path, metadata={"epoch": 3})
    back, meta = tl.load(path, with_metadata=True)
    assert meta == {"epoch": "3"}
    assert back["optim"] == obj["optim"] and isinstance(back["optim"]["betas"], tuple)
    np.testing.assert_array_equal(back["model"]["w"].numpy(), w.numpy())
    assert back["tied"] is back["model"]["w"]  # one tensor saved once, referenced twice
    assert back["model"]["layers"][1].dtype == obj["model"]["layers"][1].dtype
    assert len(load_file(str(path))) == 3


def test_a_single_tensor_and_a_gpu_free_device_argument(tmp_path):
    t = tl.arange(0, 6).reshape((2, 3))
    tl.save(t, tmp_path / "t.safetensors")
    back = tl.load(tmp_path / "t.safetensors", map_location="cpu")
    np.testing.assert_array_equal(back.numpy(), t.numpy())


@pytest.mark.parametrize("bad", [object(), {1: tl.ones((1,))}, {"x": {1, 2}}])
def test_what_cannot_be_saved_is_refused_before_writing(tmp_path, bad):
    path = tmp_path / "x.safetensors"
    with pytest.raises(tl.InvalidArgumentError):
        tl.save(bad, path)
    assert not path.exists()


def test_the_structure_key_is_reserved(tmp_path):
    with pytest.raises(tl.InvalidArgumentError, match="tallow's own"):
        tl.save({"a": tl.ones((1,))}, tmp_path / "x.safetensors", metadata={"tallow.structure": "x"})
