"""Autograd: the op graph, backward for every differentiable op, against PyTorch."""

import gc
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tallow as tl

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_grads(f_tl, f_torch, arrays, device=tl.cpu, rtol=1e-4, atol=1e-5, seed=0):
    """Gradients of sum(f(x) * w) for random w, tallow vs PyTorch, for every input."""
    vs = [tl.Var(a, device=device) for a in arrays]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = f_tl(*vs)
    ref = f_torch(*ts)
    assert out.shape == tuple(ref.shape), (out.shape, ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    w = np.random.default_rng(seed).standard_normal(tuple(ref.shape))
    loss = (out * tl.Tensor(w.astype(arrays[0].dtype), device=device)).sum_all()
    grads = loss.backward()
    (ref * torch.from_numpy(w)).sum().backward()
    for v, t in zip(vs, ts):
        g = grads.get(v)
        assert g is not None, "missing gradient"
        assert g.shape == v.shape
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)
    return grads


def rnd(*shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float64)


# -- the op graph ----------------------------------------------------------------------

def test_sorted_nodes_of_a_diamond_put_every_node_after_its_users():
    # Shared subexpressions (reached along several paths), a Var used twice, a branch
    # through an integer cast (no gradient) and a plain tensor: each tracked node comes
    # once, after every node that uses it, and backward gives PyTorch's gradients.
    x_np = np.array([0.5, -1.0, 2.0], np.float32)
    c_np = np.array([1.5, 2.5, -0.5], np.float32)
    w, c = tl.Var(x_np), tl.Tensor(c_np)
    a = w * c
    b = a.exp() + a * w
    d = (b * a).sum_all() + (w.to_dtype(tl.i64).to_dtype(tl.f32) * b).sum_all()
    nodes = d.sorted_nodes()
    ids = [n.id for n in nodes]
    assert len(ids) == len(set(ids)) and nodes[0] is d and nodes[-1] is w
    assert c.id not in ids
    position = {n.id: i for i, n in enumerate(nodes)}
    for n in nodes:
        for arg in (n.op.args if n.op is not None else ()):
            if arg.id in position:
                assert position[arg.id] > position[n.id]
    tw = torch.tensor(x_np, requires_grad=True)
    tc = torch.from_numpy(c_np)
    ta = tw * tc
    tb = ta.exp() + ta * tw
    ((tb * ta).sum() + (tw.detach().long().float() * tb).sum()).backward()
    np.testing.assert_allclose(d.backward()[w].numpy(), tw.grad.numpy(), rtol=1e-5)


def test_seed_graph_example():
    x = tl.Tensor.new([1.0, 2.0, 3.0])
    y = x.sqr().sum_all()
    assert not y.track_op() and y.sorted_nodes() == []
    w = tl.Var([1.0, 2.0, 3.0])
    h = w.broadcast_mul(x)
    z = h.sqr().sum(-1)
    assert z.track_op()
    nodes = z.sorted_nodes()
    assert [list(n.dims) for n in nodes] == [[], [1], [3], [3], [3]]
    assert nodes[-1] is w
    assert w.is_variable() and not h.is_variable()
    zd = z.detach()
    assert not zd.track_op() and zd.sorted_nodes() == []
    assert not (zd * 2.0).track_op()
    assert zd.storage_and_layout()[0] is z.storage_and_layout()[0]
    grads = z.backward()
    np.testing.assert_allclose(grads[w].numpy(), 2 * np.array([1, 2, 3.0]) * np.array([1, 2, 3.0]) ** 2)
    assert grads.get(x) is not None  # candle also hands the plain input a gradient


def test_plain_tensors_record_nothing():
    a = tl.randn((3, 3))
    out = ((a @ a).exp().sum(0) + 1.0).sqrt()
    assert out.op is None and not out.track_op()


def test_candle_hand_checked_example():
    x = tl.Var([3.0, 1.0, 4.0])
    y = x * x + x * 5.0 + 4.0
    grads = y.sum_all().backward()
    assert grads[x].values() == [11.0, 7.0, 13.0]
    assert x in grads and len(grads.get_ids()) >= 1


