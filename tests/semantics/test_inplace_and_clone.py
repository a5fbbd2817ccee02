"""In-place writes as PyTorch: copy-on-write clones, augmented operators that write,
PyTorch's in-place dtype rule, and the version counter behind every in-place write.
Each expression is run in tallow and in PyTorch (the oracle)."""

import gc

import numpy as np
import pytest
import torch

import tallow as tl


def ptr(t):
    return t.storage_and_layout()[0].ptr


def tt(a, device):
    return tl.Tensor(np.asarray(a), device=device)


# -- clone: independent as PyTorch's, free as the seed's table ----------------------------------
def test_clone_is_free_and_independent(device):
    x = tl.arange(0, 6, dtype=tl.f32, device=device)
    y = x.clone()
    assert ptr(y) == ptr(x)  # no allocation at clone time (SPEC section 1)
    y.add_(10)
    tx = torch.arange(0, 6, dtype=torch.float32)
    ty = tx.clone()
    ty.add_(10)
    assert x.values() == tx.tolist() and y.values() == ty.tolist()
    assert ptr(y) != ptr(x)
    x.mul_(2)  # the other side: its buffer is its own by now, nothing copied
    tx.mul_(2)
    assert x.values() == tx.tolist() and y.values() == ty.tolist()


def test_the_original_written_first_leaves_the_clone(device):
    x = tl.arange(0, 4, dtype=tl.f32, device=device)
    y = x.clone()
    x += 1
    assert y.values() == [0, 1, 2, 3] and x.values() == [1, 2, 3, 4]


def test_views_follow_the_writer(device):
    x = tl.arange(0, 6, dtype=tl.f32, device=device).reshape((2, 3))
    y = x.clone()
    row = y[1]            # a view of the clone, taken before the write
    y.add_(100)           # y gets its own buffer; row holds y's storage handle
    assert row.values() == [103, 104, 105]
    row.zero_()           # and writes through to y, not to x
    assert y.values() == [[100, 101, 102], [0, 0, 0]]
    assert x.values() == [[0, 1, 2], [3, 4, 5]]
    xr = x[0]
    x.fill_(7)
    assert xr.values() == [7, 7, 7]


def test_a_clone_of_a_clone_and_dropped_sides(device):
    a = tl.ones((5,), device=device)
    b = a.clone()
    c = b.clone()
    del a
    gc.collect()
    b.mul_(3)
    assert b.values() == [3] * 5 and c.values() == [1] * 5
    del c
    gc.collect()
    b.add_(1)  # now alone: written where it is
    assert b.values() == [4] * 5


def test_clone_survives_many_write_and_drop_rounds(device):
    # A shared GPU buffer goes back to the pool once, when its last holder dies: a
    # double release would hand one buffer to two live tensors.
    keep = []
    for i in range(60):
        t = tl.full((33,), float(i), device=device)
        u = t.clone()
        t += 1
        keep.append((t, u.clone()))
        del u
        if i % 7 == 0:
            gc.collect()
    for i, (t, u) in enumerate(keep):
        assert t.values() == [i + 1.0] * 33
        assert u.values() == [float(i)] * 33


@pytest.mark.parametrize("write", [
    "setitem", "slice_set", "zero_set", "const_set", "copy_", "masked_fill_", "scatter_"])
def test_every_write_copies_on_write(device, write):
    x = tl.arange(0, 6, dtype=tl.f32, device=device).reshape((2, 3))
    y = x.clone()
    ids = tl.tensor([[0, 1, 0]], device=device)
    {
        "setitem": lambda: y.__setitem__((0, 1), 9.0),
        "slice_set": lambda: y.slice_set(tl.ones((1, 3), device=device), 0, 1),
        "zero_set": lambda: y.zero_set(),
        "const_set": lambda: y.const_set(5.0),
        "copy_": lambda: y.copy_(tl.ones((2, 3), device=device)),
        "masked_fill_": lambda: y.masked_fill_(y > 2, -1.0),
        "scatter_": lambda: y.scatter_(0, ids, 8.0),
    }[write]()
    assert x.values() == [[0, 1, 2], [3, 4, 5]]
    assert y.values() != x.values()


