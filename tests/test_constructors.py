"""Tensor's constructors are its class methods, and the module-level names are them.

Values are checked against NumPy in test_creation.py; here: which function a name
is, what it returns when called through Var, and that ``tallow.tensor`` stays the
function whichever submodules are loaded.
"""

import importlib

import numpy as np
import pytest

import tallow as tl

CLASS_METHODS = ("zeros", "ones", "full", "eye", "arange", "linspace", "rand", "randn",
                 "tril2", "triu2", "from_numpy", "from_dlpack")


@pytest.mark.parametrize("name", CLASS_METHODS)
def test_module_constructor_is_the_class_method(name):
    assert getattr(tl, name) == getattr(tl.Tensor, name)
    assert getattr(tl, name).__self__ is tl.Tensor


@pytest.mark.parametrize("name", ("cat", "stack"))
def test_static_constructors_are_shared(name):
    assert getattr(tl, name) is getattr(tl.Tensor, name)


def test_module_meshgrid_takes_pytorchs_and_candles_arguments():
    # tl.meshgrid is PyTorch's (tensors as arguments, indexing=); candle's list form
    # and Tensor.meshgrid keep working and agree with it.
    import torch

    a, b = tl.arange(0, 3), tl.arange(0, 2)
    for indexing in ("ij", "xy"):
        ours = tl.meshgrid(a, b, indexing=indexing)
        theirs = torch.meshgrid(torch.arange(3), torch.arange(2), indexing=indexing)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    listed = tl.meshgrid([a, b], indexing="ij")
    method = tl.Tensor.meshgrid([a, b])  # candle's (xy_indexing=False: "ij")
    for x, y, z in zip(listed, method, tl.meshgrid(a, b, indexing="ij")):
        np.testing.assert_array_equal(x.numpy(), z.numpy())
        np.testing.assert_array_equal(y.numpy(), z.numpy())


def test_var_constructors_give_plain_tensors():
    for t in (tl.Var.zeros((2, 3)), tl.Var.new([1.0, 2.0]), tl.Var.arange(4),
              tl.Var.from_numpy(np.ones(3, np.float32))):
        assert type(t) is tl.Tensor and not t.track_op()
    v = tl.Var([1.0, 2.0])
    assert type(tl.Tensor.cat([v, v], 0)) is tl.Tensor and tl.Tensor.cat([v, v], 0).track_op()


def test_tensor_function_is_not_shadowed_by_a_module():
    importlib.import_module("tallow.tensor_class")
    importlib.import_module("tallow.creation")
    assert callable(tl.tensor) and not isinstance(tl.tensor, type(tl))
    t = tl.tensor([[1, 2], [3, 4]], dtype="f32")
    np.testing.assert_array_equal(t.numpy(), np.array([[1, 2], [3, 4]], np.float32))


def test_new_copies_and_moves(device):
    src = tl.tensor([1.0, 2.0, 3.0])
    t = tl.Tensor.new(src, device=device)
    assert t.device == device and t.id != src.id
    if device.kind == "cpu":
        assert t.storage_and_layout()[0].ptr != src.storage_and_layout()[0].ptr
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])