def test_grad_store_api():
    x = tl.Var([1.0, 2.0])
    grads = (x * 3.0).sum_all().backward()
    assert grads.get_id(x.id).values() == [3.0, 3.0]
    g = grads.remove(x)
    assert g.values() == [3.0, 3.0] and grads.get(x) is None and x not in grads
    grads.insert(x, tl.ones(2))
    assert grads[x].values() == [1.0, 1.0]
    with pytest.raises(KeyError):
        grads[tl.zeros(2)]


def test_gradients_accumulate_over_reuse_and_diamonds():
    x = tl.Var([1.0, 2.0, 3.0])
    a = x.exp()
    b = a * x          # x used twice
    c = a.sin() + b    # a used twice (a diamond)
    grads = c.sum_all().backward()
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    ta = t.exp()
    (ta.sin() + ta * t).sum().backward()
    np.testing.assert_allclose(grads[x].numpy(), t.grad.numpy(), rtol=1e-6)


def test_deep_graph_has_no_recursion_limit():
    x = tl.Var(np.array([1.0]))  # f64, so the product is exact enough to compare
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    grads = y.sum_all().backward()
    assert grads[x].values()[0] == pytest.approx(1.0001 ** 10_000, rel=1e-9)
    assert len(y.sorted_nodes()) == 10_001  # the Var and 10,000 products


def test_var_set_and_identity():
    v = tl.Var(tl.zeros(3))
    assert isinstance(v, tl.Tensor) and v.is_variable() and v.as_tensor() is v
    v.set(tl.ones(3))
    assert v.values() == [1.0, 1.0, 1.0]
    ptr = v.storage_and_layout()[0].ptr
    v.set(v * 2.0)
    assert v.values() == [2.0] * 3 and v.storage_and_layout()[0].ptr == ptr
    with pytest.raises(tl.ShapeMismatchError):
        v.set(tl.ones(4))
    with pytest.raises(tl.DTypeMismatchError):
        v.set(tl.ones(3, dtype=tl.f64))
    w = tl.Var.from_tensor(tl.arange(0, 4, dtype=tl.f32).reshape((2, 2)).t())
    assert w.is_contiguous() and w.values() == [[0.0, 2.0], [1.0, 3.0]]
    assert not w.detach().is_variable()


def test_graph_keeps_inputs_alive_until_dropped():
    x = tl.Var(np.ones(1000, np.float32))
    h = x.exp()
    ref = weakref.ref(h.storage_and_layout()[0])
    out = (h * 2.0).sum_all()
    del h
    gc.collect()
    assert ref() is not None  # the recorded op holds h
    del out
    gc.collect()
    assert ref() is None
    h = x.exp()
    ref = weakref.ref(h.storage_and_layout()[0])
    out = (h * 2.0).sum_all().detach()
    del h
    gc.collect()
    assert ref() is None  # a detached result keeps nothing behind it
    assert out.values() == pytest.approx(2000 * np.e, rel=1e-5)


# -- gradients of every op, against PyTorch --------------------------------------------

