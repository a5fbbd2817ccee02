"""The constructors and names a PyTorch user types first take PyTorch's arguments
(and say what to do where tallow differs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tallow as tl

nn = tl.nn


def test_embedding_third_argument_is_padding_idx():
    e = nn.Embedding(5, 2, 0)
    assert e.padding_idx == 0 and not e.weight.numpy()[0].any()
    ids = tl.tensor([[0, 3, 0]])
    grads = (e(ids) * 2.0).sum_all().backward()
    assert not grads[e.weight].numpy()[0].any() and grads[e.weight].numpy()[3].tolist() == [2.0, 2.0]
    # candle-pyo3's Embedding(n, dim, device, dtype) keeps working
    assert nn.Embedding(10, 4, None, tl.f16).weight.dtype == tl.f16
    w = tl.randn((3, 2))
    assert isinstance(nn.Embedding(3, 2, _weight=w).weight, tl.Var)
    assert not isinstance(nn.Embedding(3, 2, _weight=w, _freeze=True).weight, tl.Var)
    with pytest.raises(nn.UnsupportedOptionError):
        nn.Embedding(3, 2, max_norm=1.0)


@pytest.mark.parametrize("args,kwargs", [((1e-5, False), {}), ((1e-5, True, False), {}), ((), {"bias": False}),
                                         ((1e-3,), {"elementwise_affine": False})])
def test_layer_norm_takes_pytorchs_positional_arguments(args, kwargs):
    ours, theirs = nn.LayerNorm(6, *args, **kwargs), torch.nn.LayerNorm(6, *args, **kwargs)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32) * 4 + 1
    np.testing.assert_allclose(ours(tl.tensor(x)).numpy(), theirs(torch.from_numpy(x)).detach().numpy(),
                               atol=1e-5, rtol=1e-5)


def test_optim_under_pytorchs_module_name():
    import tallow.optim
    import tallow.optim.lr_scheduler

    assert tl.optim.AdamW is nn.optim.AdamW and tl.optim.SGD is nn.SGD
    assert tallow.optim.lr_scheduler.StepLR is nn.lr_scheduler.StepLR


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps"])
def test_a_cuda_device_says_which_device_to_use(name):
    with pytest.raises(tl.TallowError, match="'gpu'"):
        tl.ones((2,)).to(name)
    with pytest.raises(tl.TallowError, match="'gpu'"):
        tl.zeros((2,), device=name)


def test_the_cuda_probe_of_a_pytorch_program_picks_the_cpu():
    device = "cuda" if tl.cuda.is_available() else "cpu"
    assert device == "cpu" and tl.cuda.device_count() == 0
    assert tl.ones((2,)).to(device).device == tl.cpu
