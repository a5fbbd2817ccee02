"""Training steps beside PyTorch, at 1 and 2 threads (``tallow bench cpu``'s ``train``
rows, and ``tallow bench train`` on its own).

* MLP: 3 layers 256->256 (ReLU), batch 64, cross-entropy over 10 classes, forward,
  backward and an SGD update;
* conv net: conv 8x3x3, ReLU, max-pool 2, Linear 1352->10, cross-entropy, batch 32
  of 1x28x28, forward and backward (and the SGD update).

Both sides start from the same weights and data; each step is timed separately,
the candidates take turns, and the medians are reported with tallow time / PyTorch
time.
"""

from __future__ import annotations

import numpy as np

import tallow as tl

from .common import alternate, have_torch, ms, ratio, run_suite, set_threads, table



def _mlp_data(rng):
    ws = [rng.uniform(-0.06, 0.06, (256, 256)).astype(np.float32) for _ in range(2)]
    ws.append(rng.uniform(-0.06, 0.06, (10, 256)).astype(np.float32))
    bs = [np.zeros(256, np.float32), np.zeros(256, np.float32), np.zeros(10, np.float32)]
    x = rng.standard_normal((64, 256)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    return ws, bs, x, y


def _conv_data(rng):
    k = (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32)
    w = (rng.standard_normal((10, 1352)) * 0.03).astype(np.float32)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    return [k, w], [np.zeros(8, np.float32), np.zeros(10, np.float32)], x, y


def tallow_steps(lr=0.01):
    """{name: one training step} for tallow (fresh weights each call)."""
    rng = np.random.default_rng(7)
    ce = tl.nn.loss.cross_entropy
    ws, bs, x, y = _mlp_data(rng)
    mw, mb = [tl.Var(w) for w in ws], [tl.Var(b) for b in bs]
    mx, my = tl.Tensor(x), tl.Tensor(y.astype(np.int64))
    mopt = tl.nn.optim.SGD(mw + mb, lr=lr)

    linear = tl.nn.linear  # PyTorch's side calls F.linear

    def mlp():
        h = mx
        for i, (w, b) in enumerate(zip(mw, mb)):
            h = linear(h, w, b)
            if i < 2:
                h = h.relu()
        loss = ce(h, my)
        mopt.backward_step(loss)
        return loss

    (k, w), (kb, wb), cx, cy = _conv_data(rng)
    ck, ckb, cw, cwb = tl.Var(k), tl.Var(kb), tl.Var(w), tl.Var(wb)
    tx, ty = tl.Tensor(cx), tl.Tensor(cy.astype(np.int64))
    copt = tl.nn.optim.SGD([ck, ckb, cw, cwb], lr=lr)

    def conv():
        h = tx.conv2d(ck).broadcast_add(ckb.reshape((1, 8, 1, 1))).relu().max_pool2d(2)
        loss = ce(h.flatten_from(1).matmul(cw.t()).broadcast_add(cwb), ty)
        copt.backward_step(loss)
        return loss

    return {"mlp": mlp, "conv": conv}


def torch_steps(torch, lr=0.01):
    """The same steps in PyTorch eager."""
    F = torch.nn.functional
    rng = np.random.default_rng(7)
    ws, bs, x, y = _mlp_data(rng)
    params = [torch.tensor(a, requires_grad=True) for a in ws + bs]
    mx, my = torch.from_numpy(x), torch.from_numpy(y)
    mopt = torch.optim.SGD(params, lr=lr)

    def mlp():
        mopt.zero_grad()
        h = mx
        for i in range(3):
            h = F.linear(h, params[i], params[3 + i])
            if i < 2:
                h = h.relu()
        loss = F.cross_entropy(h, my)
        loss.backward()
        mopt.step()
        return loss

    (k, w), (kb, wb), cx, cy = _conv_data(rng)
    cp = [torch.tensor(a, requires_grad=True) for a in (k, kb, w, wb)]
    tx, ty = torch.from_numpy(cx), torch.from_numpy(cy)
    copt = torch.optim.SGD(cp, lr=lr)

    def conv():
        copt.zero_grad()
        h = F.max_pool2d(F.relu(F.conv2d(tx, cp[0], cp[1])), 2)
        loss = F.cross_entropy(F.linear(h.flatten(1), cp[2], cp[3]), ty)
        loss.backward()
        copt.step()
        return loss

    return {"mlp": mlp, "conv": conv}


LABELS = {
    "mlp": "MLP 3x256, batch 64, step",
    "conv": "conv net (8x3x3, pool, 1352->10), batch 32, step",
}


def bench_train(repeats, threads=(1, 2), number=5):
    torch = have_torch()
    rows, results = [], []
    for n in threads:
        set_threads(n)
        ours = tallow_steps()
        theirs = torch_steps(torch) if torch is not None else {}
        for name in ours:
            cands = {"tallow": ours[name]}
            if name in theirs:
                cands["torch"] = theirs[name]
            t = alternate(cands, repeats, number=number)
            r = ratio(t["tallow"], t.get("torch"))
            results.append(dict(workload=name, threads=n, tallow_ms=ms(t["tallow"]),
                                torch_ms=ms(t.get("torch")), time_vs_torch=r))
            rows.append([LABELS[name], n, ms(t["tallow"]), ms(t.get("torch")), r])
    print(table("training steps (ms per step; time vs torch = tallow / torch, below 1 is faster)",
                ["workload", "threads", "tallow", "torch", "time vs torch"], rows))
    return results


def run(args) -> int:
    """``tallow bench train``: the training rows alone."""
    return run_suite(args, "train", lambda repeats, quick: bench_train(repeats, number=3 if quick else 5))
