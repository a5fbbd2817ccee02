"""Every PyTorch-style layer of tl.nn against torch.nn: the same weights (copied from the
torch layer through load_state_dict), the same input; forward values, the input's
gradient and every parameter's gradient, in train and eval mode, on the CPU and the GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tallow as tl

nn = tl.nn


def _tl(t, device):
    return tl.Tensor(t.detach().numpy(), device=device)


def _sync(ours, theirs, device):
    ours.to(device)
    ours.load_state_dict({k: _tl(v, device) for k, v in theirs.state_dict().items()})


def _check(ours, theirs, x_np, device, train=True, atol=2e-5, rtol=1e-4, int_input=False):
    """Forward and backward of both modules on ``x_np``; compare outputs and gradients."""
    ours.train(train)
    theirs.train(train)
    rng = np.random.default_rng(1)
    if int_input:
        tx = torch.from_numpy(x_np)
        x = tl.Tensor(x_np, device=device)
    else:
        tx = torch.tensor(x_np, requires_grad=True)
        x = tl.Var(x_np, device=device)
    theirs.zero_grad()
    ty = theirs(tx)
    y = ours(x)
    assert tuple(y.shape) == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=atol, rtol=rtol)
    r = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(r)).sum().backward()
    grads = (y * tl.Tensor(r, device=device)).sum_all().backward()
    if not int_input:
        np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), atol=atol, rtol=rtol)
    ours_params = dict(ours.named_parameters())
    for name, tp in theirs.named_parameters():
        p = ours_params[name]
        assert isinstance(p, tl.Var), name
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=name)
    return y, ty


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (name, torch constructor, tallow constructor, input shape)
LAYERS = [
    ("linear", lambda: torch.nn.Linear(5, 3), lambda: nn.Linear(5, 3), (4, 5)),
    ("linear_3d_nobias", lambda: torch.nn.Linear(5, 3, bias=False),
     lambda: nn.Linear(5, 3, bias=False), (2, 4, 5)),
    ("conv1d", lambda: torch.nn.Conv1d(4, 6, 3, stride=2, padding=1),
     lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1), (2, 4, 9)),
    ("conv1d_groups_dilation", lambda: torch.nn.Conv1d(4, 6, 3, dilation=2, groups=2),
     lambda: nn.Conv1d(4, 6, 3, dilation=2, groups=2), (2, 4, 11)),
    ("conv2d", lambda: torch.nn.Conv2d(3, 4, 3, padding=1),
     lambda: nn.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 5)),
    ("conv2d_rect_stride_groups", lambda: torch.nn.Conv2d(4, 6, (3, 2), stride=2, groups=2),
     lambda: nn.Conv2d(4, 6, (3, 2), stride=2, groups=2), (2, 4, 7, 6)),
    ("conv2d_same", lambda: torch.nn.Conv2d(2, 3, 3, padding="same", bias=False),
     lambda: nn.Conv2d(2, 3, 3, padding="same", bias=False), (1, 2, 5, 5)),
    ("conv_transpose2d", lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1,
                                                          output_padding=1),
     lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 4, 5)),
    ("conv_transpose2d_groups", lambda: torch.nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2),
     lambda: nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2), (1, 4, 3, 3)),
    ("conv_transpose1d", lambda: torch.nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1,
                                                          output_padding=1),
     lambda: nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 5)),
    ("maxpool2d", lambda: torch.nn.MaxPool2d(2), lambda: nn.MaxPool2d(2), (2, 3, 6, 6)),
    ("maxpool2d_pad", lambda: torch.nn.MaxPool2d(3, stride=2, padding=1),
     lambda: nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 7, 6)),
    ("avgpool2d", lambda: torch.nn.AvgPool2d(2), lambda: nn.AvgPool2d(2), (2, 3, 6, 6)),
    ("avgpool2d_pad", lambda: torch.nn.AvgPool2d(3, 2, 1), lambda: nn.AvgPool2d(3, 2, 1),
     (2, 3, 7, 6)),
    ("avgpool2d_pad_exclude", lambda: torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
     lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 3, 7, 6)),
    ("avgpool2d_divisor", lambda: torch.nn.AvgPool2d(2, divisor_override=3),
     lambda: nn.AvgPool2d(2, divisor_override=3), (1, 2, 4, 4)),
    ("adaptive_avgpool2d", lambda: torch.nn.AdaptiveAvgPool2d((2, 3)),
     lambda: nn.AdaptiveAvgPool2d((2, 3)), (2, 3, 5, 7)),
    ("adaptive_avgpool2d_divisible", lambda: torch.nn.AdaptiveAvgPool2d(2),
     lambda: nn.AdaptiveAvgPool2d(2), (2, 3, 6, 4)),
    ("adaptive_avgpool2d_global", lambda: torch.nn.AdaptiveAvgPool2d(1),
     lambda: nn.AdaptiveAvgPool2d(1), (2, 3, 5, 3)),
    ("layernorm", lambda: torch.nn.LayerNorm(6), lambda: nn.LayerNorm(6), (3, 4, 6)),
    ("layernorm_2d_noaffine", lambda: torch.nn.LayerNorm((3, 4), elementwise_affine=False),
     lambda: nn.LayerNorm((3, 4), elementwise_affine=False), (2, 3, 4)),
    ("groupnorm", lambda: torch.nn.GroupNorm(2, 4), lambda: nn.GroupNorm(2, 4), (3, 4, 5, 2)),
    ("groupnorm_noaffine_3d", lambda: torch.nn.GroupNorm(3, 6, affine=False),
     lambda: nn.GroupNorm(3, 6, affine=False), (2, 6, 5)),
    ("rmsnorm_torch", lambda: torch.nn.RMSNorm(6), lambda: nn.RMSNorm(6), (3, 6)),
    ("rmsnorm_candle", lambda: torch.nn.RMSNorm(6, eps=1e-5), lambda: nn.RmsNorm(6, 1e-5), (3, 6)),
    ("relu", torch.nn.ReLU, nn.ReLU, (4, 5)),
    ("leaky_relu", lambda: torch.nn.LeakyReLU(0.2), lambda: nn.LeakyReLU(0.2), (4, 5)),
    ("gelu", torch.nn.GELU, nn.GELU, (4, 5)),
    ("gelu_tanh", lambda: torch.nn.GELU("tanh"), lambda: nn.GELU("tanh"), (4, 5)),
    ("silu", torch.nn.SiLU, nn.SiLU, (4, 5)),
    ("tanh", torch.nn.Tanh, nn.Tanh, (4, 5)),
    ("sigmoid", torch.nn.Sigmoid, nn.Sigmoid, (4, 5)),
    ("softmax", lambda: torch.nn.Softmax(dim=1), lambda: nn.Softmax(dim=1), (3, 4, 5)),
    ("log_softmax", lambda: torch.nn.LogSoftmax(dim=-1), lambda: nn.LogSoftmax(dim=-1), (3, 5)),
    ("flatten", torch.nn.Flatten, nn.Flatten, (2, 3, 4, 5)),
    ("flatten_range", lambda: torch.nn.Flatten(0, 1), lambda: nn.Flatten(0, 1), (2, 3, 4)),
    ("identity", torch.nn.Identity, nn.Identity, (2, 3)),
    ("dropout_eval_like", lambda: torch.nn.Dropout(0.0), lambda: nn.Dropout(0.0), (3, 4)),
    ("sequential", lambda: torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.GroupNorm(2, 4), torch.nn.SiLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16, 3)),
     lambda: nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.SiLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3)), (2, 2, 4, 4)),
]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name,make_torch,make_ours,shape", LAYERS, ids=[c[0] for c in LAYERS])
def test_layer_matches_torch(name, make_torch, make_ours, shape, train, device):
    torch.manual_seed(0)
    theirs, ours = make_torch(), make_ours()
    _sync(ours, theirs, device)
    _check(ours, theirs, _x(shape), device, train=train)


def test_embedding_with_padding_idx_matches_torch(device):
    torch.manual_seed(0)
    theirs = torch.nn.Embedding(10, 4, padding_idx=0)
    ours = nn.Embedding(10, 4, padding_idx=0)
    np.testing.assert_array_equal(ours.weight.numpy()[0], 0.0)  # zeroed at construction
    _sync(ours, theirs, device)
    ids = np.array([[0, 3, 9], [3, 0, 1]], np.int64)
    _check(ours, theirs, ids, device, int_input=True)  # the padding row gets no gradient


def test_unbatched_pools_match_torch():
    x = _x((3, 7, 6))
    for theirs, ours in ((torch.nn.MaxPool2d(2), nn.MaxPool2d(2)),
                         (torch.nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1)),
                         (torch.nn.AdaptiveAvgPool2d((2, 4)), nn.AdaptiveAvgPool2d((2, 4)))):
        np.testing.assert_allclose(ours(tl.Tensor(x)).numpy(), theirs(torch.from_numpy(x)).numpy(),
                                   atol=1e-6)


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (8, 4)), ("BatchNorm1d", (6, 4, 5)),
                                       ("BatchNorm2d", (5, 4, 3, 3))])
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_batchnorm_running_stats_train_then_eval(cls, shape, momentum, device):
    """Four training batches (batch statistics, running statistics updated with the
    unbiased variance and ``momentum``, or a cumulative average for None), then eval
    mode (running statistics): values, gradients and buffers as torch's."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(4, momentum=momentum)
    ours = getattr(nn, cls)(4, momentum=momentum)
    with torch.no_grad():  # a non-trivial affine part
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    _sync(ours, theirs, device)
    for step in range(4):
        x = _x(shape, seed=step) * (step + 1) + step
        _check(ours, theirs, x, device, train=True, atol=5e-5)
        for buf in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(ours, buf).numpy(),
                                       getattr(theirs, buf).numpy(), atol=1e-5, rtol=1e-5)
        assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked) == step + 1
    names = dict(ours.named_parameters())
    assert set(names) == {"weight", "bias"}  # running stats are buffers, not parameters
    assert set(ours.state_dict()) == set(theirs.state_dict())
    before = ours.running_mean.numpy().copy()
    _check(ours, theirs, _x(shape, seed=9) + 3, device, train=False, atol=5e-5)
    np.testing.assert_array_equal(ours.running_mean.numpy(), before)  # eval does not update


