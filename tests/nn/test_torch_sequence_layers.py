"""Attention, transformer and recurrent layers against torch.nn: the same weights
(PyTorch's state dict loaded as it is), the same inputs and masks; outputs, the inputs'
gradients and every parameter's gradient, on the CPU and the GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tallow as tl

nn = tl.nn


def _tl(t, device):
    return tl.Tensor(t.detach().numpy(), device=device)


def _sync(ours, theirs, device):
    ours.to(device)
    ours.load_state_dict({k: _tl(v, device) for k, v in theirs.state_dict().items()})
    return ours


def _flat(out):
    """The tensors of a layer's output, in order ((y, (h, c)) -> [y, h, c])."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def _compare(ours, theirs, inputs, device, call=None, atol=3e-5, rtol=2e-4, kwargs=None, grad_inputs=None):
    """Run both layers on ``inputs`` (NumPy arrays; those listed in ``grad_inputs`` get
    gradients), compare every output, then the gradients of a random projection of
    them with respect to those inputs and every parameter."""
    kwargs = kwargs or {}
    theirs.zero_grad()
    grad_inputs = range(len(inputs)) if grad_inputs is None else grad_inputs
    tin = [torch.tensor(a, requires_grad=i in grad_inputs) for i, a in enumerate(inputs)]
    ours_in = [tl.Var(a, device=device) if i in grad_inputs else tl.Tensor(a, device=device)
               for i, a in enumerate(inputs)]
    call = call or (lambda m, xs, kw: m(*xs, **kw))
    t_out = _flat(call(theirs, tin, {k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v)
                                     for k, v in kwargs.items()}))
    o_out = _flat(call(ours, ours_in, {k: (tl.Tensor(v, device=device) if isinstance(v, np.ndarray) else v)
                                       for k, v in kwargs.items()}))
    assert len(o_out) == len(t_out)
    rng = np.random.default_rng(7)
    t_loss, o_loss = 0, None
    for o, t in zip(o_out, t_out):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=atol, rtol=rtol)
        r = rng.standard_normal(tuple(t.shape)).astype(np.float32)
        t_loss = t_loss + (t * torch.from_numpy(r)).sum()
        term = (o * tl.Tensor(r, device=device)).sum_all()
        o_loss = term if o_loss is None else o_loss + term
    t_loss.backward()
    grads = o_loss.backward()
    for i in grad_inputs:
        np.testing.assert_allclose(grads[ours_in[i]].numpy(), tin[i].grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=f"input {i}")
    params = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        if p.grad is None:
            continue
        np.testing.assert_allclose(grads[params[name]].numpy(), p.grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=name)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- recurrent layers ---------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(["RNN", "LSTM", "GRU"]), layers=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), bias=st.booleans(), seq=st.integers(1, 5), batch=st.integers(1, 3),
       with_state=st.booleans(), seed=st.integers(0, 100))
def test_recurrent_layers_match_torch(kind, layers, bidirectional, batch_first, bias, seq, batch, with_state, seed):
    torch.manual_seed(seed)
    kw = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    theirs = getattr(torch.nn, kind)(3, 4, **kw)
    ours = _sync(getattr(nn, kind)(3, 4, **kw), theirs, tl.cpu)
    x = _x(*((batch, seq, 3) if batch_first else (seq, batch, 3)), seed=seed)
    inputs = [x]
    dirs = 2 if bidirectional else 1
    if with_state:
        inputs.append(_x(layers * dirs, batch, 4, seed=seed + 1))
        if kind == "LSTM":
            inputs.append(_x(layers * dirs, batch, 4, seed=seed + 2))
    call = None
    if kind == "LSTM" and with_state:
        call = lambda m, xs, kw: m(xs[0], (xs[1], xs[2]))
    _compare(ours, theirs, inputs, tl.cpu, call=call)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_recurrent_layers_on_each_device(device, kind):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(5, 6, num_layers=2, batch_first=True)
    ours = _sync(getattr(nn, kind)(5, 6, num_layers=2, batch_first=True), theirs, device)
    _compare(ours, theirs, [_x(2, 4, 5)], device)