def test_var_updates_leave_a_clone_alone(device):
    w = tl.Var([1.0, 2.0], device=device)
    kept = w.clone()
    w.set(tl.tensor([5.0, 6.0], device=device))
    assert kept.values() == [1.0, 2.0]
    snapshot = w.clone()
    opt = tl.nn.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    opt.step()
    assert snapshot.values() == [5.0, 6.0] and w.values() == [0.0, 0.0]


def test_numpy_of_a_clone_is_its_own(device):
    if str(device) != "cpu":
        pytest.skip("numpy() of a GPU tensor is a copy")
    x = tl.zeros((3,))
    arr = x.numpy()        # outside code may write this buffer ...
    y = x.clone()          # ... so the clone takes a copy now
    arr[0] = 5
    assert x.values() == [5, 0, 0] and y.values() == [0, 0, 0]
    z = y.clone()
    zarr = z.numpy()       # handing a clone's buffer out gives it its own first
    zarr[1] = 7
    assert y.values() == [0, 0, 0] and z.values() == [0, 7, 0]


def test_detach_and_same_dtype_keep_plain_sharing(device):
    x = tl.arange(0, 3, dtype=tl.f32, device=device)
    d, s = x.detach(), x.to_dtype(tl.f32)
    x.add_(1)  # PyTorch: detach() shares storage; .to(same dtype) is x itself
    assert d.values() == [1, 2, 3] and s.values() == [1, 2, 3]
    assert x.to(tl.f32) is x


# -- augmented operators write in place, with PyTorch's dtype rule ------------------------------
AUGMENTED = [
    ("+=", lambda a, b: a.__iadd__(b)), ("-=", lambda a, b: a.__isub__(b)),
    ("*=", lambda a, b: a.__imul__(b)), ("/=", lambda a, b: a.__itruediv__(b)),
    ("//=", lambda a, b: a.__ifloordiv__(b)), ("%=", lambda a, b: a.__imod__(b)),
    ("**=", lambda a, b: a.__ipow__(b)), ("&=", lambda a, b: a.__iand__(b)),
    ("|=", lambda a, b: a.__ior__(b)), ("^=", lambda a, b: a.__ixor__(b)),
]
OPERANDS = {  # name -> (tensor values, dtype, operand values or a scalar)
    "f32 scalar": ([1.5, -2.0, 3.0, 4.5], "float32", 2.0),
    "f32 tensor": ([1.5, -2.0, 3.0, 4.5], "float32", [0.5, 4.0, -1.5, 2.0]),
    "i64 scalar": ([7, -5, 3, 12], "int64", 3),
    "i64 tensor": ([7, -5, 3, 12], "int64", [2, 3, -4, 5]),
    "i64 float scalar": ([7, -5, 3, 12], "int64", 1.5),
}


def _run(lib, op, values, dtype, other, device):
    if lib is torch:
        a = torch.tensor(values, dtype=getattr(torch, dtype))
        b = torch.tensor(other, dtype=a.dtype) if isinstance(other, list) else other
    else:
        a = tl.tensor(values, dtype=getattr(tl, dtype), device=device)
        b = tl.tensor(other, dtype=a.dtype, device=device) if isinstance(other, list) else other
    base = a
    view = a[1:]  # the op through a view: the base must see it
    rhs = b[1:] if isinstance(other, list) else b
    try:
        out = op(view, rhs)
    except Exception as e:  # noqa: BLE001  (compare whether both raise)
        return ("raised", type(e).__name__, base.tolist())
    assert out is view
    return ("ok", base.tolist())


