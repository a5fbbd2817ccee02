"""PyTorch checkpoints read without PyTorch and without running code from the file:
``torch.save`` files (zip and legacy formats) load equal to what was saved, and
malicious pickles raise before anything they name is called."""

from __future__ import annotations

import collections
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.serialization import load, load_state_dict
from tallow.torch_checkpoint import CheckpointError, load_arrays

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def _same(t: tl.Tensor, ref: torch.Tensor):
    ref = ref.detach()
    assert t.shape == tuple(ref.shape)
    if ref.dtype == torch.bfloat16:
        assert t.dtype == tl.bf16
        np.testing.assert_array_equal(t.numpy().astype(np.float32), ref.float().numpy())
    else:
        assert np.asarray(t.numpy()).dtype == ref.numpy().dtype
        np.testing.assert_array_equal(t.numpy(), ref.numpy())


@pytest.fixture(params=["zip", "legacy"])
def save_as(request, tmp_path):
    def save(obj, name="ck.pt"):
        path = tmp_path / name
        torch.save(obj, path, _use_new_zipfile_serialization=request.param == "zip")
        return path
    return save


def test_every_dtype_loads_equal(save_as):
    g = torch.Generator().manual_seed(0)
    sd = {}
    for d in DTYPES:
        x = torch.randn(3, 5, generator=g) * 50
        sd[str(d)] = x.to(d) if d != torch.bool else x > 0
    out = load(save_as(sd))
    assert sorted(out) == sorted(sd)
    for k, v in sd.items():
        _same(out[k], v)


def test_views_shared_storages_and_parameters(save_as):
    w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = collections.OrderedDict(
        w=w, col=w[:, 1], t=w.t(), stepped=w[::2, 1::3], tied=w, tail=w.flatten()[5:],
        p=torch.nn.Parameter(torch.ones(3)), empty=torch.zeros(0, 4), scalar=torch.tensor(2.5))
    sd._metadata = {"": {"version": 1}}
    out = load(save_as(sd))
    assert isinstance(out, collections.OrderedDict) and out._metadata == {"": {"version": 1}}
    for k, v in sd.items():
        _same(out[k], v)


def test_nested_containers_and_plain_values(save_as):
    obj = {"model": {"a.weight": torch.ones(2, 2)}, "optimizer": {"state": {0: {"step": torch.tensor(3.0)}},
                                                                   "param_groups": [{"lr": 0.1, "params": [0]}]},
           "epoch": 7, "name": "run", "best": None, "shape": torch.Size([2, 3]), "flags": (True, 1.5),
           "raw": b"\x00\xffbytes", "ids": {1, 2}}
    out = load(save_as(obj))
    _same(out["model"]["a.weight"], obj["model"]["a.weight"])
    _same(out["optimizer"]["state"][0]["step"], obj["optimizer"]["state"][0]["step"])
    assert out["optimizer"]["param_groups"] == [{"lr": 0.1, "params": [0]}]
    assert (out["epoch"], out["name"], out["best"], out["shape"], out["flags"], out["raw"], out["ids"]) == (
        7, "run", None, (2, 3), (True, 1.5), b"\x00\xffbytes", {1, 2})


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_random_views_load_equal(tmp_path_factory, shape, data):
    base = torch.randn(*shape, dtype=torch.float64)
    perm = data.draw(st.permutations(range(len(shape))))
    view = base.permute(*perm)
    index = tuple(slice(data.draw(st.integers(0, n - 1)), None, data.draw(st.integers(1, 3))) for n in view.shape)
    view = view[index]
    path = tmp_path_factory.mktemp("v") / "v.pt"
    torch.save({"v": view, "base": base}, path)
    out = load(path)
    _same(out["v"], view)
    _same(out["base"], base)