UNARY = {
    "neg": (lambda t: t.neg(), torch.neg),
    "abs": (lambda t: t.abs(), torch.abs),
    "exp": (lambda t: t.exp(), torch.exp),
    "log": (lambda t: (t.abs() + 0.5).log(), lambda t: (t.abs() + 0.5).log()),
    "sin": (lambda t: t.sin(), torch.sin),
    "cos": (lambda t: t.cos(), torch.cos),
    "tanh": (lambda t: t.tanh(), torch.tanh),
    "sqr": (lambda t: t.sqr(), torch.square),
    "sqrt": (lambda t: (t.abs() + 0.1).sqrt(), lambda t: (t.abs() + 0.1).sqrt()),
    "recip": (lambda t: (t.abs() + 0.5).recip(), lambda t: 1.0 / (t.abs() + 0.5)),
    "relu": (lambda t: t.relu(), torch.relu),
    "gelu": (lambda t: t.gelu(), lambda t: F.gelu(t, approximate="tanh")),
    "gelu_erf": (lambda t: t.gelu_erf(), F.gelu),
    "erf": (lambda t: t.erf(), torch.erf),
    "silu": (lambda t: t.silu(), F.silu),
    "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid),
    "affine": (lambda t: t.affine(2.5, -1.0), lambda t: t * 2.5 - 1.0),
    "powf": (lambda t: (t.abs() + 0.5).powf(1.7), lambda t: (t.abs() + 0.5) ** 1.7),
    "elu": (lambda t: t.elu(0.7), lambda t: F.elu(t, 0.7)),
    "clamp": (lambda t: t.clamp(-1.0, 0.8), lambda t: t.clamp(-1.0, 0.8)),
    "scalar ops": (lambda t: (2.0 - t) * 3.0 / 4.0 + 1.0, lambda t: (2.0 - t) * 3.0 / 4.0 + 1.0),
    "rdiv": (lambda t: 2.0 / (t.abs() + 1.0), lambda t: 2.0 / (t.abs() + 1.0)),
    "pow scalar": (lambda t: (t.abs() + 0.5) ** 2.5, lambda t: (t.abs() + 0.5) ** 2.5),
    "rpow": (lambda t: 1.5 ** t, lambda t: 1.5 ** t),
    "maximum scalar": (lambda t: t.maximum(0.3), lambda t: torch.maximum(t, torch.tensor(0.3, dtype=t.dtype))),
    "round_to then detach": (lambda t: t * t.detach(), lambda t: t * t.detach()),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name, device):
    f, g = UNARY[name]
    check_grads(f, g, [rnd(3, 4).astype(np.float32)], device)


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / (b.abs() + 0.5), lambda a, b: a / (b.abs() + 0.5)),
    "maximum": (lambda a, b: a.broadcast_maximum(b), torch.maximum),
    "minimum": (lambda a, b: a.broadcast_minimum(b), torch.minimum),
    "pow": (lambda a, b: (a.abs() + 0.5).broadcast_pow(b), lambda a, b: (a.abs() + 0.5) ** b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3))])
def test_binary_gradients_with_broadcasting(name, shapes, device):
    f, g = BINARY[name]
    check_grads(f, g, [rnd(*shapes[0], seed=1).astype(np.float32), rnd(*shapes[1], seed=2).astype(np.float32)], device)


def test_maximum_ties_split_like_torch():
    check_grads(lambda a, b: a.maximum(b), torch.maximum,
                [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 0.0, 3.0], np.float32)])


POW_AT_BOUNDARIES = {
    "powf 0": (lambda t: t.powf(0.0), lambda t: t ** 0.0),
    "scalar ** 0": (lambda t: t ** 0, lambda t: t ** 0),
    "pow tensors": (lambda a, b: a.pow(b), lambda a, b: a ** b),
    "0 ** t": (lambda t: 0.0 ** t.abs(), lambda t: 0.0 ** t.abs()),
    "-2 ** t": (lambda t: (-2.0) ** t, lambda t: (-2.0) ** t),
    "elu at 0": (lambda t: t.elu(0.7), lambda t: F.elu(t, 0.7)),
}


@pytest.mark.parametrize("name", sorted(POW_AT_BOUNDARIES))
def test_pow_and_elu_gradients_at_zero_match_torch(name, device):
    # PyTorch gives 0, not 0 * inf or 0 * log(0), where the exponent is 0 or the
    # base 0 (with a non-negative exponent); elu's slope at 0 is alpha (candle too).
    f, g = POW_AT_BOUNDARIES[name]
    x = np.array([0.0, 1.0, -2.0, 3.0, 0.0, 2.0], np.float32)
    y = np.array([0.0, 2.0, 3.0, 0.0, 1.5, -1.0], np.float32)
    arrays = [x, y] if name == "pow tensors" else [np.array([0.0, 1.0, 2.0, 3.0], np.float32)]
    if name == "-2 ** t":
        arrays = [np.array([1.0, 2.0, 3.0], np.float32)]
    check_grads(f, g, arrays, device)


