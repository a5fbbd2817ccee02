"""VarBuilder over safetensors (memory-mapped, lazy) and VarMap."""

import mmap

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import tallow as tl
from tallow.nn import Init, VarBuilder, VarMap


@pytest.fixture
def st_file(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "enc.w": rng.standard_normal((4, 3)).astype(np.float32),
        "enc.b": rng.standard_normal((4,)).astype(np.float32),
        "enc.sub.x": np.arange(6, dtype=np.int64).reshape(2, 3),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
        "bf": rng.standard_normal((3,)).astype(ml_dtypes.bfloat16),
    }
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path))
    return path, tensors


def _backed_by_mmap(a):
    while a is not None:
        if isinstance(a, mmap.mmap):
            return True
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return False


def test_get_with_prefix_reads_the_mapped_file(st_file):
    path, tensors = st_file
    vb = VarBuilder.from_safetensors(path)
    enc = vb.pp("enc")
    w = enc.get((4, 3), "w")
    np.testing.assert_array_equal(w.numpy(), tensors["enc.w"])
    # f32 file, f32 builder: the tensor is a view of the mapped file, not a copy
    assert _backed_by_mmap(w.storage_and_layout()[0].arr)
    assert enc.pp("sub").get((2, 3), "x", dtype="i64").values() == [[0, 1, 2], [3, 4, 5]]
    assert vb.contains_tensor("enc.b") and "b" in enc and "nope" not in enc
    assert sorted(enc.keys()) == ["b", "sub.x", "w"]
    # in-place writes never reach the file
    w.zero_set()
    again = VarBuilder.from_safetensors(path).get((4, 3), "enc.w")
    np.testing.assert_array_equal(again.numpy(), tensors["enc.w"])


def test_dtype_and_device_conversion(st_file, device):
    path, tensors = st_file
    vb = VarBuilder.from_safetensors(path, dtype=tl.f64, device=device)
    h = vb.get((2, 2), "half")
    assert h.dtype == tl.f64 and h.device == device
    np.testing.assert_allclose(h.numpy(), tensors["half"].astype(np.float64))
    bf = VarBuilder.from_safetensors(path, dtype="bf16").get(3, "bf")
    assert bf.dtype == tl.bf16
    np.testing.assert_array_equal(bf.numpy(), tensors["bf"])


def test_missing_and_wrong_shape_errors_name_everything(st_file):
    path, _ = st_file
    vb = VarBuilder.from_safetensors(path).pp("enc")
    with pytest.raises(tl.nn.MissingTensorError) as e:
        vb.get((4,), "bias")
    msg = str(e.value)
    assert "enc.bias" in msg and str(path) in msg and "(4,)" in msg
    assert isinstance(e.value, KeyError)
    with pytest.raises(tl.ShapeMismatchError) as e:
        vb.get((3, 4), "w")
    msg = str(e.value)
    assert "enc.w" in msg and "(3, 4)" in msg and "(4, 3)" in msg and str(path) in msg


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        VarBuilder.from_safetensors(tmp_path / "nope.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}!!!!!!")
    with pytest.raises(tl.FileFormatError):
        VarBuilder.from_safetensors(bad)
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"abc")
    with pytest.raises(tl.FileFormatError):
        VarBuilder.from_safetensors(short)


def test_truncated_data_is_refused(st_file, tmp_path):
    path, _ = st_file
    data = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-8])
    with pytest.raises(tl.FileFormatError, match="data offsets"):
        VarBuilder.from_safetensors(cut)


def test_sharded_files(tmp_path):
    save_file({"a": np.ones((2,), np.float32)}, str(tmp_path / "m-1.safetensors"))
    save_file({"b": np.zeros((3,), np.float32)}, str(tmp_path / "m-2.safetensors"))
    vb = VarBuilder.from_safetensors([tmp_path / "m-1.safetensors", tmp_path / "m-2.safetensors"])
    assert vb.get(2, "a").values() == [1.0, 1.0]
    assert vb.get(3, "b").values() == [0.0, 0.0, 0.0]


def test_from_tensors_and_layers_load():
    vb = VarBuilder.from_tensors({"l.weight": tl.ones((2, 3)), "l.bias": tl.zeros((2,)),
                                  "n.weight": tl.ones((3,)), "n.bias": tl.zeros((3,))})
    lin = tl.nn.Linear.load(vb.pp("l"), 3, 2)
    assert lin(tl.ones((1, 3))).values() == [[3.0, 3.0]]
    ln = tl.nn.LayerNorm.load(vb.pp("n"), 3, 1e-5)
    assert ln.weight.shape == (3,)
    with pytest.raises(tl.ShapeMismatchError):
        tl.nn.Linear.load(vb.pp("l"), 4, 2)


def test_varmap_creates_and_trains(tmp_path):
    vm = VarMap()
    vb = VarBuilder.from_varmap(vm, tl.f32)
    lin = tl.nn.Linear.load(vb.pp("fc"), 3, 1)
    assert set(vm.data()) == {"fc.weight", "fc.bias"}
    assert all(isinstance(v, tl.Var) for v in vm.all_vars())
    # a second get returns the same variable
    assert vb.pp("fc").get((1, 3), "weight") is vm.data()["fc.weight"]
    with pytest.raises(tl.ShapeMismatchError):
        vb.pp("fc").get((2, 3), "weight")
    const = vb.get((2,), "c", Init.const(3.0))
    assert const.values() == [3.0, 3.0]
    # learn y = x . [1, -2, 0.5] + 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 1.0
    opt = tl.nn.SGD(vm, lr=0.1)
    xt, yt = tl.Tensor(x), tl.Tensor(y)
    for _ in range(200):
        opt.backward_step(tl.nn.loss.mse(lin(xt), yt))
    np.testing.assert_allclose(lin.weight.numpy(), [[1.0, -2.0, 0.5]], atol=1e-3)
    np.testing.assert_allclose(lin.bias.numpy(), [1.0], atol=1e-3)
    path = tmp_path / "vm.safetensors"
    vm.save(path)
    vm2 = VarMap()
    lin2 = tl.nn.Linear.load(VarBuilder.from_varmap(vm2).pp("fc"), 3, 1)
    VarBuilder.from_varmap(vm2).get((2,), "c")
    vm2.load(path)
    np.testing.assert_array_equal(lin2.weight.numpy(), lin.weight.numpy())


def test_zeros_builder():
    vb = VarBuilder.zeros(tl.f32)
    assert vb.get((2, 2), "anything").values() == [[0.0, 0.0], [0.0, 0.0]]
