"""Module semantics (candle-pyo3's / PyTorch's): registration, state dicts, moves."""

from collections import OrderedDict

import numpy as np
import pytest

import tallow as tl
from tallow.nn import Linear, Module, ModuleList, Sequential


class FakeQTensor:
    """Shaped like a quantized tensor (the real QTensor lives in tallow.quantized)."""

    def __init__(self, t, kind="Q4_0"):
        self._t = t
        self.ggml_dtype = kind
        self.shape = t.shape

    def dequantize(self):
        return self._t


def test_module_can_be_constructed():
    class A(Module):
        pass

    assert len(list(A().buffers())) == 0


def test_module_registers_tensors():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.Tensor(42.0)

    named = dict(A().named_buffers())
    assert list(named) == ["t"]


def test_module_registers_submodules():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.linear = Linear(10, 20)

    a = A()
    assert "linear" in dict(a.named_modules())
    assert set(dict(a.named_buffers())) == {"linear.weight", "linear.bias"}
    assert [n for n, _ in a.named_modules()] == ["", "linear"]


def test_state_dict_has_metadata_and_every_tensor():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.linear = Linear(10, 20)
            self.t = tl.Tensor(42.0)

    sd = A().state_dict()
    assert hasattr(sd, "_metadata")
    assert set(sd._metadata) == {"", "linear"}
    assert set(sd) == {"t", "linear.weight", "linear.bias"}


def test_load_state_dict_assigns_tensors():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.linear = Linear(10, 20)
            self.t = tl.Tensor(42.0)

    a = A()
    res = a.load_state_dict({"linear.weight": tl.ones((20, 10)), "linear.bias": tl.zeros((20,)),
                             "t": tl.Tensor(7.0)})
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert a.t.values() == 7.0
    np.testing.assert_array_equal(a.linear.weight.numpy(), np.ones((20, 10), np.float32))
    y = a.linear(tl.ones((3, 10)))
    np.testing.assert_allclose(y.numpy(), np.full((3, 20), 10.0, np.float32))


def test_load_state_dict_size_mismatch():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.Tensor(42.0)

    with pytest.raises(RuntimeError) as e:
        A().load_state_dict({"t": tl.ones((20,))})
    assert "size mismatch" in str(e.value)
    assert "(20,)" in str(e.value)


def test_load_state_dict_missing_key():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.Tensor(42.0)

    with pytest.raises(RuntimeError) as e:
        A().load_state_dict({"not_t": tl.Tensor(42.0)})
    assert 'Missing key(s) in state_dict: "t".' in str(e.value)
    assert 'Unexpected key(s) in state_dict: "not_t".' in str(e.value)
    res = A().load_state_dict({"not_t": tl.Tensor(1.0)}, strict=False)
    assert res.missing_keys == ["t"] and res.unexpected_keys == ["not_t"]


def test_quantizable_buffers_keep_quantized_tensors():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.t = tl.randn((16, 256))
            self.u = tl.randn((16, 256))
            self._quantizable_buffers.add("t")

    a = A()
    q = FakeQTensor(tl.ones((16, 256)))
    a.load_state_dict({"t": q, "u": FakeQTensor(tl.zeros((16, 256)))})
    assert a.t is q and a.t.ggml_dtype == "Q4_0"
    assert isinstance(a.u, tl.Tensor)  # not quantizable: dequantized on assignment
    assert a.u.sum_all().values() == 0.0
    # f32/f16 blocks are plain tensors anyway
    a.t = FakeQTensor(tl.ones((16, 256)), "F32")
    assert isinstance(a.t, tl.Tensor)