VIEW_OPS = {
    "reshape": (lambda t: t.reshape((4, 6)), lambda t: t.reshape(4, 6)),
    "transpose": (lambda t: t.transpose(0, 2), lambda t: t.transpose(0, 2)),
    "t": (lambda t: t.t(), lambda t: t.transpose(-1, -2)),
    "permute": (lambda t: t.permute((2, 0, 1)), lambda t: t.permute(2, 0, 1)),
    "narrow": (lambda t: t.narrow(1, 1, 2), lambda t: t.narrow(1, 1, 2)),
    "index": (lambda t: t[1, :, ::2], lambda t: t[1, :, ::2]),
    "index neg step": (lambda t: t[:, ::-1], lambda t: t.flip(1)),
    "index list": (lambda t: t[:, [2, 0, 2]], lambda t: t[:, [2, 0, 2]]),
    "squeeze": (lambda t: t.narrow(0, 0, 1).squeeze(0), lambda t: t[0:1].squeeze(0)),
    "unsqueeze": (lambda t: t.unsqueeze(1), lambda t: t.unsqueeze(1)),
    "broadcast_as": (lambda t: t[:, :1].broadcast_as((5, 2, 3, 4)), lambda t: t[:, :1].expand(5, 2, 3, 4)),
    "expand": (lambda t: t.unsqueeze(0).expand((3, -1, -1, -1)), lambda t: t.unsqueeze(0).expand(3, -1, -1, -1)),
    "flatten": (lambda t: t.flatten(1, 2), lambda t: t.flatten(1, 2)),
    "copy": (lambda t: t.t().copy(), lambda t: t.transpose(-1, -2).clone()),
    "contiguous": (lambda t: t.t().contiguous(), lambda t: t.transpose(-1, -2).contiguous()),
    "to_dtype": (lambda t: t.to_dtype(tl.f64).sqr().to_dtype(tl.f32), lambda t: t.square()),
    "chunk": (lambda t: t.chunk(2, 2)[1] * 2.0, lambda t: t.chunk(2, 2)[1] * 2.0),
    "cat": (lambda t: tl.cat([t, t.sqr()], 1), lambda t: torch.cat([t, t.square()], 1)),
    "stack": (lambda t: tl.stack([t, t * 2.0], 0), lambda t: torch.stack([t, t * 2.0], 0)),
    "pad_with_zeros": (lambda t: t.pad_with_zeros(2, 1, 2), lambda t: F.pad(t, (1, 2))),
    "pad_with_same": (lambda t: t.pad_with_same(2, 2, 1), lambda t: F.pad(t, (2, 1), mode="replicate")),
    "flip": (lambda t: t.flip([0, 2]), lambda t: t.flip([0, 2])),
    "roll": (lambda t: t.roll(2, 2), lambda t: t.roll(2, 2)),
    "repeat": (lambda t: t.repeat((1, 2, 1)), lambda t: t.repeat(1, 2, 1)),
}


@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_view_and_shape_op_gradients(name, device):
    f, g = VIEW_OPS[name]
    check_grads(f, g, [rnd(2, 3, 4).astype(np.float32)], device)