@pytest.mark.parametrize("operands", list(OPERANDS), ids=list(OPERANDS))
@pytest.mark.parametrize("aug", AUGMENTED, ids=[a[0] for a in AUGMENTED])
def test_augmented_operators_match_torch(device, aug, operands):
    symbol, op = aug
    values, dtype, other = OPERANDS[operands]
    if symbol == "**=" and dtype == "int64" and isinstance(other, list):
        pytest.skip("integer ** integer tensor is refused (UnsupportedDTypeError), "
                    "docs/differences.md")
    if symbol == "**=" and dtype == "int64" and not isinstance(other, float):
        other = 2
    want = _run(torch, op, values, dtype, other, device)
    got = _run(tl, op, values, dtype, other, device)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    else:
        assert got[2] == values  # nothing written when refused


def test_augmented_assignment_keeps_the_name_bound_to_the_same_tensor(device):
    x = tl.zeros((2, 2), device=device)
    alias = x
    x += 1
    x *= 3
    assert x is alias and alias.values() == [[3, 3], [3, 3]]
    row = x[0]
    row += 1   # the idiom: writes into x
    assert x.values() == [[4, 4], [3, 3]]


@pytest.mark.parametrize("expr", [
    lambda t: t.__itruediv__(2), lambda t: t.__imul__(1.5), lambda t: t.div_(2),
    lambda t: t.add_(0.5), lambda t: t.clamp_(0.5, 1.5)])
def test_a_float_result_is_refused_by_an_integer_tensor_as_torch(device, expr):
    with pytest.raises(RuntimeError):
        expr(torch.tensor([1, 2, 3]))
    t = tl.tensor([1, 2, 3], device=device)
    with pytest.raises(tl.DTypeMismatchError, match="cannot be cast"):
        expr(t)
    assert t.values() == [1, 2, 3]


def test_bool_tensor_takes_only_bool_results():
    with pytest.raises(RuntimeError):
        torch.tensor([True, False]).__iadd__(1)
    m = tl.tensor([1.0, -1.0]) > 0
    if m.dtype is not getattr(tl, "bool"):
        pytest.skip("comparisons return u8 here")
    with pytest.raises(tl.DTypeMismatchError):
        m += 1
    m |= tl.tensor([0.0, 1.0]) > 0
    assert m.tolist() == [True, True]


def test_in_place_results_of_a_lower_precision_are_cast_as_torch(device):
    a = tl.tensor([1.0, 2.0], dtype=tl.f16, device=device)
    a += 0.1
    t = torch.tensor([1.0, 2.0], dtype=torch.float16)
    t += 0.1
    np.testing.assert_array_equal(np.asarray(a.to_dtype(tl.f32).values()), t.float().numpy())


# -- the leaf rule and no_grad ---------------------------------------------------------------------
def test_var_in_place_outside_no_grad_raises_as_torch(device):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w -= 0.1
    v = tl.Var([1.0, 2.0], device=device)
    for write in (lambda: v.__isub__(0.1), lambda: v.add_(1.0), lambda: v.zero_(),
                  lambda: v.copy_(tl.zeros((2,), device=device)), lambda: v.__setitem__(0, 5.0)):
        with pytest.raises(tl.InplaceOnTrackedError, match="no_grad"):
            write()
    assert v.values() == [1.0, 2.0]
    with tl.no_grad():
        v -= 0.5
        v[0] = 9.0
    assert v.values() == [9.0, 1.5] and v.is_variable()