def test_batchnorm_without_running_stats_uses_batch_statistics_in_eval():
    torch.manual_seed(0)
    theirs = torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    ours = nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    assert list(ours.parameters()) == [] and ours.state_dict() == {}
    _check(ours, theirs, _x((2, 3, 4, 4)), tl.cpu, train=False)


def test_batchnorm_refuses_one_value_per_channel_in_training():
    with pytest.raises(tl.ShapeMismatchError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(tl.randn((1, 3)))
    assert nn.BatchNorm1d(3).eval()(tl.randn((1, 3))).shape == (1, 3)


def test_dropout_statistics_train_and_eval(device):
    """Training: a fraction p of zeros, the rest scaled by 1/(1-p) (so the mean is
    kept); the gradient is the same mask and scale. Eval: the identity."""
    p, n = 0.3, 200_000
    d = nn.Dropout(p)
    x = tl.Var(np.ones(n, np.float32), device=device)
    y = d(x)
    v = y.numpy()
    zeros = float((v == 0).mean())
    sd = math.sqrt(p * (1 - p) / n)
    assert abs(zeros - p) < 5 * sd
    np.testing.assert_allclose(v[v != 0], 1 / (1 - p), rtol=1e-6)
    g = y.sum_all().backward()[x].numpy()
    np.testing.assert_array_equal(g, v)  # d y_i / d x_i is the mask times the scale
    d.eval()
    assert d(x).numpy().tolist() == x.numpy().tolist()
    assert nn.Dropout(1.0)(x).numpy().max() == 0.0
    with pytest.raises(nn.UnsupportedOptionError):
        nn.Dropout(1.5)


def test_softmax_without_dim_follows_torch_rule():
    for shape in ((5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)):
        x = _x(shape)
        np.testing.assert_allclose(nn.Softmax()(tl.Tensor(x)).numpy(),
                                   torch.nn.Softmax()(torch.from_numpy(x)).numpy(), atol=1e-6)


def test_module_list_and_dict_hold_trainable_layers():
    ml = nn.ModuleList([nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)])
    md = nn.ModuleDict({"enc": nn.Conv1d(1, 2, 3), "norm": nn.BatchNorm1d(2)})
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [n for n, _ in md.named_parameters()] == ["enc.weight", "enc.bias", "norm.weight",
                                                     "norm.bias"]
    assert all(isinstance(p, tl.Var) for p in list(ml.parameters()) + list(md.parameters()))
    tml = torch.nn.ModuleList([torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1)])
    assert list(ml.state_dict()) == list(tml.state_dict())


