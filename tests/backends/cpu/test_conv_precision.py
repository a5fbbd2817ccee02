"""Convolutions keep their accuracy on inputs of a wide dynamic range.

One input value 10^6 times its neighbours (random signs elsewhere): every path the
dispatcher can choose on the CPU (the native image-at-a-time passes, the batch's
columns and products, numba, NumPy) must keep the error of every output, relative
to that output's scale (the sum of its terms' magnitudes, ``|k| * |x|``), within 10x
of the plain im2col + product's, against float64: the forward and both gradients,
for 3x3 (stride 1 and 2), 1x3 and 1x1 kernels. A fast algorithm that mixes a tile's
values before multiplying (Winograd's) spreads the large value's rounding into
outputs that never read it, orders of magnitude past their own scale, and fails
here.

The native passes also give the same bits in each build of the module (baseline and
AVX2) at one and two threads.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tallow as tl
from tallow.backends.cpu import conv as cpu_conv

from ...support.native_builds import each_build_and_thread_count
from .test_conv import HAVE_NATIVE, HAVE_POOL, cpu_path

SPIKE = 1e6

# (name, batch, c_in, c_out, h, w, kernel (kh, kw), stride, padding): the layers a
# special algorithm would take (a ResNet block's 3x3, a stride-2 3x3, a 1-D layer's
# 1x3 with many channels, a 1x1) and a first layer with one input channel.
LAYERS = [
    ("3x3 s1", 2, 32, 32, 12, 12, (3, 3), 1, 1),
    ("3x3 s2", 2, 32, 48, 32, 32, (3, 3), 2, 1),
    ("1x3 s1", 4, 64, 64, 1, 130, (1, 3), 1, (0, 1)),
    ("1x1 s1", 2, 32, 24, 9, 9, (1, 1), 1, 0),
    ("3x3 first layer", 4, 1, 8, 14, 14, (3, 3), 1, 0),
]

PATHS = {
    "native, an image at a time": dict(),
    "native, the batch's columns": dict(images=False),
    "native, one product over the batch": dict(images=False, batched=True),
    "numba": dict(native_c=False),
    "numpy": dict(native_c=False, compiled=False),
}


def _spiked(rng, shape, at):
    """Random values of random signs in [0.5, 1), one of them SPIKE times larger."""
    x = rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    x[at] *= SPIKE
    return x.astype(np.float32)


def _data(layer, seed=0):
    _, b, ci, co, h, w, (kh, kw), stride, pad = layer
    rng = np.random.default_rng(seed)
    x = _spiked(rng, (b, ci, h, w), (b - 1, ci - 1, h // 2, w // 2 + 1))
    k = (rng.uniform(0.5, 1.0, (co, ci, kh, kw)) * rng.choice([-1.0, 1.0], (co, ci, kh, kw))).astype(np.float32)
    kw_ = dict(stride=stride, padding=pad)
    oh, ow = F.conv2d(torch.zeros(1, ci, h, w), torch.zeros(co, ci, kh, kw), **kw_).shape[2:]
    g = _spiked(rng, (b, co, oh, ow), (0, 0, 0, 0))  # (a corner: the taps beside it read padding)
    return x, k, g, kw_


def _reference(x, k, g, kw):
    """Output, input gradient and kernel gradient in float64."""
    px = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(px, pk, **kw)
    y.backward(torch.from_numpy(g.astype(np.float64)))
    return y.detach().numpy(), px.grad.numpy(), pk.grad.numpy()


def _scales(x, k, g, kw):
    """Each result's per-element scale: the same sums over the terms' magnitudes."""
    return _reference(np.abs(x), np.abs(k), np.abs(g), kw)


def _tallow(x, k, g, kw, path):
    with cpu_path(**path):
        vx, vk = tl.Var(x), tl.Var(k)
        y = vx.conv2d(vk, **kw)
        grads = (y * tl.Tensor(g)).sum_all().backward()
    return y.numpy(), grads[vx].numpy(), grads[vk].numpy()


def _im2col_product(x, k, g, kw):
    """The plain im2col + product in f32 (NumPy's window view, one matmul): the bar."""
    with cpu_path(native_c=False, compiled=False):
        return _tallow(x, k, g, kw, dict(native_c=False, compiled=False))


def _errors(got, want, scales):
    """Each result's largest error relative to each element's own scale."""
    return [float((np.abs(a.astype(np.float64) - b) / s).max()) for a, b, s in zip(got, want, scales)]


@pytest.mark.parametrize("layer", LAYERS, ids=[layer[0] for layer in LAYERS])
@pytest.mark.parametrize("path", list(PATHS), ids=list(PATHS))
def test_every_path_keeps_a_spike_s_rounding_to_itself(layer, path):
    x, k, g, kw = _data(layer)
    want, scales = _reference(x, k, g, kw), _scales(x, k, g, kw)
    bar = _errors(_im2col_product(x, k, g, kw), want, scales)
    got = _errors(_tallow(x, k, g, kw, PATHS[path]), want, scales)
    for name, e, b in zip(("output", "input gradient", "kernel gradient"), got, bar):
        # (a floor of a unit of f32 where the bar itself is exact)
        assert e <= 10 * max(b, 6e-8), f"{name}: error {e:.2e} of the scale against im2col's {b:.2e}"


@pytest.mark.parametrize("layer", LAYERS[:3], ids=[layer[0] for layer in LAYERS[:3]])
def test_the_outputs_that_never_read_the_spike_keep_the_small_values_accuracy(layer):
    """Outputs whose windows miss the spike are exact to a few units in the last place
    of the small values (a transform over tiles would carry the spike's rounding there)."""
    x, k, g, kw = _data(layer)
    y, _, _ = _tallow(x, k, g, kw, {})
    want, _, _ = _reference(x, k, g, kw)
    far = _reference(np.where(np.abs(x) > SPIKE / 10, 1.0, 0.0), np.ones_like(k), g, kw)[0] == 0
    assert far.sum() > far.size // 2
    small = np.abs(want[far]).max()
    assert np.abs(y[far] - want[far]).max() <= 1e-5 * small


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("layer", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_the_native_passes_give_the_same_bits_in_every_build(layer):
    x, k, g, kw = _data(layer, seed=1)
    mod = cpu_conv._CONV()
    runs = []
    for _ in each_build_and_thread_count(mod):
        out = list(_tallow(x, k, g, kw, {}))
        xp = tl.Var(np.abs(x))
        window = (min(2, x.shape[2]), 2)
        pooled = xp.max_pool2d(window)
        avg = xp.avg_pool2d(window)
        grads = ((pooled * pooled).sum_all() + (avg * avg).sum_all()).backward()
        runs.append(out + [pooled.numpy(), avg.numpy(), grads[xp].numpy()])
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            np.testing.assert_array_equal(a, b)
