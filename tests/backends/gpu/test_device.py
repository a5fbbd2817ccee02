"""Device handles, ids and mixing, dtype support errors, seeded randomness,
to_device round trips, in-place ops, autograd and device info on the GPU."""

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import tallow as tl
from support.gpu import values
from support.differential import ALL_DTYPES, assert_close
from tallow.backends.gpu import new_device_state

pytestmark = pytest.mark.gpu


def test_handles_share_one_state(gpu):
    a, b = tl.Device.gpu(0), tl.Device.gpu()
    assert a == b and a.same_device(b) and a.id == b.id and hash(a) == hash(b)
    assert a._state is b._state is tl.Device.parse("gpu:0")._state
    assert a == "gpu" and a == "gpu:0" and str(a) == "gpu:0"
    assert copy.copy(a) == a and copy.deepcopy(a)._state is a._state
    assert pickle.loads(pickle.dumps(a))._state is a._state
    assert a.id != 0 and a.id != tl.cpu.id and a != tl.cpu
    assert a.kind == "gpu" and a.is_gpu and not a.is_cpu and a.ordinal == 0
    t = tl.ones((2,), device=a)
    assert t.device == b and t.device.id == a.id


def test_mixing_devices_raises(gpu):
    other = tl.Device.of(new_device_state(0))
    assert other.id != gpu.id and other != gpu and not other.same_device(gpu)
    x = tl.ones((3,), device=gpu)
    for y in (tl.ones((3,)), tl.ones((3,), device=other)):
        with pytest.raises(tl.DeviceMismatchError):
            x + y
        with pytest.raises(tl.DeviceMismatchError):
            x.reshape((1, 3)).matmul(y.reshape((3, 1)).reshape((1, 3)).t())
        with pytest.raises(tl.DeviceMismatchError):
            tl.cat([x, y], 0)
        with pytest.raises(tl.DeviceMismatchError):
            x.index_select(tl.Tensor([0], device=y.device), 0)
    moved = x.to_device(other)
    assert moved.device == other and (moved + tl.ones((3,), device=other)).values() == [2.0] * 3


def test_unknown_ordinal():
    with pytest.raises(tl.TallowError, match="no such adapter"):
        tl.Device.gpu(99)


def test_unsupported_dtypes_name_dtype_op_and_adapter(gpu):
    state = new_device_state(0, disable_features=("shader-f64", "shader-int64"))
    dev = tl.Device.of(state)
    assert not dev.supports_dtype("f64") and not dev.supports_dtype(tl.i64)
    for d in ("u8", "u32", "f16", "bf16", "f32"):
        assert dev.supports_dtype(d)
    adapter = state.adapter_info["device"]
    cases = [
        ("tensor", lambda: tl.Tensor(np.zeros(3, np.float64), device=dev)),
        ("zeros", lambda: tl.zeros((3,), dtype="f64", device=dev)),
        ("randn", lambda: tl.randn((3,), dtype="f64", device=dev)),
        ("arange", lambda: tl.arange(0, 5, device=dev)),  # all-int arange is i64
        ("to_dtype", lambda: tl.ones((3,), device=dev).to_dtype("i64")),
        ("tensor", lambda: tl.ones((2,)).to_dtype("f64").to_device(dev)),
    ]
    for op, f in cases:
        with pytest.raises(tl.UnsupportedDTypeError) as e:
            f()
        msg = str(e.value)
        assert op in msg and ("f64" in msg or "i64" in msg) and adapter in msg, msg
        assert "shader-f64" in msg or "shader-int64" in msg
    assert tl.ones((2,), dtype="f16", device=dev).values() == [1.0, 1.0]
    # Every dtype but the two that need a feature: the packed ones need none.
    assert set(dev.info()["dtypes"]) == {d.name for d in tl.dtype.ALL} - {"f64", "i64"}


def test_seeded_randomness_is_reproducible(gpu):
    gpu.set_seed(1234)
    a = tl.randn((1000,), device=gpu).numpy()
    b = tl.rand((500,), low=-2.0, high=3.0, device=gpu).numpy()
    gpu.set_seed(1234)
    np.testing.assert_array_equal(tl.randn((1000,), device=gpu).numpy(), a)
    np.testing.assert_array_equal(tl.rand((500,), low=-2.0, high=3.0, device=gpu).numpy(), b)
    c = tl.randn((1000,), device=gpu).numpy()
    assert not np.array_equal(a, c)  # the counter moved on
    gpu.set_seed(4321)
    assert not np.array_equal(tl.randn((1000,), device=gpu).numpy(), a)
    assert b.min() >= -2.0 and b.max() < 3.0
    # the same numbers in another process (run to run)
    src = os.path.abspath(os.path.join(os.path.dirname(tl.__file__), ".."))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import tallow as tl, numpy as np, sys; d = tl.Device.gpu(0); d.set_seed(1234);"
            "sys.stdout.buffer.write(tl.randn((1000,), device=d).numpy().tobytes())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.frombuffer(out.stdout, np.float32), a)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_random_distributions(gpu, dtype):
    if not gpu.supports_dtype(dtype):
        pytest.skip(dtype)
    gpu.set_seed(5)
    n = tl.randn((100_000,), mean=2.0, std=3.0, dtype=dtype, device=gpu).numpy().astype(np.float64)
    assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 3.0) < 0.05
    u = tl.rand((100_000,), low=1.0, high=2.0, dtype=dtype, device=gpu).numpy().astype(np.float64)
    assert u.min() >= 1.0 and u.max() <= 2.0 and abs(u.mean() - 1.5) < 0.01
    assert len(np.unique(u)) > (50 if dtype in ("f16", "bf16") else 90_000)
    with pytest.raises(tl.UnsupportedDTypeError):
        tl.rand((3,), dtype="u32", device=gpu)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=[str(d) for d in ALL_DTYPES])
