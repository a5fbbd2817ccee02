"""Not a port: candle-pyo3's ``candle.nn`` Python modules (module.py, container.py,
linear.py, sparse.py, normalization.py) name these classes; a program using them must
find them after ``import tallow as candle``. Behaviour checked is the PyTorch-like
one those modules document."""

import pytest

import tallow as candle
from tallow.nn import Embedding, Identity, LayerNorm, Linear, Module, ModuleDict, ModuleList, Sequential


def test_nn_names_exist():
    for cls in (Module, Linear, Identity, Embedding, LayerNorm, Sequential, ModuleList, ModuleDict):
        assert issubclass(cls, Module)


def test_identity_ignores_its_arguments():
    m = Identity(54, unused_argument1=0.1, unused_argument2=False)
    x = candle.randn((128, 20))
    assert m(x) is x and len(list(m.buffers())) == 0


def test_module_dict_registers_by_name_in_order():
    d = ModuleDict({"b": Linear(2, 3), "a": Linear(3, 4)})
    d.update([("c", Linear(4, 5))])
    d["a"] = Linear(3, 6)  # replaces, keeps the place
    assert list(d) == list(d.keys()) == ["b", "a", "c"] and len(d) == 3 and "a" in d
    assert d["a"].out_features == 6
    assert set(d.state_dict()) == {"b.weight", "b.bias", "a.weight", "a.bias", "c.weight", "c.bias"}
    assert d.pop("b").out_features == 3 and list(d) == ["a", "c"]
    del d["a"]
    assert [k for k, _ in d.items()] == ["c"] and len(list(d.values())) == 1
    d.clear()
    assert len(d) == 0 and dict(d.named_buffers()) == {}
    with pytest.raises((TypeError, ValueError)):
        ModuleDict([("x", Linear(1, 1), "extra")])


def test_module_list_delete_pop_and_add_renumber():
    ml = ModuleList([Linear(1, 2), Linear(2, 3), Linear(3, 4)])
    assert ml.pop(0).out_features == 2
    assert [m.out_features for m in ml] == [3, 4] and list(ml._modules) == ["0", "1"]
    del ml[-1]
    assert len(ml) == 1 and "0.weight" in ml.state_dict()
    ml += [Linear(4, 5)]
    both = ml + ModuleList([Linear(5, 6)])
    assert [m.out_features for m in both] == [3, 5, 6] and list(both._modules) == ["0", "1", "2"]


def test_layer_norm_and_embedding_take_candle_pyo3_arguments():
    # candle-pyo3: LayerNorm(normalized_shape, eps, bias, device, dtype); Embedding(n, dim,
    # device, dtype). LayerNorm's third argument is PyTorch's elementwise_affine here
    # (docs/differences.md): bias=False is a keyword.
    ln = LayerNorm(8, 1e-5, bias=False, device=None, dtype=None)
    assert ln.normalized_shape == (8,) and set(ln.state_dict()) == {"weight"}
    assert set(LayerNorm(8, 1e-5, False).state_dict()) == set()
    assert ln(candle.randn((2, 3, 8))).shape == (2, 3, 8)
    e = Embedding(10, 4, None, candle.f16)
    assert (e.num_embeddings, e.embedding_dim, e.weight.dtype) == (10, 4, candle.f16)
    assert e(candle.tensor([[1, 2, 3]])).shape == (1, 3, 4)