def test_lstm_projection_relu_rnn_and_unbatched_input():
    torch.manual_seed(1)
    theirs = torch.nn.LSTM(3, 6, proj_size=2, bidirectional=True)
    _compare(_sync(nn.LSTM(3, 6, proj_size=2, bidirectional=True), theirs, tl.cpu), theirs, [_x(4, 2, 3)], tl.cpu)
    theirs = torch.nn.RNN(3, 4, nonlinearity="relu")
    _compare(_sync(nn.RNN(3, 4, nonlinearity="relu"), theirs, tl.cpu), theirs, [_x(5, 3)], tl.cpu)  # (L, in)
    theirs = torch.nn.GRU(3, 4, num_layers=2)
    _compare(_sync(nn.GRU(3, 4, num_layers=2), theirs, tl.cpu), theirs, [_x(5, 3), _x(2, 4, seed=3)], tl.cpu)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(kind):
    torch.manual_seed(2)
    theirs = getattr(torch.nn, kind)(3, 5)
    ours = _sync(getattr(nn, kind)(3, 5), theirs, tl.cpu)
    _compare(ours, theirs, [_x(4, 3)], tl.cpu)
    if kind == "LSTMCell":
        call = lambda m, xs, kw: m(xs[0], (xs[1], xs[2]))
        _compare(ours, theirs, [_x(4, 3), _x(4, 5, seed=1), _x(4, 5, seed=2)], tl.cpu, call=call)
    else:
        _compare(ours, theirs, [_x(3), _x(5, seed=1)], tl.cpu)  # unbatched


def test_recurrent_errors_name_the_problem():
    with pytest.raises(tl.ShapeMismatchError, match="expected 3"):
        nn.LSTM(3, 4)(tl.zeros((2, 1, 5)))
    with pytest.raises(tl.ShapeMismatchError, match="h_0"):
        nn.GRU(3, 4)(tl.zeros((2, 1, 3)), tl.zeros((2, 1, 4)))
    with pytest.raises(nn.UnsupportedOptionError):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(nn.UnsupportedOptionError):
        nn.GRU(3, 4, proj_size=2)


# -- attention and transformers -----------------------------------------------------------------------

def _mask_kwargs(kind, batch, L, S, heads, seed):
    rng = np.random.default_rng(seed)
    kw = {}
    if kind in ("bool", "both"):
        m = rng.random((L, S)) < 0.3
        m[:, 0] = False  # every query keeps a key
        kw["attn_mask"] = m
    if kind == "float":
        kw["attn_mask"] = rng.standard_normal((batch * heads, L, S)).astype(np.float32)
    if kind in ("padding", "both"):
        p = rng.random((batch, S)) < 0.3
        p[:, 0] = False
        kw["key_padding_mask"] = p
    return kw


@settings(max_examples=15, deadline=None)
@given(batch_first=st.booleans(), masks=st.sampled_from(["none", "bool", "float", "padding", "both", "causal"]),
       L=st.integers(1, 4), S=st.integers(1, 4), heads=st.sampled_from([1, 2]), bias=st.booleans(),
       average=st.booleans(), seed=st.integers(0, 50))
def test_multihead_attention_matches_torch(batch_first, masks, L, S, heads, bias, average, seed):
    if masks == "causal":
        S = L
    torch.manual_seed(seed)
    theirs = torch.nn.MultiheadAttention(8, heads, bias=bias, batch_first=batch_first)
    ours = _sync(nn.MultiheadAttention(8, heads, bias=bias, batch_first=batch_first), theirs, tl.cpu)
    shape = lambda n: (2, n, 8) if batch_first else (n, 2, 8)
    kwargs = _mask_kwargs(masks, 2, L, S, heads, seed)
    kwargs["average_attn_weights"] = average
    if masks == "causal":
        kwargs["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(L).numpy()
    _compare(ours, theirs, [_x(*shape(L), seed=seed), _x(*shape(S), seed=seed + 1), _x(*shape(S), seed=seed + 2)],
             tl.cpu, kwargs=kwargs)


def test_multihead_attention_kdim_bias_kv_zero_attn_and_unbatched(device):
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True)
    ours = _sync(nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True), theirs, device)
    _compare(ours, theirs, [_x(3, 2, 8), _x(4, 2, 5, seed=1), _x(4, 2, 3, seed=2)], device,
             kwargs={"key_padding_mask": np.array([[False, True, False, False], [False] * 4])})
    theirs = torch.nn.MultiheadAttention(8, 4)
    ours = _sync(nn.MultiheadAttention(8, 4), theirs, device)
    _compare(ours, theirs, [_x(3, 8), _x(5, 8, seed=1), _x(5, 8, seed=2)], device)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_layers_match_torch(device, norm_first, activation):
    torch.manual_seed(4)
    kw = dict(dim_feedforward=16, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, **kw), 2, enable_nested_tensor=False)
    ours = _sync(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, **kw), 2), theirs, device)
    pad = np.array([[False, False, False, True], [False] * 4])
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4).numpy()
    _compare(ours, theirs, [_x(2, 4, 8)], device, kwargs={"mask": mask, "src_key_padding_mask": pad})
    theirs = torch.nn.TransformerDecoderLayer(8, 2, **kw)
    ours = _sync(nn.TransformerDecoderLayer(8, 2, **kw), theirs, device)
    _compare(ours, theirs, [_x(2, 3, 8), _x(2, 4, 8, seed=1)], device,
             kwargs={"tgt_mask": mask[:3, :3], "memory_key_padding_mask": pad})