def test_to_device_round_trips(gpu, dtype):
    if not gpu.supports_dtype(dtype):
        pytest.skip(str(dtype))
    for shape in ((), (0,), (1,), (3,), (5, 7), (2, 3, 4), (3, 0, 2)):
        x = values(shape, dtype, 1)
        t = tl.Tensor(x).to_dtype(dtype)
        g = t.to_device(gpu)
        assert g.device == gpu and g.dtype == dtype and g.shape == t.shape
        back = g.to_device(tl.cpu)
        np.testing.assert_array_equal(back.numpy(), t.numpy())
        assert g.to_device(gpu) is g
    x = values((6, 5), dtype, 2)
    g = tl.Tensor(x, device=gpu).to_dtype(dtype)
    for view in (g.t(), g[1:4, ::2], g.narrow(0, 0, 1).broadcast_as((3, 6, 5))):
        np.testing.assert_array_equal(view.to_device(tl.cpu).numpy(), view.numpy())
        np.testing.assert_array_equal(view.numpy(), view.cpu().numpy())
    np.testing.assert_array_equal(g.t().numpy(), x.astype(dtype.np).T)
    other = tl.Device.of(new_device_state(0)) if dtype is tl.f32 else None
    if other is not None:
        np.testing.assert_array_equal(g.t().to_device(other).numpy(), x.astype(np.float32).T)


def test_values_and_conversions(gpu):
    t = tl.Tensor([[1.0, 2.0], [3.0, 4.0]], device=gpu)
    assert t.values() == [[1.0, 2.0], [3.0, 4.0]] and t.to_vec2() == t.values()
    assert t[1, 0].to_scalar() == 3.0 and float(t[0, 1]) == 2.0
    assert np.asarray(t).tolist() == t.values()
    assert "gpu:0" in repr(t)
    assert t.to_torch().tolist() == t.values()
    assert tl.Tensor(7, device=gpu).item() == 7


def test_in_place_ops(gpu):
    for dev in (tl.cpu, gpu):
        base = tl.arange(0, 24, dtype="f32", device=dev).reshape((4, 6))
        view = base.t()
        base.narrow(1, 2, 2).zero_set()
        view.narrow(1, 0, 1).one_set()  # writes through the transposed view
        base[2].const_set(-5.0)
        base.slice_set(tl.full((1, 6), 9.0, device=dev), 0, 3)
        ids = tl.Tensor(np.array([[0, 2]]), device=dev)
        base.scatter_set(ids, tl.full((1, 2), 7.0, device=dev), 1)
        if dev == tl.cpu:
            want = base.numpy().copy()
        else:
            np.testing.assert_array_equal(base.numpy(), want)
            np.testing.assert_array_equal(view.numpy(), want.T)
    for dtype in ALL_DTYPES:
        if not gpu.supports_dtype(dtype):
            continue
        outs = []
        for dev in (tl.cpu, gpu):
            t = tl.zeros((5, 7), dtype=dtype, device=dev)
            t.narrow(1, 1, 3).const_set(3)
            t.t().narrow(1, 2, 2).one_set()
            t.slice_set(tl.full((5, 2), 6, dtype=dtype, device=dev), 1, 5)
            outs.append(t.numpy())
        np.testing.assert_array_equal(outs[1], outs[0])


def test_custom_ops_get_gpu_storages(gpu):
    class Double(tl.CustomOp1):
        def cpu_fwd(self, s, layout):
            return np.asarray(s)[: layout.count] * 2, layout.shape

        def gpu_fwd(self, s, layout):
            return s.affine(layout, 2.0, 0.0), layout.shape

    x = tl.Tensor([1.0, 2.0], device=gpu)
    assert x.apply_op1(Double()).values() == [2.0, 4.0]


def test_autograd_on_gpu(gpu):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    w1 = rng.standard_normal((5, 6)).astype(np.float32)
    w2 = rng.standard_normal((6, 3)).astype(np.float32)
    target = rng.integers(0, 3, 8)
    grads = []
    for dev in (tl.cpu, gpu):
        vx = tl.Tensor(x, device=dev)
        v1, v2 = tl.Var(tl.Tensor(w1, device=dev)), tl.Var(tl.Tensor(w2, device=dev))
        h = (vx @ v1).relu().tanh()
        logits = h @ v2
        lse = logits.log_sum_exp(1)
        picked = logits.gather(tl.Tensor(target.reshape(8, 1), device=dev), 1).squeeze(1)
        loss = (lse - picked).mean_all() + (v1.sqr().sum_all() * 0.01)
        g = loss.backward()
        grads.append((loss.numpy(), g[v1].numpy(), g[v2].numpy()))
        assert g[v1].device == dev
    for a, b in zip(grads[0], grads[1]):
        assert_close(b, a, tl.f32, gpu)


def test_info(gpu):
    info = gpu.info()
    for key in ("adapter", "backend", "backend_type", "adapter_type", "features", "limits"):
        assert key in info
    assert info["limits"]["max-storage-buffer-binding-size"] == gpu._state.max_binding
    assert isinstance(info["features"], list)
    assert info["id"] == gpu.id


def test_cli_info_shows_the_adapter(gpu):
    src = os.path.abspath(os.path.join(os.path.dirname(tl.__file__), ".."))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "tallow.cli", "info"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert gpu.info()["adapter_name"] in out.stdout
    assert "features:" in out.stdout and "max-storage-buffer-binding-size" in out.stdout
