"""Convolutions, pooling and upsampling against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def T(x, device):
    return tl.Tensor(x.numpy(), device=device)


@given(data=st.data())
@SETTINGS
def test_conv2d_matches_torch(data, device):
    g = data.draw(st.integers(1, 3))
    cin = g * data.draw(st.integers(1, 2))
    cout = g * data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    s, p, d = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    h = data.draw(st.integers(d * (kh - 1) + 1, 9))
    w = data.draw(st.integers(d * (kw - 1) + 1, 9))
    torch.manual_seed(data.draw(st.integers(0, 1000)))
    x = torch.randn(2, cin, h, w)
    k = torch.randn(cout, cin // g, kh, kw)
    out = T(x, device).conv2d(T(k, device), padding=p, stride=s, dilation=d, groups=g)
    ref = F.conv2d(x, k, padding=p, stride=s, dilation=d, groups=g)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


@given(data=st.data())
@SETTINGS
def test_conv1d_matches_torch(data, device):
    g = data.draw(st.integers(1, 2))
    cin, cout = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    k = data.draw(st.integers(1, 4))
    s, p, d = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    n = data.draw(st.integers(d * (k - 1) + 1, 12))
    x = torch.randn(2, cin, n)
    kern = torch.randn(cout, cin // g, k)
    out = T(x, device).conv1d(T(kern, device), padding=p, stride=s, dilation=d, groups=g)
    np.testing.assert_allclose(out.numpy(), F.conv1d(x, kern, padding=p, stride=s, dilation=d, groups=g).numpy(),
                               rtol=1e-4, atol=1e-4)


@given(data=st.data())
@SETTINGS
def test_conv_transpose_matches_torch(data, device):
    g = data.draw(st.integers(1, 2))
    cin, cout = g * data.draw(st.integers(1, 2)), g * data.draw(st.integers(1, 2))
    k = data.draw(st.integers(1, 3))
    s, p, d = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 1)), data.draw(st.integers(1, 2))
    op = data.draw(st.integers(0, max(s, d) - 1))
    n = data.draw(st.integers(2, 6))
    if (n - 1) * s - 2 * p + d * (k - 1) + op + 1 < 1:
        return
    x = torch.randn(1, cin, n, n + 1)
    kern = torch.randn(cin, cout // g, k, k)
    out = T(x, device).conv_transpose2d(T(kern, device), padding=p, output_padding=op, stride=s,
                                        dilation=d, groups=g)
    ref = F.conv_transpose2d(x, kern, padding=p, output_padding=op, stride=s, dilation=d, groups=g)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    x1 = torch.randn(2, cin, n)
    k1 = torch.randn(cin, cout // g, k)
    out = T(x1, device).conv_transpose1d(T(k1, device), padding=p, output_padding=op, stride=s,
                                         dilation=d, groups=g)
    ref = F.conv_transpose1d(x1, k1, padding=p, output_padding=op, stride=s, dilation=d, groups=g)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_pools_and_upsampling_match_torch(device):
    x = torch.randn(2, 3, 7, 9)
    t = T(x, device)
    np.testing.assert_allclose(t.avg_pool2d(2).numpy(), F.avg_pool2d(x, 2).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.avg_pool2d((3, 2), (2, 1)).numpy(), F.avg_pool2d(x, (3, 2), (2, 1)).numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t.max_pool2d(2).numpy(), F.max_pool2d(x, 2).numpy())
    np.testing.assert_array_equal(t.max_pool2d(3, 2).numpy(), F.max_pool2d(x, 3, 2).numpy())
    np.testing.assert_array_equal(t.upsample_nearest2d(14, 5).numpy(),
                                  F.interpolate(x, size=(14, 5), mode="nearest").numpy())
    np.testing.assert_array_equal(t.interpolate2d(3, 20).numpy(),
                                  F.interpolate(x, size=(3, 20), mode="nearest").numpy())
    x1 = torch.randn(2, 3, 5)
    np.testing.assert_array_equal(T(x1, device).upsample_nearest1d(11).numpy(),
                                  F.interpolate(x1, size=11, mode="nearest").numpy())
    np.testing.assert_array_equal(T(x1, device).interpolate1d(3).numpy(),
                                  F.interpolate(x1, size=3, mode="nearest").numpy())


def test_conv_argument_errors(device):
    x = tl.zeros((1, 4, 5, 5), device=device)
    with pytest.raises(tl.ShapeMismatchError, match="channels"):
        x.conv2d(tl.zeros((2, 3, 3, 3), device=device))
    with pytest.raises(tl.ShapeMismatchError):
        x.conv2d(tl.zeros((2, 4, 7, 7), device=device))
    with pytest.raises(tl.ShapeMismatchError):
        x.conv1d(tl.zeros((2, 4, 3), device=device))
    with pytest.raises(ValueError):
        x.conv2d(tl.zeros((2, 4, 3, 3), device=device), stride=0)
    with pytest.raises(tl.ShapeMismatchError):
        x.max_pool2d(6)


def test_negative_paddings_and_empty_upsampling_are_refused_like_torch(device):
    # PyTorch refuses these; the message must name the op and the argument.
    x = tl.zeros((1, 4, 5, 5), device=device)
    x1 = tl.zeros((1, 4, 5), device=device)
    cases = [
        (lambda: x.conv2d(tl.zeros((2, 4, 3, 3), device=device), padding=(0, -1)), "padding"),
        (lambda: x1.conv1d(tl.zeros((2, 4, 3), device=device), padding=-1), "padding"),
        (lambda: x1.conv_transpose1d(tl.zeros((4, 2, 3), device=device), output_padding=-1,
                                     stride=2), "output_padding"),
        (lambda: x.conv_transpose2d(tl.zeros((4, 2, 3, 3), device=device), padding=-1), "padding"),
        (lambda: x1.upsample_nearest1d(0), "size"),
        (lambda: x.upsample_nearest2d(0, 3), "size"),
    ]
    for f, word in cases:
        with pytest.raises(ValueError, match=word):
            f()
    with pytest.raises(RuntimeError):
        torch.nn.functional.conv1d(torch.zeros(1, 4, 5), torch.zeros(2, 4, 3), padding=-1)
    with pytest.raises(RuntimeError):
        torch.nn.functional.interpolate(torch.zeros(1, 4, 5), size=0)
