"""Convolutions beside PyTorch, at 1 and 2 threads (``tallow bench conv``).

Per shape: the forward alone, and forward + backward (input and kernel gradients,
from an all-ones output gradient: ``out.sum().backward()`` on both sides). The
grid covers 3x3 and 1x1 kernels, stride 1 and 2, padding 0 and 1, batch 1 to 64
and 3 to 256 channels, transposed convolutions and one 1-D convolution; ``--quick``
runs a subset. Both sides get the same f32 data; the candidates take turns and the
medians are reported with tallow time / PyTorch time.
"""

from __future__ import annotations

import numpy as np

import tallow as tl

from .common import alternate, have_torch, ms, ratio, run_suite, set_threads, table

# (name, op, batch, c_in, c_out, spatial size, kernel, stride, padding, output_padding)
SHAPES = (
    ("3x3 s1 p1, 3->16, b64 28x28", "conv2d", 64, 3, 16, 28, 3, 1, 1, 0),
    ("3x3 s1 p0, 8->16, b32 28x28", "conv2d", 32, 8, 16, 28, 3, 1, 0, 0),
    ("3x3 s1 p1, 64->64, b8 16x16", "conv2d", 8, 64, 64, 16, 3, 1, 1, 0),
    ("3x3 s2 p1, 64->128, b4 32x32", "conv2d", 4, 64, 128, 32, 3, 2, 1, 0),
    ("3x3 s1 p1, 128->128, b1 16x16", "conv2d", 1, 128, 128, 16, 3, 1, 1, 0),
    ("3x3 s1 p1, 256->256, b1 7x7", "conv2d", 1, 256, 256, 7, 3, 1, 1, 0),
    ("1x1 s1, 256->64, b16 16x16", "conv2d", 16, 256, 64, 16, 1, 1, 0, 0),
    ("1x1 s1, 64->256, b64 8x8", "conv2d", 64, 64, 256, 8, 1, 1, 0, 0),
    ("1x1 s2, 128->256, b16 16x16", "conv2d", 16, 128, 256, 16, 1, 2, 0, 0),
    ("T 3x3 s2 p1 op1, 64->32, b16 16x16", "conv_transpose2d", 16, 64, 32, 16, 3, 2, 1, 1),
    ("T 3x3 s1 p1, 128->64, b8 16x16", "conv_transpose2d", 8, 128, 64, 16, 3, 1, 1, 0),
    ("T 1x1 s1, 128->64, b16 16x16", "conv_transpose2d", 16, 128, 64, 16, 1, 1, 0, 0),
    ("1d k3 s1 p1, 64->64, b16 L256", "conv1d", 16, 64, 64, 256, 3, 1, 1, 0),
)
QUICK = (0, 2, 5, 6, 9, 12)


def _data(op, b, ci, co, n, k, rng):
    if op == "conv1d":
        x = rng.standard_normal((b, ci, n))
        w = rng.standard_normal((co, ci, k))
    elif op == "conv_transpose2d":
        x = rng.standard_normal((b, ci, n, n))
        w = rng.standard_normal((ci, co, k, k))
    else:
        x = rng.standard_normal((b, ci, n, n))
        w = rng.standard_normal((co, ci, k, k))
    scale = 1.0 / np.sqrt(w[0].size)
    return x.astype(np.float32), (w * scale).astype(np.float32)


def _kwargs(op, stride, pad, opad):
    kw = dict(stride=stride, padding=pad)
    if op == "conv_transpose2d":
        kw["output_padding"] = opad
    return kw


def tallow_fns(shape, rng):
    """(forward, forward + backward) for tallow on one shape."""
    _, op, b, ci, co, n, k, stride, pad, opad = shape
    x, w = _data(op, b, ci, co, n, k, rng)
    kw = _kwargs(op, stride, pad, opad)
    tx, tw = tl.Tensor(x), tl.Tensor(w)
    vx, vw = tl.Var(x), tl.Var(w)

    def fwd():
        return getattr(tx, op)(tw, **kw)

    def fwd_bwd():
        grads = getattr(vx, op)(vw, **kw).sum_all().backward()
        return grads.get(vx), grads.get(vw)

    return fwd, fwd_bwd


def torch_fns(torch, shape, rng):
    """The same forward and forward + backward in PyTorch eager."""
    _, op, b, ci, co, n, k, stride, pad, opad = shape
    x, w = _data(op, b, ci, co, n, k, rng)
    kw = _kwargs(op, stride, pad, opad)
    f = getattr(torch.nn.functional, op)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)

    def fwd():
        with torch.no_grad():
            return f(tx, tw, **kw)

    def fwd_bwd():
        vx = tx.detach().requires_grad_()
        vw = tw.detach().requires_grad_()
        f(vx, vw, **kw).sum().backward()
        return vx.grad, vw.grad

    return fwd, fwd_bwd



def bench_conv(repeats, threads=(1, 2), quick=False, number=3):
    torch = have_torch()
    shapes = [SHAPES[i] for i in QUICK] if quick else list(SHAPES)
    rows, results = [], []
    for n in threads:
        set_threads(n)
        for shape in shapes:
            ours = tallow_fns(shape, np.random.default_rng(3))
            theirs = torch_fns(torch, shape, np.random.default_rng(3)) if torch else None
            row = dict(shape=shape[0], threads=n)
            cells = [shape[0], n]
            for i, part in enumerate(("fwd", "fwd_bwd")):
                cands = {"tallow": ours[i]}
                if theirs is not None:
                    cands["torch"] = theirs[i]
                t = alternate(cands, repeats, number=number)
                r = ratio(t["tallow"], t.get("torch"))
                row.update({f"{part}_tallow_ms": ms(t["tallow"]),
                            f"{part}_torch_ms": ms(t.get("torch")), f"{part}_time_vs_torch": r})
                cells += [ms(t["tallow"]), ms(t.get("torch")), r]
            rows.append(cells)
            results.append(row)
    print(table("convolutions, f32 (ms; time vs torch = tallow / torch, below 1 is faster)",
                ["shape", "threads", "fwd tallow", "fwd torch", "fwd ratio",
                 "fwd+bwd tallow", "fwd+bwd torch", "fwd+bwd ratio"], rows))
    return results


def run(args) -> int:
    """``tallow bench conv``: the convolution table alone."""
    return run_suite(args, "conv", lambda repeats, quick: bench_conv(
        repeats, quick=quick, number=2 if quick else 3))