def test_a_model_state_dict_into_a_varbuilder(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    path = tmp_path / "pytorch_model.bin"
    torch.save(m.state_dict(), path)
    x = torch.randn(2, 4)
    vb = tl.nn.VarBuilder.from_pth(path)
    lin = tl.nn.Linear.load(vb, 4, 3)
    np.testing.assert_allclose(lin(tl.tensor(x.numpy())).numpy(), m(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    assert sorted(load_state_dict(tmp_path)) == ["bias", "weight"]  # the folder finds pytorch_model.bin


@pytest.mark.parametrize("kind", ["bin", "safetensors"])
def test_sharded_checkpoints(tmp_path, kind):
    import json

    from safetensors.torch import save_file

    torch.manual_seed(1)
    parts = [{"a.weight": torch.randn(2, 3), "a.bias": torch.randn(2)}, {"b.weight": torch.randn(4, 2)}]
    weight_map = {}
    for i, part in enumerate(parts):
        name = f"model-{i + 1:05d}-of-00002.{kind}"
        if kind == "bin":
            torch.save(part, tmp_path / name)
        else:
            save_file(part, str(tmp_path / name))
        weight_map.update({k: name for k in part})
    index = tmp_path / ("pytorch_model.bin.index.json" if kind == "bin" else "model.safetensors.index.json")
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for where in (index, tmp_path):
        out = load_state_dict(where)
        assert sorted(out) == sorted(weight_map)
        for part in parts:
            for k, v in part.items():
                _same(out[k], v)
    weight_map["c.weight"] = weight_map["b.weight"]
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(tl.FileFormatError, match="c.weight"):
        load_state_dict(index)


# -- malicious files ---------------------------------------------------------------------------------

SENTINEL = "tallow-pwned"


class _System:
    def __reduce__(self):
        return (os.system, (f"touch {SENTINEL}",))


class _Eval:
    def __reduce__(self):
        return (eval, (f"open({SENTINEL!r}, 'w')",))


class _Nested:
    """A __reduce__ hidden inside an otherwise normal state dict."""

    def __reduce__(self):
        return (getattr, (collections.OrderedDict(), "fromkeys"))


def _zip_with(tmp_path, payload: bytes, good=None):
    """A real torch.save archive (``good``, or one of two ones) whose data.pkl is
    replaced by ``payload``."""
    if good is None:
        good = tmp_path / "good.pt"
        torch.save({"w": torch.ones(2)}, good)
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as dst:
        for item in src.infolist():
            data = payload if item.filename.endswith("data.pkl") else src.read(item)
            dst.writestr(item, data)
    return bad


PAYLOADS = {
    "os.system": lambda: pickle.dumps(_System(), protocol=2),
    "eval": lambda: pickle.dumps(_Eval(), protocol=2),
    "getattr": lambda: pickle.dumps({"w": _Nested()}, protocol=2),
    "subprocess": lambda: b"\x80\x02csubprocess\nPopen\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.",
    "whole module": lambda: b"\x80\x02ctorch.nn.modules.linear\nLinear\nq\x00)\x81q\x01.",
    "protocol 4": lambda: pickle.dumps(_System(), protocol=4),
    "inst opcode": lambda: b"(ios\nsystem\nS'touch " + SENTINEL.encode() + b"'\ntR.",
    "build on a foreign object": lambda: b"\x80\x02cbuiltins\nset\n)R}X\x03\x00\x00\x00addq\x00Nsb.",
    "codecs other encoding": lambda: b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R.",
    "bad persistent id": lambda: b"\x80\x02X\x01\x00\x00\x00xQ.",
}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
@pytest.mark.parametrize("container", ["zip", "legacy"])
def test_malicious_pickles_raise_without_running_anything(tmp_path, monkeypatch, name, container):
    monkeypatch.chdir(tmp_path)
    payload = PAYLOADS[name]()
    if container == "zip":
        path = _zip_with(tmp_path, payload)
    else:
        path = tmp_path / "legacy.pt"
        head = b"".join(pickle.dumps(v, protocol=2) for v in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}))
        path.write_bytes(head + payload)
    with pytest.raises(CheckpointError):
        load(path)
    assert not (tmp_path / SENTINEL).exists()


def test_a_whole_module_says_to_save_the_state_dict(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(CheckpointError, match=r"state_dict\(\)"):
        load(path)


def test_a_tensor_past_its_storage_is_refused(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(4)}, good)
    with zipfile.ZipFile(good) as z:
        pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
    # the size (4,) -> (9,): the storage holds 4 elements
    bad = _zip_with(tmp_path, pkl.replace(b"K\x04\x85", b"K\x09\x85", 1), good)
    with pytest.raises(CheckpointError, match="past its storage"):
        load_arrays(bad)


def test_weights_only_false_is_refused(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"w": torch.ones(1)}, path)
    with pytest.raises(tl.InvalidArgumentError, match="never code"):
        load(path, weights_only=False)


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.pt"
    path.write_bytes(b"\x80\x02K\x05.")  # a pickle of 5: not the legacy magic number
    with pytest.raises(CheckpointError, match="magic"):
        load(path)