def test_the_whole_transformer_matches_torch():
    torch.manual_seed(5)
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16, dropout=0.0)
    theirs = torch.nn.Transformer(**kw)
    ours = _sync(nn.Transformer(**kw), theirs, tl.cpu)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(3).numpy()
    _compare(ours, theirs, [_x(5, 2, 8), _x(3, 2, 8, seed=1)], tl.cpu, kwargs={"tgt_mask": tgt_mask})
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())


def test_is_causal_equals_the_explicit_mask():
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    x = tl.Tensor(_x(4, 1, 8))
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(layer(x, is_causal=True).numpy(), layer(x, src_mask=mask).numpy())


def test_parameter_and_init_follow_pytorch():
    p = nn.Parameter(tl.ones((3,)))
    assert isinstance(p, tl.Var) and isinstance(p, nn.Parameter) and not isinstance(tl.ones((1,)), nn.Parameter)
    lin = nn.Linear(64, 32)
    nn.init.xavier_uniform_(lin.weight)
    bound = np.sqrt(6 / 96)
    w = lin.weight.numpy()
    assert isinstance(lin.weight, tl.Var) and abs(w).max() <= bound and abs(w).max() > 0.9 * bound
    tw = torch.empty(32, 64)
    assert nn.init.calculate_gain("leaky_relu", 0.2) == torch.nn.init.calculate_gain("leaky_relu", 0.2)
    nn.init.kaiming_normal_(lin.weight, mode="fan_out", nonlinearity="relu")
    torch.nn.init.kaiming_normal_(tw, mode="fan_out", nonlinearity="relu")
    assert abs(lin.weight.numpy().std() / tw.std().item() - 1) < 0.1
    nn.init.zeros_(lin.bias)
    assert not lin.bias.numpy().any()
    nn.init.orthogonal_(lin.weight)
    w = lin.weight.numpy()
    np.testing.assert_allclose(w @ w.T, np.eye(32), atol=1e-5)
    nn.init.trunc_normal_(lin.weight, std=0.02, a=-0.03, b=0.03)
    assert abs(lin.weight.numpy()).max() <= 0.03
    with pytest.raises(ValueError, match="fewer than 2"):
        nn.init.xavier_uniform_(lin.bias)


@pytest.mark.parametrize("make", [
    lambda m: m.LSTM(3, 4, num_layers=2, bidirectional=True),
    lambda m: m.GRU(3, 4, batch_first=True),
    lambda m: m.MultiheadAttention(8, 2),
    lambda m: m.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0),
], ids=["lstm", "gru", "mha", "encoder_layer"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_layers_in_f64_and_both_modes(make, train):
    torch.manual_seed(8)
    theirs = make(torch.nn).double().train(train)
    ours = make(nn)
    ours.load_state_dict({k: tl.Tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    ours.to(tl.f64).train(train)
    assert all(p.dtype == tl.f64 for p in ours.parameters())
    if isinstance(theirs, torch.nn.MultiheadAttention):
        xs = [np.random.default_rng(i).standard_normal((3, 2, 8)) for i in range(3)]
    elif isinstance(theirs, torch.nn.TransformerEncoderLayer):
        xs = [np.random.default_rng(0).standard_normal((4, 2, 8))]
    else:
        xs = [np.random.default_rng(0).standard_normal((2, 5, 3) if theirs.batch_first else (5, 2, 3))]
    _compare(ours, theirs, xs, tl.cpu, atol=1e-10, rtol=1e-9)
