"""``tl.no_grad()`` and ``.grad`` as PyTorch's: a PyTorch training loop ports by
renaming ``torch`` to ``tl``, and gives PyTorch's losses."""

import threading

import numpy as np
import pytest
import torch

import tallow as tl


def test_no_grad_records_nothing_and_nests(device):
    w = tl.Var([1.0, 2.0], device=device)
    assert tl.is_grad_enabled()
    with tl.no_grad():
        y = w * 2
        assert not y.track_op() and not tl.is_grad_enabled()
        with tl.enable_grad():
            assert (w * 2).track_op()
        with tl.no_grad():
            pass
        assert not tl.is_grad_enabled()
    assert tl.is_grad_enabled() and (w * 2).track_op()


def test_no_grad_as_a_decorator_and_after_an_exception():
    w = tl.Var([1.0])

    @tl.no_grad()
    def evaluate(x):
        return x * 3

    assert not evaluate(w).track_op()
    with pytest.raises(ValueError):
        with tl.no_grad():
            raise ValueError("boom")
    assert tl.is_grad_enabled()


def test_no_grad_is_per_thread():
    w = tl.Var([1.0])
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["tracked"] = (w * 2).track_op()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with tl.no_grad():
        inside.set()
        done.wait()
    t.join()
    assert seen["tracked"] is True


def test_backward_inside_no_grad_still_works(device):
    w = tl.Var([1.0, 2.0], device=device)
    loss = (w * w).sum()
    with tl.no_grad():
        g = loss.backward()
    assert g[w].values() == [2.0, 4.0]


def test_grad_sums_over_backward_calls_as_torch(device):
    tw = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w = tl.Var([1.0, -2.0, 3.0], device=device)
    assert w.grad is None
    for scale in (1.0, 2.0):
        (tw * tw * scale).sum().backward()
        store = (w * w * scale).sum().backward()
        assert isinstance(store, tl.GradStore)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
    # .grad is its own tensor: clipping it in place leaves the GradStore alone
    before = store[w].values()
    with tl.no_grad():
        w.grad.mul_(0.5)
    assert store[w].values() == before


def test_zero_grad_clears_or_zeroes(device):
    w = tl.Var([1.0, 2.0], device=device)
    opt = tl.nn.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.values() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_step_with_a_grad_store_still_works(device):
    w = tl.Var([1.0, 2.0], device=device)
    opt = tl.nn.optim.SGD([w], lr=0.5)
    opt.step((w * w).sum().backward())
    assert w.values() == [0.0, 0.0]
    assert w.grad is None  # candle's loop never zeroes: a store's step clears .grad


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 5)).astype(np.float32)
    y = (x @ rng.standard_normal((5, 1)) + 0.3).astype(np.float32)
    w1 = (rng.standard_normal((8, 5)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((1, 8)) * 0.4).astype(np.float32)
    return x, y, w1, w2


def _model(lib, w1, w2, device=None):
    model = lib.nn.Sequential(lib.nn.Linear(5, 8), lib.nn.Tanh(), lib.nn.Linear(8, 1))
    if lib is torch:
        with torch.no_grad():
            model[0].weight.copy_(torch.from_numpy(w1))
            model[0].bias.zero_()
            model[2].weight.copy_(torch.from_numpy(w2))
            model[2].bias.zero_()
    else:
        with tl.no_grad():
            model[0].weight.copy_(tl.Tensor(w1))
            model[0].bias.zero_()
            model[2].weight.copy_(tl.Tensor(w2))
            model[2].bias.zero_()
        model.to(device)
    return model


def _torch_style_loop(lib, make_opt, device=None, steps=20):
    """The same source for both libraries: only the module object differs."""
    x, y, w1, w2 = _data()
    model = _model(lib, w1, w2, device)
    opt = make_opt(lib, model.parameters())
    loss_fn = lib.nn.MSELoss()
    if lib is torch:
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    else:
        xs, ys = lib.tensor(x, device=device), lib.tensor(y, device=device)
    losses = []
    for _ in range(steps):
        loss = loss_fn(model(xs), ys)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


OPTIMISERS = {
    "sgd momentum": lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.9)
    if lib is torch else lib.nn.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda lib, p: lib.optim.Adam(p, lr=0.01) if lib is torch else lib.nn.optim.Adam(p, lr=0.01),
}


@pytest.mark.parametrize("name", list(OPTIMISERS))
def test_a_pytorch_training_loop_ports_as_it_is(device, name):
    want = _torch_style_loop(torch, OPTIMISERS[name])
    got = _torch_style_loop(tl, OPTIMISERS[name], device)
    assert want[-1] < want[0] * 0.9  # the loop trains
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


def _manual_sgd(lib, device=None, steps=20, lr=0.05):
    x, y, w1, w2 = _data(1)
    if lib is torch:
        p = [torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)]
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    else:
        p = [tl.Var(w1, device=device), tl.Var(w2, device=device)]
        xs, ys = tl.tensor(x, device=device), tl.tensor(y, device=device)
    losses = []
    for _ in range(steps):
        out = (xs @ p[0].t()).tanh() @ p[1].t()
        loss = ((out - ys) ** 2).mean()
        loss.backward()
        with lib.no_grad():
            for q in p:
                q -= lr * q.grad
                q.grad = None
        losses.append(loss.item())
    return losses


def test_a_manual_sgd_loop_with_no_grad(device):
    want = _manual_sgd(torch)
    got = _manual_sgd(tl, device)
    assert want[-1] < want[0]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


def test_step_without_grads_says_to_run_backward():
    w = tl.Var([1.0])
    opt = tl.nn.optim.SGD([w], lr=0.1)
    with pytest.raises(tl.nn.OptimizerVariablesError, match="backward"):
        opt.step()


def test_a_compiled_step_leaves_grad_alone():
    # A replay could not update .grad, so backward() inside a compiled function does
    # not touch it, on the recording call either (docs/compile.md).
    w = tl.Var([1.0, 2.0])
    opt = tl.nn.optim.SGD([w], lr=0.1)

    def step(x):
        loss = (w * x).sum()
        opt.backward_step(loss)
        return loss.detach()

    compiled = tl.compile(step)
    for _ in range(3):
        compiled(tl.tensor([1.0, 1.0]))
    assert w.grad is None
    np.testing.assert_allclose(w.values(), [0.7, 1.7], rtol=1e-6)
    (w * w).sum().backward()  # outside, .grad fills again
    np.testing.assert_allclose(w.grad.values(), [1.4, 3.4], rtol=1e-6)


def test_module_zero_grad_clears_its_parameters(device):
    model = tl.nn.Linear(3, 2).to(device)
    model(tl.ones((4, 3), device=device)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    assert all(not np.any(p.grad.numpy()) for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