def _uniform_bound_ok(w, bound):
    v = w.numpy().ravel()
    assert np.abs(v).max() <= bound * (1 + 1e-6)
    # U(-b, b): standard deviation b / sqrt(3); a few thousand draws land within 10%.
    assert abs(v.std() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3)
    assert abs(v.mean()) < 0.1 * bound


@pytest.mark.parametrize("make_ours,make_torch,fan_in", [
    (lambda: nn.Linear(64, 96), lambda: torch.nn.Linear(64, 96), 64),
    (lambda: nn.Conv1d(8, 64, 5), lambda: torch.nn.Conv1d(8, 64, 5), 40),
    (lambda: nn.Conv2d(16, 32, 3), lambda: torch.nn.Conv2d(16, 32, 3), 144),
    (lambda: nn.Conv2d(16, 32, 3, groups=4), lambda: torch.nn.Conv2d(16, 32, 3, groups=4), 36),
    (lambda: nn.ConvTranspose2d(16, 32, 3), lambda: torch.nn.ConvTranspose2d(16, 32, 3), 288),
])
def test_default_initialisation_is_torchs_kaiming_uniform(make_ours, make_torch, fan_in):
    """weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bound torch's
    kaiming_uniform_(a=sqrt(5)) gives; the torch layer's own weights obey it too."""
    torch.manual_seed(0)
    ours, theirs = make_ours(), make_torch()
    bound = 1 / math.sqrt(fan_in)
    assert tuple(ours.weight.shape) == tuple(theirs.weight.shape)
    assert np.abs(theirs.weight.detach().numpy()).max() <= bound
    _uniform_bound_ok(ours.weight, bound)
    assert np.abs(ours.bias.numpy()).max() <= bound
    assert isinstance(ours.weight, tl.Var) and isinstance(ours.bias, tl.Var)