REDUCE_OPS = {
    "sum_keepdim": (lambda t: t.sum_keepdim((0, 2)), lambda t: t.sum((0, 2), keepdim=True)),
    "sum": (lambda t: t.sum(1), lambda t: t.sum(1)),
    "sum_all": (lambda t: t.sum_all(), lambda t: t.sum()),
    "mean": (lambda t: t.mean((1, 2)), lambda t: t.mean((1, 2))),
    "mean_all": (lambda t: t.mean_all(), lambda t: t.mean()),
    # max(dim) returns (values, indices) as PyTorch (docs/semantics.md, reductions).
    "max": (lambda t: t.max(2).values, lambda t: t.max(2).values),
    "min_keepdim": (lambda t: t.min_keepdim(0), lambda t: t.min(0, keepdim=True).values),
    "max_all": (lambda t: t.max_all(), lambda t: t.max()),
    "min_all": (lambda t: t.min_all(), lambda t: t.min()),
    "var": (lambda t: t.var(1), lambda t: t.var(1)),
    "cumsum": (lambda t: t.cumsum(2), lambda t: t.cumsum(2)),
    "log_sum_exp": (lambda t: t.log_sum_exp((1, 2)), lambda t: t.logsumexp((1, 2))),
    "norm": (lambda t: t.norm(), lambda t: t.norm()),
    "softmax": (lambda t: t.exp().broadcast_div(t.exp().sum_keepdim(2)), lambda t: t.softmax(2)),
    "log_softmax": (lambda t: t.broadcast_sub(t.log_sum_exp(2).unsqueeze(2)), lambda t: t.log_softmax(2)),
}


@pytest.mark.parametrize("name", sorted(REDUCE_OPS))
def test_reduction_gradients(name, device):
    f, g = REDUCE_OPS[name]
    check_grads(f, g, [rnd(2, 3, 4, seed=5).astype(np.float32)], device)


def test_max_routes_to_the_first_arg_position_like_torch():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], np.float32)
    check_grads(lambda t: t.max(1).values, lambda t: t.max(1).values, [x])
    check_grads(lambda t: t.max_all(), lambda t: t.max(), [x])  # ties split evenly


@st.composite
def matmul_case(draw):
    b = draw(st.integers(1, 3))
    m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    return b, m, k, n, ta, tb


@given(case=matmul_case())
@SETTINGS
def test_matmul_gradients_any_layout(case):
    b, m, k, n, ta, tb = case
    a = rnd(b, k, m, seed=1) if ta else rnd(b, m, k, seed=1)
    bb = rnd(b, n, k, seed=2) if tb else rnd(b, k, n, seed=2)

    def f(x, y):
        return (x.transpose(-1, -2) if ta else x).matmul(y.transpose(-1, -2) if tb else y)

    def g(x, y):
        return (x.transpose(-1, -2) if ta else x) @ (y.transpose(-1, -2) if tb else y)

    check_grads(f, g, [a.astype(np.float32), bb.astype(np.float32)])


def test_broadcast_matmul_gradient_sums_the_batch(device):
    check_grads(lambda a, b: a.broadcast_matmul(b), torch.matmul,
                [rnd(3, 2, 4).astype(np.float32), rnd(4, 5, seed=3).astype(np.float32)], device)


def test_index_op_gradients(device):
    x = rnd(4, 5).astype(np.float32)
    ids = np.array([3, 0, 3, 1])
    tid = tl.Tensor(ids.astype(np.int64), device=device)
    check_grads(lambda t: t.index_select(tid, 0), lambda t: t[torch.from_numpy(ids)], [x], device)
    check_grads(lambda t: t.embedding(tid), lambda t: F.embedding(torch.from_numpy(ids), t), [x], device)
    gids = np.random.default_rng(0).integers(0, 5, (4, 3))
    tg = tl.Tensor(gids.astype(np.int64), device=device)
    check_grads(lambda t: t.gather(tg, 1), lambda t: t.gather(1, torch.from_numpy(gids)), [x], device)
    src = rnd(4, 3, seed=4).astype(np.float32)
    check_grads(lambda t, s: t.scatter_add(tg, s, 1), lambda t, s: t.scatter_add(1, torch.from_numpy(gids), s),
                [x, src], device)
    rows = np.array([0, 2])
    tr = tl.Tensor(rows.astype(np.int64), device=device)
    check_grads(lambda t, s: t.index_add(tr, s, 0), lambda t, s: t.index_add(0, torch.from_numpy(rows), s),
                [x, rnd(2, 5, seed=6).astype(np.float32)], device)
    uniq = np.array([[0, 1, 2], [3, 4, 0], [1, 2, 3], [4, 0, 1]])
    tu = tl.Tensor(uniq.astype(np.int64), device=device)
    check_grads(lambda t, s: t.scatter(tu, s, 1), lambda t, s: t.scatter(1, torch.from_numpy(uniq), s),
                [x, src], device)


