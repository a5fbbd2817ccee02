"""f32 matrix products beside NumPy and PyTorch, at 1 and 2 threads (``tallow bench gemm``).

Per shape: tallow's product (``backends.cpu.gemm.matmul``: its own kernel where it is
used), the same call with the kernel switched off (NumPy's OpenBLAS on one thread,
large products split by tallow's Python-side runner), ``np.matmul`` (OpenBLAS kept
on one thread by tallow) and ``torch.matmul`` at the same thread count. The shapes
are those of a training step of a 3-layer width-256 network at batch 64 (forward,
and the two backward products with their transposed operands as views), im2col
convolution products, and square products. The candidates take turns; medians.
"""

from __future__ import annotations

import numpy as np

from ..backends.cpu import gemm
from .common import alternate, have_torch, load_average, ratio, run_suite, set_threads, table

F = np.float32


def _shapes(rng):
    """(name, a, b): operands as the callers pass them (views where they are views)."""
    def r(*shape):
        return rng.standard_normal(shape).astype(F)

    x, w, dy = r(64, 256), r(256, 256), r(64, 256)
    return [
        ("linear fwd 64x256 @ (256x256)^T", x, w.T),
        ("grad W: (64x256)^T @ 64x256", x.T, dy),
        ("grad x: 64x256 @ 256x256", dy, w),
        ("conv 16x27 @ 27x50176", r(16, 27), r(27, 50176)),
        ("conv batched 64 x (16x27 @ 27x784)", np.broadcast_to(r(16, 27), (64, 16, 27)), r(64, 27, 784)),
        ("conv 16x72 @ 72x25088 (c8 co16 b32 28x28)", r(16, 72), r(72, 25088)),
        ("conv 64x576 @ 576x2048 (c64 co64 b8 16x16)", r(64, 576), r(576, 2048)),
        ("conv 256x2304 @ 2304x49 (c256 co256 b1 7x7)", r(256, 2304), r(2304, 49)),
        ("square 256^3", r(256, 256), r(256, 256)),
        ("square 512^3", r(512, 512), r(512, 512)),
        ("square 1024^3", r(1024, 1024), r(1024, 1024)),
    ]


QUICK = (0, 1, 2, 4, 9)


def _blas_path(a, b):
    previous = gemm.set_native(False)
    try:
        return gemm.matmul(a, b)
    finally:
        gemm.set_native(previous)


def candidates(a, b, torch=None) -> dict:
    """{name: a call computing a @ b}: tallow, its BLAS path, NumPy, PyTorch (when given)
    on the same operands (PyTorch's transposed where ours are transposed views)."""
    cands = {"tallow": lambda: gemm.matmul(a, b),
             "blas path": lambda: _blas_path(a, b),
             "numpy": lambda: np.matmul(a, b)}
    if torch is not None:
        def as_torch(x):
            if x.ndim == 2 and not x.flags.c_contiguous and x.T.flags.c_contiguous:
                return torch.from_numpy(np.ascontiguousarray(x.T)).T  # the same transposed view
            return torch.from_numpy(np.ascontiguousarray(x))

        ta, tb = as_torch(a), as_torch(b)
        cands["torch"] = lambda: torch.matmul(ta, tb)
    return cands


def bench_gemm(repeats, threads=(1, 2), quick=False):
    torch = have_torch()
    shapes = _shapes(np.random.default_rng(0))
    if quick:
        shapes = [shapes[i] for i in QUICK]
    native = gemm.native_available()
    rows, results = [], []
    for n in threads:
        set_threads(n)
        for name, a, b in shapes:
            batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
            work = batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
            number = max(1, min(200, int(2e8 // max(1, work))))  # ~10-50 ms per timed turn
            cands = candidates(a, b, torch)
            t = alternate(cands, repeats, number=number)
            us = {k: v * 1e6 for k, v in t.items()}
            row = dict(shape=name, threads=n, native=native, **{f"{k.replace(' ', '_')}_us": v for k, v in us.items()},
                       time_vs_torch=ratio(t["tallow"], t.get("torch")),
                       time_vs_numpy=ratio(t["tallow"], t["numpy"]))
            results.append(row)
            rows.append([name, n, us["tallow"], us["blas path"], us["numpy"], us.get("torch"),
                         row["time_vs_numpy"], row["time_vs_torch"]])
    print(table(f"f32 products (us; ratio = tallow time / reference, below 1 is faster; "
                f"native kernel {'on' if native else 'off'}; load average {load_average()})",
                ["shape", "threads", "tallow", "blas path", "numpy", "torch", "vs numpy", "vs torch"], rows))
    return results


def run(args) -> int:
    """``tallow bench gemm``: the f32 product table alone."""
    return run_suite(args, "gemm", lambda repeats, quick: bench_gemm(repeats, quick=quick))