def test_default_initialisation_of_norms_and_embedding():
    e = nn.Embedding(300, 40).weight.numpy()
    assert abs(e.std() - 1.0) < 0.05 and abs(e.mean()) < 0.05  # N(0, 1), as torch
    for m in (nn.LayerNorm(5), nn.GroupNorm(1, 5), nn.BatchNorm1d(5)):
        assert m.weight.numpy().tolist() == [1.0] * 5 and m.bias.numpy().tolist() == [0.0] * 5
    assert nn.RMSNorm(5).weight.numpy().tolist() == [1.0] * 5


def test_unsupported_options_are_named():
    with pytest.raises(nn.UnsupportedOptionError, match="padding_mode"):
        nn.Conv2d(1, 1, 3, padding_mode="reflect")
    with pytest.raises(nn.UnsupportedOptionError, match="divisible"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(nn.UnsupportedOptionError, match="same"):
        nn.Conv2d(1, 1, 2, padding="same")
    with pytest.raises(nn.UnsupportedOptionError, match="ceil_mode"):
        nn.MaxPool2d(2, ceil_mode=True)
    with pytest.raises(nn.UnsupportedOptionError, match="padding"):
        nn.MaxPool2d(2, padding=2)(tl.randn((1, 1, 4, 4)))
    with pytest.raises(tl.ShapeMismatchError):
        nn.GroupNorm(3, 4)
    with pytest.raises(tl.ShapeMismatchError):
        nn.BatchNorm2d(3)(tl.randn((2, 4, 3, 3)))


def test_functional_pools_default_stride_to_kernel_as_torch():
    x = _x((1, 2, 6, 6))
    tx = torch.from_numpy(x)
    F = tl.functional
    for ours, theirs in ((F.max_pool2d(tl.Tensor(x), 2), torch.nn.functional.max_pool2d(tx, 2)),
                         (F.avg_pool2d(tl.Tensor(x), 3), torch.nn.functional.avg_pool2d(tx, 3)),
                         (F.max_pool2d(tl.Tensor(x), 2, 1), torch.nn.functional.max_pool2d(tx, 2, 1)),
                         (F.avg_pool2d(tl.Tensor(x), 3, 2, 1),
                          torch.nn.functional.avg_pool2d(tx, 3, 2, 1)),
                         (tl.nn.functional.adaptive_avg_pool2d(tl.Tensor(x), (4, 5)),
                          torch.nn.functional.adaptive_avg_pool2d(tx, (4, 5)))):
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-6)