def test_a_write_after_the_forward_makes_backward_raise_as_torch(device):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    y = (w * x).sum()
    x.mul_(10.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    w = tl.Var([1.0, 2.0], device=device)
    x = tl.tensor([3.0, 4.0], device=device)
    y = (w * x).sum()
    x.mul_(10.0)
    with pytest.raises(tl.StaleGraphError):
        y.backward()


WRITES = {
    "add_": lambda x: x.add_(1.0), "sub_": lambda x: x.sub_(1.0), "mul_": lambda x: x.mul_(2.0),
    "div_": lambda x: x.div_(2.0), "pow_": lambda x: x.pow_(2.0),
    "clamp_": lambda x: x.clamp_(0.0, 3.5), "masked_fill_": lambda x: x.masked_fill_(x > 3, 0.0),
    "zero_": lambda x: x.zero_(), "fill_": lambda x: x.fill_(2.0),
    "copy_": lambda x: x.copy_(tl.ones(x.shape, device=x.device)),
    "scatter_": lambda x: x.scatter_(0, tl.tensor([1], device=x.device), 5.0),
    "scatter_add_": lambda x: x.scatter_add_(0, tl.tensor([1], device=x.device),
                                             tl.ones((1,), device=x.device)),
    "index_add_": lambda x: x.index_add_(0, tl.tensor([0], device=x.device),
                                         tl.ones((1,), device=x.device)),
    "setitem": lambda x: x.__setitem__(0, 7.0), "+=": lambda x: x.__iadd__(1.0),
    "*=": lambda x: x.__imul__(3.0), "slice_set": lambda x: x.slice_set(
        tl.ones((1,), device=x.device), 0, 1),
    "view +=": lambda x: x[1:].__iadd__(1.0),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_every_in_place_write_bumps_the_version(device, name):
    w = tl.Var([1.0, 2.0], device=device)
    x = tl.tensor([3.0, 4.0], device=device)
    y = (w * x).sum()
    WRITES[name](x)
    with pytest.raises(tl.StaleGraphError):
        y.backward()


def test_a_write_to_a_clone_leaves_the_graph_of_the_original(device):
    w = tl.Var([1.0, 2.0], device=device)
    x = tl.tensor([3.0, 4.0], device=device)
    y = (w * x).sum()
    x.clone().mul_(10.0)  # PyTorch: the clone is another tensor; x is unchanged
    assert y.backward()[w].values() == [3.0, 4.0]


# -- in place on a tensor computed from a Var: the graph follows, as in PyTorch -------------------
GRAPH_WRITES = [
    ("add_", lambda h, o: h.add_(o), True),
    ("+= tensor", lambda h, o: h.__iadd__(o), True),
    ("-= scalar", lambda h, o: h.__isub__(0.5), False),
    ("*= scalar", lambda h, o: h.__imul__(3.0), False),
    ("mul_ tensor", lambda h, o: h.mul_(o), True),
    ("clamp_", lambda h, o: h.clamp_(-1.0, 1.5), False),
    ("masked_fill_", lambda h, o: h.masked_fill_(o > 0.2, 0.0), True),
    ("copy_", lambda h, o: h.copy_(o * 2), True),
    ("two writes", lambda h, o: h.add_(o).mul_(2.0), True),
]


@pytest.mark.parametrize("case", GRAPH_WRITES, ids=[c[0] for c in GRAPH_WRITES])
def test_in_place_on_a_tracked_result_gives_torch_gradients(device, case):
    _, write, _ = case
    rng = np.random.default_rng(3)
    wn, xn, on = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))

    def run(lib):
        if lib is torch:
            w = torch.tensor(wn, requires_grad=True)
            o = torch.tensor(on, requires_grad=True)
            x = torch.tensor(xn)
        else:
            w, o, x = tl.Var(wn, device=device), tl.Var(on, device=device), tt(xn, device)
        h = w * x
        write(h, o)
        loss = (h * h).sum() + w.sum()
        if lib is torch:
            loss.backward()
            return loss.item(), w.grad.numpy(), None if o.grad is None else o.grad.numpy()
        g = loss.backward()
        return loss.item(), g[w].numpy(), g.get(o).numpy() if g.get(o) is not None else None

    want, got = run(torch), run(tl)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    if want[2] is None or not np.any(want[2]):
        assert got[2] is None or not np.any(got[2])
    else:
        np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)


