"""The CPU convolution and pooling paths against PyTorch, values and gradients.

Every path is drawn: the native C passes (an image at a time: im2col and the
product, the product and col2im, the kernel gradient in parts; the batch's
im2col/col2im; pooling; f32), the numba im2col/col2im and the NumPy fallback, one
product per image and one over the whole batch, one thread and work split over two
(the compiled worker pool, or batch ranges on the Python pool), 1x1 kernels without
im2col; over shapes with groups, dilation, padding, stride and output padding,
batch 1, non-contiguous inputs, f32 and f64. The native passes give the same bits
at one thread and at two.
"""

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl
from tallow.backends.cpu import conv as cpu_conv
from tallow.backends.cpu import native, parallel

from ...support.native_builds import each_build_and_thread_count

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
TOL = {np.float32: dict(rtol=2e-4, atol=2e-4), np.float64: dict(rtol=1e-9, atol=1e-9)}


HAVE_NATIVE = cpu_conv._native(np.zeros(1, np.float32)) is not None
HAVE_POOL = native.pool_available()


@contextlib.contextmanager
def split_pool(threads=2):
    """The compiled pool at ``threads`` splitting every task, whatever its size and the
    machine's load (restored afterwards)."""
    w = native._workers
    before, min_bytes = w.threads(), w.min_bytes()
    w.set_min_bytes(0)
    w.set_load_check(False)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cpu_conv.CONFIG, "get", lambda: threads)
            yield
    finally:
        w.set_load_check(True)
        w.set_min_bytes(min_bytes)
        w.set_threads(before)


@contextlib.contextmanager
def cpu_path(compiled=True, batched=False, split=False, native_c=True, images=True):
    """Force one of the CPU paths: the native C passes (an image at a time, or the
    batch's columns and products), numba or NumPy, products per image or over the
    batch (``SMALL_IMAGE``, ``FEW_ROWS``), one thread or work split over two."""
    with pytest.MonkeyPatch.context() as mp, contextlib.ExitStack() as stack:
        if not native_c:
            mp.setattr(cpu_conv, "_CONV", lambda: None)  # as if not built
        if not compiled:
            mp.setattr(cpu_conv, "_compiled", lambda: None)  # the NumPy path
        if not images:
            mp.setattr(cpu_conv, "_by_images", lambda *a: False)
        mp.setattr(cpu_conv, "SMALL_IMAGE", 10**9 if batched else 0)
        if batched:  # one product over the batch, even where the native kernel would take per-image ones
            mp.setattr(cpu_conv.gemm, "native_takes", lambda *shape: False)
        mp.setattr(cpu_conv, "FEW_ROWS", 0 if batched else 10**9)
        if split:  # two batch ranges on two threads, even on a one-CPU machine
            mp.setattr(parallel, "worth_splitting", lambda shape: shape[0] >= 2)
            mp.setattr(cpu_conv.CONFIG, "get", lambda: 2)
            if HAVE_POOL:
                stack.enter_context(split_pool())
        yield


paths = st.fixed_dictionaries(dict(compiled=st.booleans(), batched=st.booleans(),
                                   split=st.booleans(), native_c=st.booleans(),
                                   images=st.booleans()))


def _strided(x, transposed):
    """The array as a tallow Var whose last two dims are a transposed (non-contiguous)
    view when asked, and the base Var the gradient lands on."""
    if not transposed:
        v = tl.Var(x)
        return v, v
    base = tl.Var(np.ascontiguousarray(np.swapaxes(x, -1, -2)))
    return base, base.transpose(-1, -2)