# -- hypothesis: shapes and options drawn at random --------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 4), s=st.integers(1, 3), data=st.data(), h=st.integers(4, 9),
       w=st.integers(4, 9), kind=st.sampled_from(["max", "avg", "avg_exclude"]))
def test_pools_match_torch_for_drawn_options(k, s, data, h, w, kind):
    p = data.draw(st.integers(0, k // 2))
    if kind == "max":
        pair = (torch.nn.MaxPool2d(k, s, p), nn.MaxPool2d(k, s, p))
    else:
        inc = kind == "avg"
        pair = (torch.nn.AvgPool2d(k, s, p, count_include_pad=inc),
                nn.AvgPool2d(k, s, p, count_include_pad=inc))
    _check(pair[1], pair[0], _x((2, 2, h, w), seed=k * 100 + h * 10 + w), tl.cpu)


@settings(max_examples=20, deadline=None)
@given(cin=st.sampled_from([1, 2, 4]), cout=st.sampled_from([2, 4]), k=st.integers(1, 3),
       s=st.integers(1, 2), p=st.integers(0, 2), d=st.integers(1, 2), g=st.sampled_from([1, 2]),
       transposed=st.booleans(), bias=st.booleans())
def test_conv2d_layers_match_torch_for_drawn_options(cin, cout, k, s, p, d, g, transposed, bias):
    if cin % g or cout % g:
        g = 1
    torch.manual_seed(0)
    if transposed:
        op = min(s, d) - 1  # output_padding must be smaller than stride or dilation
        theirs = torch.nn.ConvTranspose2d(cin, cout, k, s, p, op, g, bias, d)
        ours = nn.ConvTranspose2d(cin, cout, k, s, p, op, g, bias, d)
    else:
        theirs = torch.nn.Conv2d(cin, cout, k, s, p, d, g, bias)
        ours = nn.Conv2d(cin, cout, k, s, p, d, g, bias)
    _sync(ours, theirs, tl.cpu)
    size = d * (k - 1) + 3
    try:
        theirs(torch.zeros((1, cin, size, size + 1)))
    except RuntimeError:
        return  # an empty output in torch too
    _check(ours, theirs, _x((2, cin, size, size + 1), seed=k), tl.cpu, atol=5e-5)