def test_slice_write_gradients(device):
    x, s = rnd(4, 5).astype(np.float32), rnd(2, 3, seed=1).astype(np.float32)

    def ref(t, u):
        out = t.clone()
        out[1:3, 2:5] = u
        return out

    check_grads(lambda t, u: t.slice_assign([slice(1, 3), slice(2, 5)], u), ref, [x, s], device)

    def ref0(t, u):
        out = t.clone()
        out[2:4] = u
        return out

    check_grads(lambda t, u: t.slice_scatter0(u, 2), ref0, [x, rnd(2, 5, seed=2).astype(np.float32)], device)


def test_where_cond_gradient(device):
    c = (np.random.default_rng(0).random((3, 4)) > 0.5)
    tc = tl.Tensor(c.astype(np.uint8), device=device)
    check_grads(lambda a, b: tc.where_cond(a, b), lambda a, b: torch.where(torch.from_numpy(c), a, b),
                [rnd(3, 4).astype(np.float32), rnd(1, 4, seed=3).astype(np.float32)], device)


@pytest.mark.parametrize("groups,stride,pad,dil", [(1, 1, 0, 1), (1, 2, 1, 1), (2, 1, 1, 2), (1, 3, 2, 1)])
def test_conv_gradients(groups, stride, pad, dil, device):
    x = rnd(2, 4, 9, 8).astype(np.float32)
    k = rnd(6, 4 // groups, 3, 2, seed=1).astype(np.float32)
    check_grads(lambda a, b: a.conv2d(b, padding=pad, stride=stride, dilation=dil, groups=groups),
                lambda a, b: F.conv2d(a, b, padding=pad, stride=stride, dilation=dil, groups=groups),
                [x, k], device, rtol=1e-4, atol=1e-4)
    x1 = rnd(2, 4, 11).astype(np.float32)
    k1 = rnd(2, 4 // groups, 3, seed=2).astype(np.float32)
    check_grads(lambda a, b: a.conv1d(b, padding=pad, stride=stride, dilation=dil, groups=groups),
                lambda a, b: F.conv1d(a, b, padding=pad, stride=stride, dilation=dil, groups=groups),
                [x1, k1], device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,stride,pad,opad", [(1, 1, 0, 0), (1, 2, 1, 1), (2, 2, 0, 1)])
def test_conv_transpose_gradients(groups, stride, pad, opad, device):
    x = rnd(2, 4, 5, 4).astype(np.float32)
    k = rnd(4, 6 // groups, 3, 3, seed=1).astype(np.float32)
    check_grads(lambda a, b: a.conv_transpose2d(b, padding=pad, output_padding=opad, stride=stride, groups=groups),
                lambda a, b: F.conv_transpose2d(a, b, padding=pad, output_padding=opad, stride=stride, groups=groups),
                [x, k], device, rtol=1e-4, atol=1e-4)
    x1 = rnd(2, 4, 6).astype(np.float32)
    k1 = rnd(4, 2 // groups if groups == 1 else 1, 3, seed=2).astype(np.float32)
    check_grads(lambda a, b: a.conv_transpose1d(b, padding=pad, output_padding=opad, stride=stride, groups=groups),
                lambda a, b: F.conv_transpose1d(a, b, padding=pad, output_padding=opad, stride=stride, groups=groups),
                [x1, k1], device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups", [1, 2])
def test_conv_transpose_gradients_with_output_padding_from_dilation(groups, device):
    # Stride 1 and dilation 2 allow output_padding 1 (PyTorch's rule: below
    # max(stride, dilation)); the adjoint convolution then has one position too many.
    x = rnd(2, 4, 5, 4).astype(np.float32)
    k = rnd(4, 4 // groups, 3, 2, seed=1).astype(np.float32)
    check_grads(lambda a, b: a.conv_transpose2d(b, padding=1, output_padding=1, dilation=2, groups=groups),
                lambda a, b: F.conv_transpose2d(a, b, padding=1, output_padding=1, dilation=2, groups=groups),
                [x, k], device, rtol=1e-4, atol=1e-4)
    x1 = rnd(2, 4, 6).astype(np.float32)
    k1 = rnd(4, 2 // groups, 3, seed=2).astype(np.float32)
    check_grads(lambda a, b: a.conv_transpose1d(b, padding=0, output_padding=1, dilation=2, groups=groups),
                lambda a, b: F.conv_transpose1d(a, b, padding=0, output_padding=1, dilation=2, groups=groups),
                [x1, k1], device, rtol=1e-4, atol=1e-4)


def test_pool_and_upsample_gradients(device):
    x = rnd(2, 3, 7, 6).astype(np.float32)
    check_grads(lambda t: t.avg_pool2d(2), lambda t: F.avg_pool2d(t, 2), [x], device)
    check_grads(lambda t: t.avg_pool2d(3, 2), lambda t: F.avg_pool2d(t, 3, 2), [x], device)
    check_grads(lambda t: t.max_pool2d(2), lambda t: F.max_pool2d(t, 2), [x], device)
    check_grads(lambda t: t.max_pool2d(3, 2), lambda t: F.max_pool2d(t, 3, 2), [x], device)
    check_grads(lambda t: t.upsample_nearest2d(11, 13), lambda t: F.interpolate(t, size=(11, 13)), [x], device)
    x1 = rnd(2, 3, 5).astype(np.float32)
    check_grads(lambda t: t.upsample_nearest1d(12), lambda t: F.interpolate(t, size=12), [x1], device)


def test_to_device_gradient(gpu):
    check_grads(lambda t: (t.to_device(gpu).exp() * 2.0).to_device(tl.cpu), lambda t: t.exp() * 2.0,
                [rnd(3, 2).astype(np.float32)])


# -- custom ops ---------------------------------------------------------------------

class Elu(tl.CustomOp1):
    """candle's custom-op example: an ELU with its own backward."""

    def __init__(self, alpha):
        self.alpha = alpha

    def name(self):
        return "elu"

    def cpu_fwd(self, s, layout):
        flat = np.asarray(s)
        x = np.lib.stride_tricks.as_strided(
            flat[layout.start_offset:], layout.shape, [st * flat.itemsize for st in layout.stride])
        out = np.where(x >= 0, x, self.alpha * (np.exp(x) - 1))
        return out.reshape(-1), layout.shape

    def bwd(self, arg, res, grad_res):
        mask = (arg >= 0).to_dtype(arg.dtype)
        return grad_res * (mask + (1.0 - mask) * (res + self.alpha))


def test_custom_op_with_gradient():
    x = rnd(3, 4).astype(np.float32)
    check_grads(lambda t: t.t().apply_op1(Elu(0.5)), lambda t: F.elu(t.transpose(0, 1), 0.5), [x])


class Affine2(tl.CustomOp2):
    def name(self):
        return "weighted_sum"

    def cpu_fwd(self, s1, l1, s2, l2):
        a = np.asarray(s1)[l1.start_offset:l1.start_offset + l1.elem_count()]
        b = np.asarray(s2)[l2.start_offset:l2.start_offset + l2.elem_count()]
        return 2 * a + 3 * b, l1.shape

    def bwd(self, a, b, res, g):
        return g * 2.0, g * 3.0


def test_custom_op2_and_missing_backward():
    a, b = tl.Var([1.0, 2.0]), tl.Var([3.0, 4.0])
    out = a.apply_op2(b, Affine2())
    assert out.values() == [11.0, 16.0]
    grads = out.sum_all().backward()
    assert grads[a].values() == [2.0, 2.0] and grads[b].values() == [3.0, 3.0]

    class NoGrad(tl.CustomOp1):
        def cpu_fwd(self, s, l):
            return np.asarray(s).copy(), l.shape

    y = tl.Var([1.0]).apply_op1(NoGrad())
    with pytest.raises(tl.NotDifferentiableError, match="NoGrad"):
        y.sum_all().backward()


class AddOneInPlace(tl.InplaceOp1):
    def name(self):
        return "add_one"

    def cpu_fwd(self, s, layout):
        flat = np.asarray(s)
        lo, hi = layout.start_offset, layout.start_offset + layout.elem_count()
        flat[lo:hi] += 1


def test_inplace_custom_op():
    t = tl.zeros(4)
    t.narrow(0, 1, 2).inplace_op1(AddOneInPlace())
    assert t.values() == [0.0, 1.0, 1.0, 0.0]


# -- training ------------------------------------------------------------------------

def test_linear_regression_with_sgd_on_var_set():
    rng = np.random.default_rng(0)
    w_true = np.array([[3.0, -2.0]], np.float32)
    b_true = np.array([-1.0], np.float32)
    x = rng.standard_normal((256, 2)).astype(np.float32)
    y = x @ w_true.T + b_true
    w, b = tl.Var(tl.zeros((1, 2))), tl.Var(tl.zeros(1))
    X, Y = tl.Tensor(x), tl.Tensor(y)
    for _ in range(200):
        pred = X.matmul(w.t()).broadcast_add(b)
        loss = (pred - Y).sqr().mean_all()
        grads = loss.backward()
        w.set(w - grads[w] * 0.1)
        b.set(b - grads[b] * 0.1)
    np.testing.assert_allclose(w.numpy(), w_true, atol=1e-3)
    np.testing.assert_allclose(b.numpy(), b_true, atol=1e-3)


# -- custom ops on the GPU ---------------------------------------------------------

ELU_WGSL = """
struct Params { w: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = P.w[0][0];
    let offset = P.w[0][1];
    let alpha = bitcast<f32>(P.w[0][2]);
    let i = gid.x;
    if (i >= n) { return; }
    let v = x[offset + i];
    y[i] = select(alpha * (exp(v) - 1.0), v, v >= 0.0);
}
"""

ADD_ONE_WGSL = """
struct Params { w: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x >= P.w[0][0]) { return; }
    let i = P.w[0][1] + gid.x;
    y[i] = y[i] + 1.0;
}
"""


class GpuElu(Elu):
    def gpu_fwd(self, s, layout):
        from tallow.backends.gpu import run_wgsl

        if not layout.is_contiguous():
            raise NotImplementedError
        n = layout.elem_count()
        (out,) = run_wgsl(ELU_WGSL, inputs=[s], outputs=[(tl.f32, n)],
                          params=[n, layout.start_offset, float(self.alpha)],
                          workgroups=((n + 63) // 64,))
        return out, layout.shape


class GpuAddOne(AddOneInPlace):
    def gpu_fwd(self, s, layout):
        from tallow.backends.gpu import run_wgsl

        n = layout.elem_count()
        run_wgsl(ADD_ONE_WGSL, inplace=[s], params=[n, layout.start_offset], workgroups=((n + 63) // 64,))


def test_custom_op_on_the_gpu_with_gradient(gpu):
    x = rnd(4, 37).astype(np.float32)
    check_grads(lambda t: t.narrow(0, 1, 2).apply_op1(GpuElu(0.5)),
                lambda t: F.elu(t[1:3], 0.5), [x], gpu)
    with pytest.raises(tl.TallowError, match="gpu_fwd"):
        tl.Tensor(x, device=gpu).apply_op1(Elu(0.5))


def test_inplace_custom_op_on_the_gpu(gpu):
    t = tl.zeros(100, device=gpu)
    t.narrow(0, 10, 20).inplace_op1(GpuAddOne())
    expected = np.zeros(100, np.float32)
    expected[10:30] = 1
    np.testing.assert_array_equal(t.numpy(), expected)
    with pytest.raises(tl.TallowError, match="compile"):
        from tallow.backends.gpu import run_wgsl

        run_wgsl("this is not wgsl", inplace=[t.storage_and_layout()[0]])