def test_a_plain_tensor_written_with_a_var_joins_the_graph(device):
    tw = torch.tensor([1.0, -2.0], requires_grad=True)
    tx = torch.tensor([3.0, 4.0])
    tx.add_(tw * 2)
    (tx * tx).sum().backward()
    w = tl.Var([1.0, -2.0], device=device)
    x = tl.tensor([3.0, 4.0], device=device)
    x.add_(w * 2)
    assert x.track_op()
    np.testing.assert_allclose((x * x).sum().backward()[w].numpy(), tw.grad.numpy())


def test_saved_values_changed_in_place_raise_as_torch(device):
    tw = torch.ones(3, requires_grad=True)
    th = tw * 2
    th *= th   # torch: the other factor is the written tensor itself
    with pytest.raises(RuntimeError):
        th.sum().backward()
    w = tl.Var([1.0, 1.0, 1.0], device=device)
    h = w * 2
    h *= h
    with pytest.raises(tl.StaleGraphError):
        h.sum().backward()


def test_a_write_into_a_view_of_a_var_is_refused(device):
    # PyTorch: "a view of a leaf Variable that requires grad is being used in an
    # in-place operation". Writes into views of computed tensors are recorded
    # (test_tracked_writes.py).
    w = tl.Var([[1.0, 2.0], [3.0, 4.0]], device=device)
    tw = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        tw[0] += 1
    with pytest.raises(tl.InplaceOnTrackedError, match="Var"):
        w[0] += 1
    with pytest.raises(tl.InplaceOnTrackedError, match="Var"):
        w[0] = 1.0
    assert w.values() == [[1.0, 2.0], [3.0, 4.0]]


def _row_plus(x):
    x[1] += 1


def _column_times(x):
    x[:, 0] *= 2


def _slice_minus(x):
    x[0, 1:] -= 5


def _repeated_ids_plus(x):
    x[[0, 0, 2]] += 1


INDEXED_UPDATES = {"x[1] += 1": _row_plus, "x[:, 0] *= 2": _column_times,
                   "x[0, 1:] -= 5": _slice_minus, "x[[0, 0, 2]] += 1": _repeated_ids_plus}


@pytest.mark.parametrize("name", list(INDEXED_UPDATES))
def test_indexed_augmented_assignment_matches_torch(device, name):
    # Python runs ``x[i] op= v`` as a get, the in-place op, and a set; repeated
    # advanced indices add once (NumPy's and PyTorch's last-write rule).
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = torch.from_numpy(values.copy())
    INDEXED_UPDATES[name](want)
    got = tl.Tensor(values.copy(), device=device)
    INDEXED_UPDATES[name](got)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_clone_and_write_inside_a_compiled_function(device):
    # While a compiled function records, a clone copies where the trace sees it, so
    # every replay clones the new input.
    def f(x):
        y = x.clone()
        y.add_(1.0)
        y *= 2
        return y

    compiled = tl.compile(f)
    for v in (1.0, 5.0, -3.0):
        x = tl.tensor([v, v + 1], device=device)
        assert compiled(x).values() == [(v + 1) * 2, (v + 2) * 2]
        assert x.values() == [v, v + 1]
    assert compiled.stats()["replays"] == 2


UNARY_NAMES = ["abs_", "neg_", "exp_", "log_", "sin_", "cos_", "tanh_", "sqrt_", "relu_",
               "sigmoid_", "floor_", "ceil_", "sign_", "erf_", "reciprocal_", "square_"]


@pytest.mark.parametrize("name", UNARY_NAMES)
def test_unary_in_place_methods_match_torch(device, name):
    values = np.array([[0.5, -1.5, 2.25], [3.0, -0.75, 1.5]], np.float32)
    if name in ("log_", "sqrt_"):
        values = np.abs(values)
    want = torch.from_numpy(values.copy())
    wrow = want[1]
    assert getattr(wrow, name)() is wrow
    got = tl.Tensor(values.copy(), device=device)
    grow = got[1]
    assert getattr(grow, name)() is grow   # through a view: the base sees it
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