def _check(op, x, k, kwargs, dtype, transposed, path, need_x=True):
    rng = np.random.default_rng(0)
    x, k = x.astype(dtype), k.astype(dtype)
    with cpu_path(**path):
        base, tx = _strided(x, transposed) if need_x else (None, tl.Tensor(x))
        tk = tl.Var(k)
        out = getattr(tx, op)(tk, **kwargs)
        w = rng.standard_normal(out.shape).astype(dtype)
        grads = (out * tl.Tensor(w)).sum_all().backward()
    px = torch.tensor(x, dtype=torch.float64, requires_grad=need_x)
    pk = torch.tensor(k, dtype=torch.float64, requires_grad=True)
    ref = getattr(F, op)(px, pk, **kwargs)
    (ref * torch.from_numpy(w.astype(np.float64))).sum().backward()
    tol = TOL[dtype]
    assert out.dtype == tl.Tensor(x).dtype
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), **tol)
    np.testing.assert_allclose(grads[tk].numpy(), pk.grad.numpy(), **tol)
    if need_x:
        gx = grads[base].numpy()
        if transposed:
            gx = np.swapaxes(gx, -1, -2)
        np.testing.assert_allclose(gx, px.grad.numpy(), **tol)


@given(data=st.data())
@SETTINGS
def test_conv2d_values_and_gradients_match_torch(data):
    g = data.draw(st.integers(1, 3), "groups")
    cin, cout = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    b = data.draw(st.integers(1, 3), "batch")
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    s = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    p = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2)))
    d = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    h = data.draw(st.integers(max(1, d[0] * (kh - 1) + 1 - 2 * p[0]), 10))
    w = data.draw(st.integers(max(1, d[1] * (kw - 1) + 1 - 2 * p[1]), 10))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((b, cin, h, w))
    k = rng.standard_normal((cout, cin // g, kh, kw))
    _check("conv2d", x, k, dict(stride=s, padding=p, dilation=d, groups=g),
           data.draw(st.sampled_from([np.float32, np.float64])), data.draw(st.booleans()),
           data.draw(paths), need_x=data.draw(st.booleans()))


@given(data=st.data())
@SETTINGS
def test_conv_transpose2d_values_and_gradients_match_torch(data):
    g = data.draw(st.integers(1, 2), "groups")
    cin, cout = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    b = data.draw(st.integers(1, 3), "batch")
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    s = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    d = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    p = (data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1)))
    op = tuple(data.draw(st.integers(0, max(s[i], d[i]) - 1)) for i in range(2))
    h, w = data.draw(st.integers(1, 7)), data.draw(st.integers(1, 7))
    for n, kk, i in ((h, kh, 0), (w, kw, 1)):
        if (n - 1) * s[i] - 2 * p[i] + d[i] * (kk - 1) + op[i] + 1 < 1:
            return  # an empty output: tallow refuses it, as PyTorch does
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((b, cin, h, w))
    k = rng.standard_normal((cin, cout // g, kh, kw))
    _check("conv_transpose2d", x, k,
           dict(stride=s, padding=p, output_padding=op, dilation=d, groups=g),
           data.draw(st.sampled_from([np.float32, np.float64])), data.draw(st.booleans()),
           data.draw(paths))


@given(data=st.data())
@settings(max_examples=20, deadline=None)
def test_conv1d_and_conv_transpose1d_match_torch(data):
    g = data.draw(st.integers(1, 2))
    cin, cout = g * data.draw(st.integers(1, 3)), g * data.draw(st.integers(1, 3))
    k = data.draw(st.integers(1, 4))
    s, d, p = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2)), data.draw(st.integers(0, 2))
    n = data.draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    path = data.draw(paths)
    x = rng.standard_normal((data.draw(st.integers(1, 3)), cin, n))
    _check("conv1d", x, rng.standard_normal((cout, cin // g, k)),
           dict(stride=s, padding=p, dilation=d, groups=g), dtype, False, path)
    if (n - 1) * s - 2 * p + d * (k - 1) + 1 >= 1:
        _check("conv_transpose1d", x, rng.standard_normal((cin, cout // g, k)),
               dict(stride=s, padding=p, dilation=d, groups=g), dtype, False, path)


@pytest.mark.parametrize("op,b,c,co,n,k,stride,pad", [
    ("conv2d", 8, 16, 32, 14, 3, 1, 1),    # per-image products, split over threads
    ("conv2d", 32, 8, 8, 12, 3, 2, 0),     # small images: one product over the batch
    ("conv2d", 4, 32, 16, 9, 1, 1, 0),     # 1x1: the input is the column matrix
    ("conv2d", 4, 32, 16, 9, 1, 2, 0),     # 1x1 stride 2: a strided gather
    ("conv_transpose2d", 6, 16, 8, 10, 3, 2, 1),
    ("conv_transpose2d", 6, 16, 8, 10, 1, 1, 0),
])
def test_usual_shapes_on_every_path(op, b, c, co, n, k, stride, pad):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((b, c, n, n))
    kern = rng.standard_normal((co, c, k, k) if op == "conv2d" else (c, co, k, k))
    for native_c, compiled in ((True, True), (False, True), (False, False)):
        for batched in (True, False):
            for split in (True, False):
                _check(op, x, kern, dict(stride=stride, padding=pad), np.float32, False,
                       dict(compiled=compiled, batched=batched, split=split, native_c=native_c,
                            images=not batched))


@given(data=st.data())
@SETTINGS
def test_pooling_values_and_gradients_match_torch(data):
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    sh, sw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    b, c = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    h, w = data.draw(st.integers(kh, 9)), data.draw(st.integers(kw, 9))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    transposed = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    # Few distinct values: ties are common, and the gradient must go to the first maximum.
    x = rng.integers(-3, 4, (b, c, h, w)).astype(dtype)
    gout = None
    with cpu_path(**data.draw(paths)):
        for name in ("max_pool2d", "avg_pool2d"):
            base, tx = _strided(x, transposed)
            out = getattr(tx, name)((kh, kw), (sh, sw))
            gout = rng.standard_normal(out.shape).astype(dtype)
            gx = (out * tl.Tensor(gout)).sum_all().backward()[base].numpy()
            if transposed:
                gx = np.swapaxes(gx, -1, -2)
            px = torch.tensor(x, requires_grad=True)
            ref = getattr(F, name)(px, (kh, kw), (sh, sw))
            (ref * torch.from_numpy(gout)).sum().backward()
            assert out.dtype == tl.Tensor(x).dtype
            np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), **TOL[dtype])
            np.testing.assert_allclose(gx, px.grad.numpy(), **TOL[dtype])


def test_max_pool_forward_propagates_nan_on_both_paths():
    x = np.arange(2 * 16, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 0] = np.nan
    want = F.max_pool2d(torch.from_numpy(x), 2).numpy()
    for native_c, compiled in ((True, True), (False, True), (False, False)):
        with cpu_path(compiled=compiled, native_c=native_c):
            np.testing.assert_array_equal(tl.Tensor(x).max_pool2d(2).numpy(), want)


def test_integer_max_pool_keeps_its_dtype():
    x = np.arange(36, dtype=np.int64).reshape(1, 1, 6, 6)
    got = tl.Tensor(x).max_pool2d(2)
    assert got.dtype == tl.i64
    np.testing.assert_array_equal(got.numpy(), F.max_pool2d(torch.from_numpy(x).double(), 2).long().numpy())


# -- the native passes: one thread and two give the same bits ---------------------------

def _everything(x, k, kt, kwargs, pool):
    """Outputs and gradients of a convolution, a transposed convolution and both pools."""
    vx, vk, vkt = tl.Var(x), tl.Var(k), tl.Var(kt)
    conv = vx.conv2d(vk, **kwargs)
    tconv = vx.conv_transpose2d(vkt, **kwargs)
    mp = vx.max_pool2d(*pool)
    ap = vx.avg_pool2d(*pool)
    loss = (conv.sqr().sum_all() + tconv.sqr().sum_all() + (mp * mp).sum_all()
            + (ap * ap).sum_all())
    grads = loss.backward()
    return [a.numpy() for a in (conv, tconv, mp, ap, grads[vx], grads[vk], grads[vkt])]


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("images", [True, False])
@pytest.mark.parametrize("b,c,co,n,k,stride,pad,dil,pool", [
    (5, 3, 16, 17, 3, 1, 1, 1, (2, 2)),
    (3, 8, 12, 12, 3, 2, 0, 1, (3, 2)),
    (1, 4, 6, 20, 3, 1, 2, 2, (2, 1)),
    (7, 2, 5, 9, 2, 3, 1, 1, (3, 3)),
])
def test_native_paths_give_the_same_bits_at_one_and_two_threads(b, c, co, n, k, stride, pad, dil,
                                                                  pool, images):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((b, c, n, n)).astype(np.float32)
    kern = rng.standard_normal((co, c, k, k)).astype(np.float32)
    kern_t = rng.standard_normal((c, co, k, k)).astype(np.float32)
    kwargs = dict(stride=stride, padding=pad, dilation=dil)
    results = []
    for threads in (1, 2):
        with cpu_path(images=images), split_pool(threads):
            native._workers.set_threads(threads)
            results.append(_everything(x, kern, kern_t, kwargs, pool))
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
    # ... and the pool did split them
    with split_pool(2):
        native._workers.set_threads(2)
        jobs = native._workers.stats()["jobs"]
        with cpu_path(images=images):
            _everything(x, kern, kern_t, kwargs, pool)
        assert native._workers.stats()["jobs"] > jobs


def _columns(x, kh, kw, stride, pad, dil, oh, ow):
    """im2col by definition: (b, c * kh * kw, oh * ow), zeros outside the image."""
    b, c, h, w = x.shape
    cols = np.zeros((b, c, kh, kw, oh, ow), x.dtype)
    for ki in range(kh):
        for kj in range(kw):
            for i in range(oh):
                r = i * stride[0] - pad[0] + ki * dil[0]
                if not 0 <= r < h:
                    continue
                for j in range(ow):
                    col = j * stride[1] - pad[1] + kj * dil[1]
                    if 0 <= col < w:
                        cols[:, :, ki, kj, i, j] = x[:, :, r, col]
    return cols.reshape(b, c * kh * kw, oh * ow)


@pytest.mark.skipif(not HAVE_NATIVE, reason="native conv module not built")
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_native_im2col_is_the_definition(data):
    """The compiled gather (any stride, padding past the kernel, dilation): exactly the
    columns by definition, in both layouts, at one and two threads."""
    draw = data.draw
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = (draw(st.integers(0, 4)), draw(st.integers(0, 4)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h = draw(st.integers(max(1, dil[0] * (kh - 1) + 1 - 2 * pad[0]), 13))
    w = draw(st.integers(max(1, dil[1] * (kw - 1) + 1 - 2 * pad[1]), 13))
    b, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    oh, ow = cpu_conv._out_hw(h, w, kh, kw, pad, stride, dil)
    x = np.random.default_rng(draw(st.integers(0, 999))).standard_normal((b, c, h, w)).astype(np.float32)
    want = _columns(x, kh, kw, stride, pad, dil, oh, ow)
    rows, pos = c * kh * kw, oh * ow
    geometry = cpu_conv._geometry(b, c, h, w, kh, kw, stride, pad, dil, oh, ow)
    for threads in (1, 2):
        with split_pool(threads):
            native._workers.set_threads(threads)
            got = np.full((b, rows, pos), np.nan, np.float32)
            cpu_conv._CONV().im2col(x, got, rows * pos, pos, *geometry)
            np.testing.assert_array_equal(got, want)
            got = np.full((rows, b, pos), np.nan, np.float32)
            cpu_conv._CONV().im2col(x, got, pos, b * pos, *geometry)
            np.testing.assert_array_equal(got, want.transpose(1, 0, 2))


def _by_images_at_one_and_two_threads(run):
    """``run()`` (a convolution) on the image-at-a-time path (``_by_images``, checked
    to be taken) at one and two threads: the same bits at either count; the
    one-thread result."""
    got = []
    for threads in (1, 2):
        with cpu_path(), split_pool(threads):
            native._workers.set_threads(threads)
            assert cpu_conv._by_images(cpu_conv._CONV(), 1)
            got.append(run())
    np.testing.assert_array_equal(got[1], got[0])
    return got[0]


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("b,c,co,n,k,stride,pad,dil", [
    (4, 16, 64, 32, 3, 2, 1, 1),   # a stride-2 layer
    (5, 12, 48, 17, 3, 2, 0, 1),   # odd image, no padding
    (4, 8, 64, 20, 5, 1, 2, 1),    # 5x5
    (6, 10, 50, 24, 3, 1, 2, 2),   # dilated
    (2, 64, 64, 56, 3, 1, 1, 1),   # 56x56: columns in several blocks of rows
    (3, 1, 8, 28, 3, 1, 0, 1),     # a first layer: one input channel
])
def test_the_im2col_convolution_by_images(b, c, co, n, k, stride, pad, dil):
    """Each image's columns and product on one thread (``conv_images``): the same bits
    at one and two threads, PyTorch's values."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((b, c, n, n)).astype(np.float32)
    kern = rng.standard_normal((co, c, k, k)).astype(np.float32)
    got = _by_images_at_one_and_two_threads(
        lambda: cpu_conv._conv2d(x, kern, (pad, pad), (stride, stride), (dil, dil), 1))
    want = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(kern).double(), stride=stride,
                    padding=pad, dilation=dil).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("b,c,co,n,k,stride,pad,units", [
    (1, 16, 64, 20, 3, 2, 1, 2),   # one image on two threads: two blocks of channels
    (3, 8, 40, 12, 5, 1, 2, 2),    # three images on two threads: six units
    (1, 32, 96, 7, 3, 1, 1, 2),    # 49 positions
    (2, 24, 70, 7, 3, 1, 1, 1),    # ... two images, one each
])
def test_the_im2col_convolution_in_blocks_of_output_channels(b, c, co, n, k, stride, pad, units, monkeypatch):
    """Fewer images than the threads share evenly: each image's product cut into blocks
    of output channels (``conv_images``' units), taken at two threads; the bits of one
    unit per image (the one-thread path) for any block count, and PyTorch's values."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((b, c, n, n)).astype(np.float32)
    kern = rng.standard_normal((co, c, k, k)).astype(np.float32)
    run = lambda: cpu_conv._conv2d(x, kern, (pad, pad), (stride, stride), (1, 1), 1)  # noqa: E731
    taken, real = [], cpu_conv._units_per_image
    monkeypatch.setattr(cpu_conv, "_units_per_image", lambda *a: taken.append(real(*a)) or taken[-1])
    got = []
    for threads in (1, 2):
        with cpu_path(), split_pool(threads):
            native._workers.set_threads(threads)
            got.append(run())
    assert taken == [1, units]
    np.testing.assert_array_equal(got[1], got[0])
    oh = (n + 2 * pad - k) // stride + 1
    geometry = cpu_conv._geometry(b, c, n, n, k, k, (stride, stride), (pad, pad), (1, 1), oh, oh)
    for blocks in (1, 2, 3, 7, co):
        y = np.full_like(got[0], np.nan)
        cpu_conv._CONV().conv_images(x, kern, y, co, *geometry, blocks)
        np.testing.assert_array_equal(y, got[0])
    want = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(kern).double(), stride=stride,
                    padding=pad).numpy()
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("b,ci,co,n,k,stride,pad,opad,dil", [
    (16, 64, 32, 8, 3, 2, 1, 1, 1),  # a stride-2 layer with an output padding
    (4, 128, 64, 9, 3, 2, 1, 0, 1),  # a stride-2 layer's input gradient, odd size
    (6, 40, 24, 9, 5, 2, 2, 1, 1),   # 5x5
    (4, 48, 20, 10, 3, 1, 0, 0, 2),  # dilated, stride 1
    (2, 64, 64, 56, 3, 1, 1, 0, 1),  # 56x56: columns in several blocks of rows
])
def test_the_transposed_convolution_by_images(b, ci, co, n, k, stride, pad, opad, dil):
    """Each image's product and col2im on one thread (``conv_transpose_images``): the
    same bits at one and two threads, PyTorch's values."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((b, ci, n, n)).astype(np.float32)
    kern = rng.standard_normal((ci, co, k, k)).astype(np.float32)
    got = _by_images_at_one_and_two_threads(
        lambda: cpu_conv._conv_transpose2d(x, kern, (pad, pad), (opad, opad), (stride, stride), (dil, dil), 1))
    want = F.conv_transpose2d(torch.from_numpy(x).double(), torch.from_numpy(kern).double(), stride=stride,
                              padding=pad, output_padding=opad, dilation=dil).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(ci * k * k))


@pytest.mark.skipif(not (HAVE_NATIVE and HAVE_POOL), reason="native conv module or pool not built")
@pytest.mark.parametrize("b,c,co,n,k,stride,pad,dil", [
    (16, 8, 24, 32, 3, 2, 1, 1),   # a stride-2 layer (a transposed one's kernel gradient)
    (3, 12, 48, 17, 3, 1, 0, 1),   # three parts of one image
    (6, 6, 32, 20, 5, 1, 2, 1),    # 5x5
    (5, 10, 20, 24, 3, 1, 2, 2),   # dilated
    (64, 64, 256, 8, 1, 1, 0, 1),  # 1x1 on small images: the images read in place
    (6, 64, 64, 9, 1, 1, 0, 1),    # 1x1, odd sizes
    (1, 64, 64, 7, 3, 1, 1, 1),    # one image: one part, cut in blocks of columns at two threads
    (1, 24, 70, 14, 3, 2, 1, 1),   # one strided image, an odd channel count
    (2, 64, 64, 56, 3, 1, 1, 1),   # 56x56: columns in several blocks of rows
    (5, 1, 8, 28, 3, 1, 0, 1),     # a first layer: one input channel
    (4, 16, 32, 9, 1, 2, 0, 1),    # a strided 1x1 kernel: gathered columns
])
def test_the_im2col_kernel_gradient_in_parts(b, c, co, n, k, stride, pad, dil):
    """The kernel gradient's sum over the images in parts, each image's columns made on
    the thread that uses them: PyTorch's values, the same bits at one and two threads."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((b, c, n, n)).astype(np.float32)
    oh = (n + 2 * pad - dil * (k - 1) - 1) // stride + 1
    g = rng.standard_normal((b, co, oh, oh)).astype(np.float32)
    args = ((co, c, k, k), (pad, pad), (stride, stride), (dil, dil), 1)
    got = _by_images_at_one_and_two_threads(lambda: cpu_conv._conv2d_kernel_grad(x, g, *args))
    pk = torch.zeros((co, c, k, k), dtype=torch.float64, requires_grad=True)
    F.conv2d(torch.from_numpy(x).double(), pk, stride=stride, padding=pad, dilation=dil).backward(
        torch.from_numpy(g).double())
    np.testing.assert_allclose(got, pk.grad.numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(b * oh * oh))


@pytest.mark.skipif(not HAVE_NATIVE, reason="native conv module not built")
def test_the_rules_for_the_image_at_a_time_passes(monkeypatch):
    mod = cpu_conv._CONV()
    assert cpu_conv._by_images(mod, 1) == cpu_conv.gemm.native_available()
    assert not cpu_conv._by_images(mod, 2)    # groups: the batch's columns
    assert not cpu_conv._by_images(None, 1)   # no C module
    monkeypatch.setattr(cpu_conv.gemm, "native_available", lambda: False)
    assert not cpu_conv._by_images(mod, 1)    # its products are the f32 kernel's
    monkeypatch.setattr(cpu_conv.CONFIG, "get", lambda: 2)
    assert cpu_conv._units_per_image(4, 128) == 1
    assert cpu_conv._units_per_image(1, 128) == 2    # one image: blocks of channels
    assert cpu_conv._units_per_image(3, 128) == 2    # 2 + 1 images on 2 threads
    assert cpu_conv._images_share_out(4) and not cpu_conv._images_share_out(3)
    with parallel.serial():
        assert cpu_conv._units_per_image(1, 128) == 1
    monkeypatch.setattr(cpu_conv.CONFIG, "get", lambda: 8)
    assert cpu_conv._units_per_image(1, 128) == 8
    assert cpu_conv._units_per_image(2, 128) == 4    # 2 images x 4 blocks
    assert cpu_conv._units_per_image(1, 5) == 5      # at most one block per channel
    monkeypatch.setattr(cpu_conv.CONFIG, "get", lambda: 1)
    assert cpu_conv._units_per_image(1, 128) == 1 and cpu_conv._units_per_image(3, 128) == 1
    assert cpu_conv._images_share_out(3)
    # the blocks each kernel gradient part is cut into (the bits do not depend on them)
    monkeypatch.setattr(cpu_conv.CONFIG, "get", lambda: 2)
    assert cpu_conv._blocks_per_item(1, 64) == 2 and cpu_conv._blocks_per_item(3, 64) == 2
    assert cpu_conv._blocks_per_item(4, 64) == 1 and cpu_conv._blocks_per_item(1, 1) == 1


@pytest.mark.skipif(not HAVE_NATIVE, reason="native conv module not built")
def test_native_passes_refuse_short_buffers_and_bad_sizes():
    mod = cpu_conv._CONV()
    x = np.zeros((1, 1, 4, 4), np.float32)
    geometry = (1, 1, 4, 4, 3, 3, 1, 1, 0, 0, 1, 1, 2, 2)
    with pytest.raises(ValueError, match="cols"):
        mod.im2col(x, np.zeros(3, np.float32), 36, 4, *geometry)
    y = np.full(4, 7.0, np.float32)
    with pytest.raises(ValueError, match="out"):
        mod.conv_images(x, np.zeros(9, np.float32), y[:3].copy(), 1, *geometry)
    with pytest.raises(ValueError, match="kernel"):
        mod.conv_images(x, np.zeros(8, np.float32), y, 1, *geometry)
    with pytest.raises(ValueError, match="channel"):
        mod.conv_images(x, np.zeros(9, np.float32), y, 0, *geometry)
    for blocks in (0, 2):  # blocks of output channels: 1 to c_out
        with pytest.raises(ValueError, match="unit"):
            mod.conv_images(x, np.zeros(9, np.float32), y, 1, *geometry, blocks)
    assert np.all(y == 7.0)
    # transposed, an image at a time: x (1, 1, 2, 2) into a 4x4 output, kernel^T (9, 1)
    xt, out = np.zeros(4, np.float32), np.full(16, 7.0, np.float32)
    with pytest.raises(ValueError, match="out"):
        mod.conv_transpose_images(xt, np.zeros(9, np.float32), out[:15].copy(), 1, *geometry)
    with pytest.raises(ValueError, match="kernel"):
        mod.conv_transpose_images(xt, np.zeros(8, np.float32), out, 1, *geometry)
    with pytest.raises(ValueError, match="x"):
        mod.conv_transpose_images(xt[:3].copy(), np.zeros(9, np.float32), out, 1, *geometry)
    with pytest.raises(ValueError, match="channel"):
        mod.conv_transpose_images(xt, np.zeros(9, np.float32), out, 0, *geometry)
    assert np.all(out == 7.0)
    # an empty product (no input channels, no columns) zeroes either output
    empty, y0 = np.zeros(0, np.float32), np.full(4, 7.0, np.float32)
    mod.conv_images(empty, empty, y0, 1, 1, 0, 4, 4, *geometry[4:])
    mod.conv_transpose_images(xt, empty, out[:0].copy(), 1, 1, 0, 4, 4, *geometry[4:])
    assert np.all(y0 == 0.0)
    parts = np.full(18, 7.0, np.float32)
    with pytest.raises(ValueError, match="out"):  # room for 2 parts of 9, not 3
        mod.kernel_grad_parts(x, np.zeros(4, np.float32), parts, 3, 1, *geometry)
    with pytest.raises(ValueError, match="kernel"):  # the output gradient, short
        mod.kernel_grad_parts(x, np.zeros(3, np.float32), parts, 2, 1, *geometry)
    with pytest.raises(ValueError, match="part"):
        mod.kernel_grad_parts(x, np.zeros(4, np.float32), parts, 0, 1, *geometry)
    for units in (0, 2):  # blocks of the one output channel
        with pytest.raises(ValueError, match="unit"):
            mod.kernel_grad_parts(x, np.zeros(4, np.float32), parts, 2, 1, *geometry, units)
    assert np.all(parts == 7.0)
    with pytest.raises(ValueError, match="bad sizes"):
        mod.im2col(x, np.zeros(36, np.float32), 36, 4, *geometry[:4], 0, *geometry[5:])
    with pytest.raises(ValueError, match="pooling"):
        mod.max_pool2d(x, np.zeros(4, np.float32), 1, 4, 4, 5, 2, 2, 2)
    with pytest.raises(ValueError, match="gx"):
        mod.avg_pool2d_backward(np.zeros(4, np.float32), np.zeros(3, np.float32), 1, 4, 4, 2, 2, 2, 2)


@pytest.mark.parametrize("kernel,stride", [((2, 2), (2, 2)), ((3, 3), (1, 1)), ((2, 3), (3, 2)),
                                           ((3, 2), (2, 3)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("native_c", [True, False])
def test_wide_max_pool_rows_with_ties_and_nans_match_torch(kernel, stride, native_c):
    """Rows wide enough for the native pass's vectors (and their scalar tails): ties go
    to the first maximum, a NaN wins, as in PyTorch."""
    rng = np.random.default_rng(4)
    x = rng.integers(-2, 3, (2, 3, 11, 43)).astype(np.float32)
    x[rng.random(x.shape) < 0.02] = np.nan
    g = None
    with cpu_path(native_c=native_c):
        vx = tl.Var(x)
        out = vx.max_pool2d(kernel, stride)
        g = rng.standard_normal(out.shape).astype(np.float32)
        gx = (out * tl.Tensor(g)).sum_all().backward()[vx].numpy()
    px = torch.tensor(x, requires_grad=True)
    ref = F.max_pool2d(px, kernel, stride)
    (ref * torch.from_numpy(g)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    np.testing.assert_allclose(gx, px.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not HAVE_NATIVE, reason="native conv module not built")
@pytest.mark.parametrize("kernel", [(2, 2), (3, 2), (1, 3)])
def test_tiling_max_pool_backward_writes_every_element_in_every_build(kernel):
    """Windows that tile the plane (stride = window) write each input row outright: the
    gradient at the winner (a -0.0 kept, ties to the first maximum, a NaN winning),
    zero elsewhere and in the rows and columns no window covers, the same bits as
    PyTorch in each build at one and two threads."""
    rng = np.random.default_rng(9)
    x = rng.integers(-2, 3, (3, 2, 2 * kernel[0] * 5 + 1, kernel[1] * 23 + 1)).astype(np.float32)
    x[rng.random(x.shape) < 0.02] = np.nan
    px = torch.tensor(x, requires_grad=True)
    ref = F.max_pool2d(px, kernel, kernel)
    g = rng.standard_normal(ref.shape).astype(np.float32)
    g[rng.random(g.shape) < 0.1] = -0.0
    ref.backward(torch.from_numpy(g))
    want = px.grad.numpy()
    mod = cpu_conv._CONV()
    for _ in each_build_and_thread_count(mod):
        gx = np.full(x.shape, np.nan, np.float32)  # every element must be written
        mod.max_pool2d_backward(x, g, gx, 6, x.shape[2], x.shape[3], *kernel, *kernel)
        np.testing.assert_array_equal(gx, want)
        np.testing.assert_array_equal(np.signbit(gx), np.signbit(want))


def test_no_native_variable_turns_the_native_passes_off(monkeypatch):
    x = np.zeros((1, 1, 4, 4), np.float32)
    monkeypatch.setenv("TALLOW_NO_NATIVE", "1")
    assert cpu_conv._native(x) is None
    monkeypatch.setenv("TALLOW_NO_NATIVE", "0")
    assert (cpu_conv._native(x) is not None) == HAVE_NATIVE
    assert cpu_conv._native(x.astype(np.float64)) is None  # f32 only
