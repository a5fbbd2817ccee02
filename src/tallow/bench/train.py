"""Training steps beside PyTorch, at 1 and 2 threads (``tallow bench cpu``'s ``train``
rows, and ``tallow bench train`` on its own).

* MLP: 3 layers 256->256 (ReLU), batch 64, cross-entropy over 10 classes, forward,
  backward and an SGD update; once through the fused ``nn.linear`` (``F.linear`` on
  PyTorch's side) and once written as ``(h @ w.t() + b).relu()`` on both sides;
* conv net: conv 8x3x3, ReLU, max-pool 2, Linear 1352->10, cross-entropy, batch 32
  of 1x28x28, forward and backward (and the SGD update);
* ResNet-18 basic block: batch 8 of 64x56x56, two 3x3 convolutions (padding 1) each
  followed by batch normalisation (training mode), ReLU after the first, the input
  added back and a last ReLU; forward and backward (the input's gradient too, as
  inside a network) of the mean square of its output, and the SGD update.

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


def _block_data(rng, batch=8, size=56, channels=64):
    scale = 1.0 / np.sqrt(channels * 9)
    ks = [(rng.standard_normal((channels, channels, 3, 3)) * scale).astype(np.float32)
          for _ in range(2)]
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    return ks, x


def _batch_norm(x, weight, bias, eps=1e-5):
    """Training-mode batch normalisation over (batch, h, w), as F.batch_norm computes."""
    mean = x.mean_keepdim((0, 2, 3))
    centred = x.broadcast_sub(mean)
    var = centred.sqr().mean_keepdim((0, 2, 3))
    per_channel = (1, x.shape[1], 1, 1)
    y = centred.broadcast_div((var + eps).sqrt())
    return y.broadcast_mul(weight.reshape(per_channel)).broadcast_add(bias.reshape(per_channel))


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
        mopt.zero_grad()  # as PyTorch's steps: backward sets each Var's .grad afresh
        h = mx
        for i, (w, b) in enumerate(zip(mw, mb)):
            h = linear(h, w, b)
            if i < 2:
                h = h.relu()
        loss = ce(h, my)
        mopt.backward_step(loss)
        return loss

    iw, ib = [tl.Var(w) for w in ws], [tl.Var(b) for b in bs]
    iopt = tl.nn.optim.SGD(iw + ib, lr=lr)

    def mlp_idiom():
        iopt.zero_grad()
        h = mx
        for i, (w, b) in enumerate(zip(iw, ib)):
            h = h @ w.t() + b
            if i < 2:
                h = h.relu()
        loss = ce(h, my)
        iopt.backward_step(loss)
        return loss

    (k, w), (kb, wb), cx, cy = _conv_data(rng)
    ck, ckb, cw, cwb = tl.Var(k), tl.Var(kb), tl.Var(w), tl.Var(wb)
    tx, ty = tl.Tensor(cx), tl.Tensor(cy.astype(np.int64))
    copt = tl.nn.optim.SGD([ck, ckb, cw, cwb], lr=lr)

    def conv():
        copt.zero_grad()
        h = tx.conv2d(ck).broadcast_add(ckb.reshape((1, 8, 1, 1))).relu().max_pool2d(2)
        loss = ce(h.flatten_from(1).matmul(cw.t()).broadcast_add(cwb), ty)
        copt.backward_step(loss)
        return loss

    (k1, k2), bx = _block_data(rng)
    bk = [tl.Var(k1), tl.Var(k2)]
    bn = [tl.Var(np.ones(k1.shape[0], np.float32)), tl.Var(np.zeros(k1.shape[0], np.float32)),
          tl.Var(np.ones(k1.shape[0], np.float32)), tl.Var(np.zeros(k1.shape[0], np.float32))]
    vx = tl.Var(bx)
    bopt = tl.nn.optim.SGD(bk + bn, lr=lr)

    def resnet_block():
        vx.grad = None  # as PyTorch's step does: vx is not in the optimiser, which clears the rest
        h = _batch_norm(vx.conv2d(bk[0], padding=1), bn[0], bn[1]).relu()
        h = _batch_norm(h.conv2d(bk[1], padding=1), bn[2], bn[3])
        loss = (h + vx).relu().sqr().mean_all()
        bopt.backward_step(loss)  # (the input's gradient is computed too: vx is a Var)
        return loss

    return {"mlp": mlp, "mlp_idiom": mlp_idiom, "conv": conv, "resnet_block": resnet_block}


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

    iparams = [torch.tensor(a, requires_grad=True) for a in ws + bs]
    iopt = torch.optim.SGD(iparams, lr=lr)

    def mlp_idiom():
        iopt.zero_grad()
        h = mx
        for i in range(3):
            h = h @ iparams[i].t() + iparams[3 + i]
            if i < 2:
                h = h.relu()
        loss = F.cross_entropy(h, my)
        loss.backward()
        iopt.step()
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

    (k1, k2), bx = _block_data(rng)
    bp = [torch.tensor(a, requires_grad=True) for a in (k1, k2)]
    bp += [torch.tensor(np.full(k1.shape[0], v, np.float32), requires_grad=True)
           for v in (1, 0, 1, 0)]
    vx = torch.tensor(bx, requires_grad=True)
    bopt = torch.optim.SGD(bp, lr=lr)

    def resnet_block():
        bopt.zero_grad()
        vx.grad = None
        h = F.batch_norm(F.conv2d(vx, bp[0], padding=1), None, None, bp[2], bp[3], training=True)
        h = F.batch_norm(F.conv2d(h.relu(), bp[1], padding=1), None, None, bp[4], bp[5],
                         training=True)
        loss = (h + vx).relu().square().mean()
        loss.backward()
        bopt.step()
        return loss

    return {"mlp": mlp, "mlp_idiom": mlp_idiom, "conv": conv, "resnet_block": resnet_block}


LABELS = {
    "mlp": "MLP 3x256, batch 64, step",
    "mlp_idiom": "MLP step, written as (h @ w.t() + b).relu()",
    "conv": "conv net (8x3x3, pool, 1352->10), batch 32, step",
    "resnet_block": "ResNet-18 basic block (64ch, 2x conv3x3+BN), batch 8 of 56x56, step",
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