def test_linear_dispatches_on_a_quantized_weight():
    w = tl.randn((5, 3))

    class MatmulT:
        ggml_dtype = "Q8_0"
        shape = (5, 3)

        def dequantize(self):
            return w

        def matmul_t(self, x):
            return x.matmul(w.t())

    lin = Linear(3, 5)
    lin.weight = MatmulT()
    assert not isinstance(lin.weight, tl.Tensor)
    x = tl.randn((2, 4, 3))
    expected = x.numpy() @ w.numpy().T + lin.bias.numpy()
    np.testing.assert_allclose(lin(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_non_persistent_buffers_and_none():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", tl.zeros((2,)), persistent=False)
            self.w = tl.ones((2,))
            self.maybe = None

    a = A()
    assert set(a.state_dict()) == {"w"}
    assert set(dict(a.named_buffers())) == {"cache", "w"}
    assert a.maybe is None


def test_reassigning_changes_kind_and_delattr():
    class A(Module):
        def __init__(self):
            super().__init__()
            self.x = tl.ones((1,))

    a = A()
    a.x = Linear(1, 1)
    assert "x" in a._modules and "x" not in a._buffers
    del a.x
    with pytest.raises(AttributeError):
        a.x


def test_to_device_dtype_and_cpu(device):
    m = Sequential(Linear(4, 3), Linear(3, 2))
    m.to(device)
    assert all(b.device == device for b in m.buffers())
    m.to("f64")
    assert all(b.dtype == tl.f64 for b in m.buffers())
    y = m(tl.randn((5, 4), dtype=tl.f64, device=device))
    assert y.shape == (5, 2) and y.dtype == tl.f64
    m.cpu()
    assert all(b.device == "cpu" for b in m.buffers())
    with pytest.raises(TypeError):
        m.to("u32")


def test_sequential_and_module_list():
    a, b = Linear(4, 3), Linear(3, 2)
    seq = Sequential(a, b)
    assert len(seq) == 2 and seq[0] is a and list(seq) == [a, b]
    x = tl.randn((2, 4))
    np.testing.assert_allclose(seq(x).numpy(), b(a(x)).numpy())
    named = Sequential(OrderedDict(first=a, second=b))
    assert set(named.state_dict()) == {"first.weight", "first.bias", "second.weight", "second.bias"}
    ml = ModuleList([a, b])
    ml.append(Linear(2, 2))
    assert len(ml) == 3
    assert "2.weight" in ml.state_dict()
    # the same module twice is listed once
    twice = ModuleList([a, a])
    assert len(list(twice.named_modules())) == 2
    assert len(list(twice.buffers())) == 2


def test_state_dict_round_trip_through_safetensors(tmp_path):
    m = Sequential(Linear(4, 3), Linear(3, 2))
    path = tmp_path / "m.safetensors"
    tl.utils.save_safetensors(path, dict(m.state_dict()))
    m2 = Sequential(Linear(4, 3), Linear(3, 2))
    m2.load_state_dict(tl.utils.load_safetensors(path))
    x = tl.randn((2, 4))
    np.testing.assert_array_equal(m(x).numpy(), m2(x).numpy())


def test_add_module_validation():
    m = Module()
    with pytest.raises(KeyError):
        m.add_module("a.b", Linear(1, 1))
    with pytest.raises(TypeError):
        m.add_module("a", 3)
    with pytest.raises(AttributeError):
        m.missing


def _torch_twin():
    """The same layout as ``_tallow_twin`` in PyTorch: the oracle for key handling."""
    import torch

    m = torch.nn.Module()
    m.lin = torch.nn.Linear(2, 3)
    m.seq = torch.nn.Sequential(torch.nn.Linear(3, 3))
    m.register_buffer("t", torch.zeros(2))
    return m


def _tallow_twin():
    m = Module()
    m.lin = Linear(2, 3)
    m.seq = Sequential(Linear(3, 3))
    m.t = tl.zeros((2,))
    return m


def test_unexpected_keys_follow_pytorch():
    """A dotted key must name a submodule, an undotted one a tensor (PyTorch's rule)."""
    import torch

    extra = ["lin.weight.x", "seq", "t.y", "linx.weight", "seq.0.bias.z", "seq.1.weight"]
    ours = {k: v for k, v in _tallow_twin().state_dict().items()}
    theirs = {k: v for k, v in _torch_twin().state_dict().items()}
    for k in extra:
        ours[k], theirs[k] = tl.zeros((1,)), torch.zeros(1)
    want = _torch_twin().load_state_dict(theirs, strict=False)
    got = _tallow_twin().load_state_dict(ours, strict=False)
    assert sorted(got.unexpected_keys) == sorted(want.unexpected_keys)
    assert got.missing_keys == want.missing_keys == []
    with pytest.raises(RuntimeError, match='"lin.weight.x"'):
        _tallow_twin().load_state_dict(ours)


def test_load_state_dict_keeps_vars_so_optimisers_still_train_the_model():
    """Loading into a Var copies into it (PyTorch's copy_, dtype kept): an optimiser
    built before the load goes on updating the model."""
    import torch

    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)), rng.standard_normal(3)
    x = rng.standard_normal((5, 4)).astype(np.float32)

    tm = torch.nn.Linear(4, 3)
    topt = torch.optim.AdamW(tm.parameters(), lr=0.1)
    tm.load_state_dict({"weight": torch.tensor(w0), "bias": torch.tensor(b0)})  # f64 in
    m = Linear(4, 3)
    m.weight, m.bias = tl.Var(m.weight), tl.Var(m.bias)
    opt = tl.nn.AdamW(m, lr=0.1)
    m.load_state_dict({"weight": tl.Tensor(w0), "bias": tl.Tensor(b0)})
    assert isinstance(m.weight, tl.Var) and m.weight.dtype == tl.f32
    for _ in range(3):
        topt.zero_grad()
        tm(torch.tensor(x)).square().sum().backward()
        topt.step()
        opt.backward_step(m(tl.Tensor(x)).sqr().sum_all())
    np.testing.assert_allclose(m.weight.numpy(), tm.weight.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(m.bias.numpy(), tm.bias.detach().numpy(), atol=1e-5)
    # assign=True takes the checkpoint's dtype (as PyTorch's assign does) but keeps the
    # Var object, so the optimiser still follows it
    before = m.weight
    m.load_state_dict({"weight": tl.Tensor(w0), "bias": tl.Tensor(b0)}, assign=True)
    assert m.weight is before and m.weight.dtype == tl.f64 and opt.vars[0] is m.weight


def test_sequential_slices_keep_their_names():
    import torch

    tseq = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(4)))
    seq = Sequential(*(Linear(2, 2) for _ in range(4)))
    assert list(seq[1:3].state_dict()) == list(tseq[1:3].state_dict())
    assert list(seq[::2].state_dict()) == list(tseq[::2].state_dict())
    # a ModuleList slice is renumbered, in both
    tml, ml = torch.nn.ModuleList(list(tseq)), ModuleList(list(seq))
    assert list(ml[2:].state_dict()) == list(tml[2:].state_dict())


def test_casting_a_module_keeps_its_vars_trainable():
    """``to(dtype)`` / ``type`` keep a Var a Var (PyTorch keeps Parameters), so a
    model cast to f64 can still be trained."""
    import torch

    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)), rng.standard_normal(3)
    x = rng.standard_normal((5, 4))
    tm = torch.nn.Linear(4, 3)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(w0))
        tm.bias.copy_(torch.tensor(b0))
    tm.double()
    assert all(p.requires_grad for p in tm.parameters())
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    m = Linear.from_weights(tl.Var(w0.astype(np.float32)), tl.Var(b0.astype(np.float32)))
    m.to("f64")
    m.type(tl.f64)
    assert all(isinstance(b, tl.Var) and b.dtype == tl.f64 for b in m.buffers())
    opt = tl.nn.SGD(m, lr=0.1, momentum=0.9)
    for _ in range(3):
        topt.zero_grad()
        tm(torch.tensor(x)).square().sum().backward()
        topt.step()
        opt.backward_step(m(tl.Tensor(x)).sqr().sum_all())
    np.testing.assert_allclose(m.weight.numpy(), tm.weight.detach().numpy(), atol=1e-10)


def test_casting_keeps_tied_weights_tied():
    """A tensor shared by two modules (a tied output layer) stays one tensor, as in torch."""
    import torch

    tm = torch.nn.Module()
    tm.emb = torch.nn.Embedding(5, 3)
    tm.head = torch.nn.Linear(3, 5, bias=False)
    tm.head.weight = tm.emb.weight
    tm.double()
    m = Module()
    m.emb = tl.nn.Embedding(5, 3)
    m.head = Linear.from_weights(m.emb.weight)
    m.to("f64")
    assert (m.head.weight is m.emb.weight) == (tm.head.weight is tm.emb.weight) == True  # noqa: E712
    assert m.head.weight.dtype == tl.f64
