"""Reverse-mode autograd over the recorded op graph, written with Tensor ops only
(so it runs unchanged on every backend).

``sorted_nodes`` walks from the root to every tracked tensor that depends on a
Var (iteratively: 10,000-op chains do not hit the recursion limit), in
backward's order. ``backward`` seeds the root with ones and applies one rule per
op, accumulating into a ``GradStore``; the gradients of intermediate nodes are
dropped as soon as they are used, as candle does.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from .creation import arange, cat, full, ones, ones_like, stack, tensor, zeros, zeros_like
from .errors import NoGradientError, NotDifferentiableError
from .grad_mode import GRAD_MODE
from .layout import Layout
from .tensor_class import Tensor
from .versions import check_unchanged


class GradStore:
    """Gradients keyed by tensor id."""

    def __init__(self):
        self._grads = {}
        self._tensors = {}

    def get_id(self, tid):
        return self._grads.get(tid)

    def get(self, t):
        return self._grads.get(t.id)

    def __getitem__(self, t):
        g = self._grads.get(t.id)
        if g is None:
            raise NoGradientError(_why_no_gradient(t))
        return g

    def __contains__(self, t):
        return t.id in self._grads

    def __len__(self):
        return len(self._grads)

    def insert(self, t, grad):
        self._grads[t.id] = grad
        self._tensors[t.id] = t

    def remove(self, t):
        self._tensors.pop(t.id, None)
        return self._grads.pop(t.id, None)

    def get_ids(self):
        return list(self._grads)

    def items(self):
        return [(self._tensors[i], g) for i, g in self._grads.items()]

    def __add__(self, other):
        """The sum of two stores (gradient accumulation over micro-batches): a tensor's
        gradients are added where both have one; a store's own entries are kept as they
        are where only it has one. Neither operand changes."""
        if not isinstance(other, GradStore):
            return NotImplemented
        out = GradStore()
        for store in (self, other):
            for tid, g in store._grads.items():
                out._accumulate(store._tensors[tid], g)
        return out

    def __iadd__(self, other):
        if not isinstance(other, GradStore):
            return NotImplemented
        for tid, g in other._grads.items():
            self._accumulate(other._tensors[tid], g)
        return self

    def _accumulate(self, t, grad):
        prev = self._grads.get(t.id)
        if prev is None:
            self._grads[t.id] = grad
            self._tensors[t.id] = t
        else:
            self._grads[t.id] = prev + grad


def _why_no_gradient(t) -> str:
    what = f"tensor {t.id} (shape {t.shape}, {t.dtype}{', a Var' if t.is_variable() else ''})"
    if t.dtype.is_int:
        return (f"no gradient for {what}: integer tensors carry no gradient (use a float "
                "dtype for values to differentiate)")
    return (f"no gradient for {what}: the differentiated value does not depend on it, or only "
            "through an integer dtype (a cast to an integer type, argmax, a comparison), which "
            "carries no gradient")


def sorted_nodes(root):
    """Tracked tensors behind ``root`` that depend on a Var, root first."""
    seen = {}  # id -> depends on a variable
    order = []
    # A node to expand, or _FINISH above a node whose args are all done (a marker
    # rather than a (node, flag) pair: no tuple per visit).
    stack = [root]
    pop, push = stack.pop, stack.append
    get = seen.get
    while stack:
        node = pop()
        if node is _FINISH:
            node = pop()
            for a in node._op.args:
                if get(a._id, False):
                    seen[node._id] = True
                    order.append(node)
                    break
            continue
        nid = node._id
        if nid in seen:
            continue
        op = node._op
        if op is None:
            # A Var (tracked with no op), or a plain tensor.
            seen[nid] = node._track
            if node._track:
                order.append(node)
            continue
        if node._storage.dtype.is_int:
            seen[nid] = False
            continue
        seen[nid] = False  # provisional, overwritten after the args
        push(node)
        push(_FINISH)
        for a in reversed(op.args):
            if a._id not in seen:
                push(a)
    order.reverse()
    return order


_FINISH = object()


def backward(root):
    if not root._track:
        raise NotDifferentiableError(
            "backward: this tensor does not depend on any Var (its ops were not recorded)"
        )
    grads = GradStore()
    # The store's dicts are used directly below: this loop runs once per node.
    store, tensors = grads._grads, grads._tensors
    rop = root._op
    if rop is not None and rop.name == "cross_entropy":
        # A fused loss at the root: its input's gradient is the one the forward kernel
        # made, times a seed of one (exactly itself), so neither seed nor product is made.
        store[root._id] = None
        seeded = {root._id: [rop.params]}
    else:
        store[root._id] = ones_like(root.detach())
        seeded = None
    tensors[root._id] = root
    wrap = Tensor._wrap
    for node in sorted_nodes(root):
        op = node._op
        if op is None:  # a Var: its gradient stays in the store
            continue
        nid = node._id
        grad = store.pop(nid, None)
        if grad is None and (seeded is None or nid not in seeded):
            continue
        tensors.pop(nid, None)
        check_unchanged(op)
        if grad is None:
            outs = seeded.pop(nid)
        else:
            rule = RULES.get(op.name)
            if rule is None:
                raise NotDifferentiableError(f"backward: the op '{op.name}' has no gradient")
            # The rules compute with untracked views of the inputs and output (nothing
            # they do is recorded).
            args = [wrap(a._storage, a._layout) if a._track else a for a in op.args]
            outs = rule(op, args, wrap(node._storage, node._layout), grad)
        for arg, g in zip(op.args, outs):
            if g is None or arg._storage.dtype.is_int:
                continue
            if g._layout.shape != arg._layout.shape:
                raise RuntimeError(
                    f"backward of {op.name}: gradient shape {g.shape} for an input of shape {arg.shape}"
                )
            aid = arg._id
            prev = store.get(aid)
            if prev is None:
                store[aid] = g
                tensors[aid] = arg
            else:
                store[aid] = prev + g
    # PyTorch's ``.grad``: each Var reached also sums its gradient there.
    for aid, t in (tensors.items() if GRAD_MODE.fill_grad else ()):
        g = store.get(aid)
        if g is not None and t.is_variable():
            t.accumulate_grad(g)
    return grads


# -- rules: rule(op, args, out, grad) -> one gradient (or None) per arg ----------------

RULES = {}
_wrap = Tensor._wrap
_contig = Layout.contiguous_of


def rule(*names):
    def register(f):
        for n in names:
            RULES[n] = f
        return f
    return register


def _like(t, value):
    return full((), value, dtype=t.dtype, device=t.device)


def _mask(cond, like):
    return cond.to_dtype(like.dtype)


@rule("neg")
def _neg(op, a, out, g):
    return [g.neg()]


@rule("abs")
def _abs(op, a, out, g):
    return [g * a[0].sign()]


@rule("exp")
def _exp(op, a, out, g):
    return [g * out]


@rule("log")
def _log(op, a, out, g):
    return [g / a[0]]


@rule("sin")
def _sin(op, a, out, g):
    return [g * a[0].cos()]


@rule("cos")
def _cos(op, a, out, g):
    return [-(g * a[0].sin())]


@rule("tanh")
def _tanh(op, a, out, g):
    return [g * (1.0 - out.sqr())]


@rule("sqr")
def _sqr(op, a, out, g):
    return [g * a[0] * 2.0]


@rule("sqrt")
def _sqrt(op, a, out, g):
    return [g / (out * 2.0)]


@rule("recip")
def _recip(op, a, out, g):
    return [-(g * out.sqr())]


@rule("relu")
def _relu(op, a, out, g):
    x = a[0]
    try:  # one backend kernel where there is one (the same products)
        s = x._storage.relu_backward(x._layout, g._storage, g._layout)
    except NotImplementedError:
        return [g * _mask(x > 0, g)]
    return [Tensor._wrap(s, Layout.contiguous_of(x._layout.shape))]


@rule("gelu")
def _gelu(op, a, out, g):
    x = a[0]
    c = math.sqrt(2.0 / math.pi)
    x2 = x.sqr()
    t = ((x2 * 0.044715 + 1.0) * x * c).tanh()
    dt_ = (x2 * (3.0 * 0.044715) + 1.0) * c
    d = (t + 1.0) * 0.5 + x * 0.5 * (1.0 - t.sqr()) * dt_
    return [g * d]


@rule("gelu_erf")
def _gelu_erf(op, a, out, g):
    x = a[0]
    cdf = ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0) * 0.5
    pdf = (x.sqr() * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))
    return [g * (cdf + x * pdf)]


@rule("erf")
def _erf(op, a, out, g):
    return [g * (a[0].sqr().neg().exp() * (2.0 / math.sqrt(math.pi)))]


@rule("silu")
def _silu(op, a, out, g):
    x = a[0]
    s = x.sigmoid()
    return [g * s * (x * (1.0 - s) + 1.0)]


@rule("sigmoid")
def _sigmoid(op, a, out, g):
    return [g * out * (1.0 - out)]


@rule("floor", "ceil", "round", "sign")
def _step(op, a, out, g):
    raise NotDifferentiableError(
        f"backward: '{op.name}' is piecewise constant and has no useful gradient; "
        "detach its input if this is intended"
    )


@rule("affine")
def _affine(op, a, out, g):
    mul, _ = op.params
    return [g * mul]


def _powf_grad(x, e, g):
    # x ** 0 is constant: PyTorch's 0, not 0 * 0 ** -1 = nan at x = 0.
    if e == 0:
        return zeros_like(g)
    return g * x.powf(e - 1.0) * e


@rule("powf")
def _powf(op, a, out, g):
    return [_powf_grad(a[0], op.params, g)]


@rule("elu")
def _elu(op, a, out, g):
    alpha = op.params
    x = a[0]
    neg = _mask(x <= 0, g)  # the slope at 0 is alpha, as in PyTorch and candle
    return [g * (neg * (out + alpha) + (1.0 - neg))]


@rule("clamp")
def _clamp(op, a, out, g):
    lo, hi = op.params
    x = a[0]
    m = _like(x, 1.0).broadcast_as(x.shape)
    if lo is not None:
        m = m * _mask(x >= lo, g)
    if hi is not None:
        m = m * _mask(x <= hi, g)
    return [g * m]


# -- binary ------------------------------------------------------------------------------

@rule("add")
def _add(op, a, out, g):
    return [g, g]


@rule("sub")
def _sub(op, a, out, g):
    return [g, g.neg()]


@rule("mul")
def _mul(op, a, out, g):
    return [g * a[1], g * a[0]]


@rule("div")
def _div(op, a, out, g):
    return [g / a[1], -(g * a[0] / a[1].sqr())]


@rule("rem")
def _rem(op, a, out, g):
    # a % b = a - b * floor(a / b): 1 for a, -floor(a / b) for b (as PyTorch).
    return [g, -(g * (a[0] // a[1]))]


@rule("maximum", "minimum")
def _extreme(op, a, out, g):
    # Ties split the gradient in half, as PyTorch does.
    ml = _mask(a[0] == out, g)
    mr = _mask(a[1] == out, g)
    share = g / (ml + mr)
    return [share * ml, share * mr]


@rule("pow")
def _pow(op, a, out, g):
    x, y = a
    zero = _like(g, 0.0)
    # As PyTorch: no x-gradient where y == 0 (not 0 * 0 ** -1), and no y-gradient
    # where x == 0 and y >= 0 (not 0 * log 0).
    with np.errstate(invalid="ignore", divide="ignore"):  # the masked-out values
        gx = y.eq(0.0).where_cond(zero, g * y * x.pow(y - 1.0))
        gy = (x.eq(0.0) * y.ge(0.0)).where_cond(zero, g * out * x.log())
    return [gx, gy]


@rule("scalar_add")
def _s_add(op, a, out, g):
    return [g]


@rule("scalar_sub")
def _s_sub(op, a, out, g):
    _, left = op.params
    return [g.neg() if left else g]


@rule("scalar_mul")
def _s_mul(op, a, out, g):
    return [g * op.params[0]]


@rule("scalar_div")
def _s_div(op, a, out, g):
    v, left = op.params
    if left:  # v / x
        return [-(g * v / a[0].sqr())]
    return [g * (1.0 / v)]


@rule("scalar_rem")
def _s_rem(op, a, out, g):
    v, left = op.params
    if left:  # v % x
        return [-(g * (v // a[0]))]
    return [g]


@rule("scalar_floor_div", "scalar_bit_and", "scalar_bit_or", "scalar_bit_xor")
def _s_stepwise(op, a, out, g):
    raise NotDifferentiableError(
        f"backward: '{op.name[7:]}' has no gradient (it is piecewise constant or bitwise)")


@rule("scalar_pow")
def _s_pow(op, a, out, g):
    v, left = op.params
    if not left:
        return [_powf_grad(a[0], v, g)]
    # v ** x: d/dx = v ** x * log v; log 0 = -inf and log of a negative is nan (as
    # the tensor op would give), and 0 ** x with x >= 0 has no gradient (PyTorch).
    log_v = math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan)
    with np.errstate(invalid="ignore"):  # inf * 0 where the mask below applies
        gx = g * out * log_v
    if v == 0:
        gx = a[0].ge(0.0).where_cond(_like(g, 0.0), gx)
    return [gx]


@rule("scalar_maximum", "scalar_minimum")
def _s_extreme(op, a, out, g):
    x = a[0]
    v, _ = op.params
    win = (x > v) if op.name == "scalar_maximum" else (x < v)
    m = _mask(win, g) + _mask(x == v, g) * 0.5
    return [g * m]


@rule("where_cond")
def _where(op, a, out, g):
    c = a[0]
    z = _like(g, 0.0)
    return [None, c.where_cond(g, z), c.where_cond(z, g)]


# -- reductions -------------------------------------------------------------------------

@rule("sum_keepdim")
def _sum(op, a, out, g):
    return [g.broadcast_as(a[0].shape)]


@rule("max_keepdim", "min_keepdim")
def _max(op, a, out, g):
    x = a[0]
    dims = op.params
    if len(dims) == 1:
        # Route to the first arg position (PyTorch's max(dim) / min(dim)).
        d = dims[0]
        idx = x.argmax_keepdim(d) if op.name == "max_keepdim" else x.argmin_keepdim(d)
        return [zeros_like(x).scatter_add(idx, g, d)]
    # Over several dims: split evenly among equal extremes (PyTorch's max()).
    m = _mask(x == out.broadcast_as(x.shape), g)
    count = m.sum_keepdim(dims)
    return [m * (g / count).broadcast_as(x.shape)]


@rule("cumsum")
def _cumsum(op, a, out, g):
    d = op.params
    return [g.flip(d).cumsum(d).flip(d)]


def _swapped(t, d1, d2):
    """The untracked view of ``t`` with dims ``d1`` and ``d2`` (non-negative) swapped:
    ``t.transpose(d1, d2)`` for the rules, whose tensors record nothing, without
    its argument checks."""
    return _wrap(t._storage, t._layout.transpose_cached(d1, d2))


def _mT(t):
    """``t.transpose(-1, -2)`` for the rules (a rank >= 2 tensor)."""
    r = len(t._layout.shape)
    return _wrap(t._storage, t._layout.transpose_cached(r - 2, r - 1))


@rule("matmul")
def _matmul(op, a, out, g):
    x, y = a
    # A side that needs no gradient (a batch of data, say) costs no product.
    gx = g.matmul(_mT(y)) if op.args[0]._track else None
    gy = None
    yarg = op.args[1]
    if yarg._track:
        yop = yarg._op
        if yop is not None and yop.name == "transpose" and len(x._layout.shape) == 2:
            # ``x @ w.t()`` (every Linear layer): the gradient of ``w.t()`` computed as
            # ``(g^T x)^T``, so the transpose rule hands ``w`` a row-major ``g^T x``
            # (no copy of a column-major gradient in the update that follows).
            gy = _swapped(_swapped(g, 0, 1).matmul(x), 0, 1)
        else:
            gy = _mT(x).matmul(g)
    return [gx, gy]


@rule("linear")
def _linear(op, a, out, g):
    # y = x @ w.T (+ b), x (m, k), w (n, k): the three gradients in one backend call
    # (two products and a column sum, as PyTorch's addmm), each row-major as it comes.
    x, w = a[0], a[1]
    tracked = op.args
    with_bias = len(a) == 3
    wanted = (tracked[0]._track, tracked[1]._track, with_bias and tracked[2]._track)
    gx, gw, gb = x._storage.linear_backward(x._layout, w._storage, w._layout,
                                            g._storage, g._layout, wanted)
    (m, k), n = x._layout.shape, w._layout.shape[0]
    wrap, contig = Tensor._wrap, Layout.contiguous_of
    grads = [None if gx is None else wrap(gx, contig((m, k))),
             None if gw is None else wrap(gw, contig((n, k)))]
    if with_bias:
        grads.append(None if gb is None else wrap(gb, contig((n,))))
    return grads


@rule("log_softmax")
def _log_softmax(op, a, out, g):
    d = op.params
    return [g.broadcast_sub(out.exp().broadcast_mul(g.sum_keepdim(d)))]


@rule("cross_entropy")
def _cross_entropy(op, a, out, g):
    # The gradient wrt the logits was made by the forward kernel; g is the loss's.
    return [op.params.broadcast_mul(g)]


@rule("nll")
def _nll(op, a, out, g):
    # loss = sum_i coef_i * x[i, ids_i]: the gradient is coef * g at each picked entry.
    ids, coef = op.params
    return [zeros_like(a[0]).scatter_add(ids, coef.broadcast_mul(g), 1)]


# -- moves and copies -------------------------------------------------------------------

@rule("to_dtype")
def _to_dtype(op, a, out, g):
    return [g.to_dtype(op.params)]


@rule("to_device")
def _to_device(op, a, out, g):
    return [g.to_device(op.params)]


@rule("contiguous", "copy", "force_contiguous")
def _copy(op, a, out, g):
    return [g]


# -- views ------------------------------------------------------------------------------

@rule("reshape")
def _reshape(op, a, out, g):
    return [g.reshape(op.params)]


@rule("transpose")
def _transpose(op, a, out, g):
    d1, d2 = op.params  # (normalised when recorded)
    return [_swapped(g, d1, d2)]


@rule("permute")
def _permute(op, a, out, g):
    dims = op.params
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return [g.permute(tuple(inverse))]


@rule("narrow")
def _narrow(op, a, out, g):
    d, start, length = op.params
    size = a[0].shape[d]
    return [g.pad_with_zeros(d, start, size - start - length)]


@rule("slice_step")
def _slice_step(op, a, out, g):
    d, start, length, step = op.params
    ids = arange(start, start + length * step, step, dtype=dt.i64, device=g.device) if length else None
    z = zeros_like(a[0])
    return [z if ids is None else z.index_add(ids, g, d)]


@rule("broadcast_as")
def _broadcast(op, a, out, g):
    # Summed back over the added leading dims, then over the stretched size-1 dims.
    # Each sum's result is contiguous, so dropping the leading dims is a new layout
    # over the same storage (``g.sum(dims)``'s values, without its squeeze op).
    src = op.params
    shape = g._layout.shape
    extra = len(shape) - len(src)
    if extra:
        g = g._reduce("sum", tuple(range(extra)), "sum_keepdim")
        g = _wrap(g._storage, _contig(shape[extra:]))
    dims = tuple(i for i, (s, o) in enumerate(zip(src, shape[extra:])) if s == 1 and o != 1)
    if dims:
        g = g.sum_keepdim(dims)
    return [g]


# -- indexing ---------------------------------------------------------------------------

@rule("index_select")
def _index_select(op, a, out, g):
    x, ids = a
    return [zeros_like(x).index_add(ids, g, op.params), None]


@rule("gather")
def _gather(op, a, out, g):
    x, ids = a
    return [zeros_like(x).scatter_add(ids, g, op.params), None]


@rule("scatter_add")
def _scatter_add(op, a, out, g):
    x, ids, src = a
    d = op.params
    return [g, None, _fit(g.gather(ids, d), src)]


@rule("scatter")
def _scatter(op, a, out, g):
    x, ids, src = a
    d = op.params
    return [g.scatter(ids, zeros_like(src), d), None, _fit(g.gather(ids, d), src)]


def _fit(g, like):
    """Pad a gradient computed over the ids' extent to the source's shape."""
    for d, (n, m) in enumerate(zip(g.shape, like.shape)):
        if n < m:
            g = g.pad_with_zeros(d, 0, m - n)
    return g


@rule("index_add")
def _index_add(op, a, out, g):
    x, ids, src = a
    return [g, None, g.index_select(ids, op.params)]


@rule("slice_scatter")
def _slice_scatter(op, a, out, g):
    x, src = a
    d, start = op.params
    return [g.slice_scatter(zeros_like(src), d, start), g.narrow(d, start, src.shape[d])]


@rule("slice_assign")
def _slice_assign(op, a, out, g):
    x, src = a
    starts, lens = op.params
    ranges = [(s, s + n) for s, n in zip(starts, lens)]
    region = g
    for d, (s, n) in enumerate(zip(starts, lens)):
        region = region.narrow(d, s, n)
    return [g.slice_assign(ranges, zeros_like(src)), region]


@rule("cat")
def _cat(op, a, out, g):
    d, sizes = op.params
    outs, offset = [], 0
    for n in sizes:
        outs.append(g.narrow(d, offset, n))
        offset += n
    return outs


# -- convolutions and pooling -------------------------------------------------------------

def _group_split(t, groups, dim):
    return t.chunk(groups, dim) if groups > 1 else [t]


def _fast(shape, storage_call):
    """A backend's optional backward kernel as a Tensor, or None where it has none."""
    try:
        storage = storage_call()
    except NotImplementedError:
        return None
    return Tensor._wrap(storage, Layout.contiguous_of(tuple(shape)))


def _conv_weight_grad(x, g, k_shape, pad, stride, dil, groups, nd):
    """dL/dkernel of a convolution: the backend's im2col product where it has one, else
    a convolution of the input with the output grad."""
    if nd == 1:
        x2, g2 = x.unsqueeze(2), g.unsqueeze(2)
        args = (tuple(k_shape[:2]) + (1, k_shape[2]), (0, pad), (1, stride), (1, dil))
    else:
        x2, g2, args = x, g, (tuple(k_shape), pad, stride, dil)
    fast = _fast(args[0], lambda: x2._storage.conv2d_kernel_grad(
        x2._layout, g2._storage, g2._layout, *args, groups))
    if fast is not None:
        return fast.reshape(tuple(k_shape)) if nd == 1 else fast
    outs = []
    for xg, gg in zip(_group_split(x, groups, 1), _group_split(g, groups, 1)):
        xt = xg.transpose(0, 1)
        gt = gg.transpose(0, 1)
        if nd == 1:
            w = xt.conv1d(gt, padding=pad, stride=dil, dilation=stride)
        else:
            w = xt.conv2d(gt, padding=pad, stride=dil, dilation=stride)
        w = w.transpose(0, 1)
        for i in range(nd):
            w = w.narrow(2 + i, 0, k_shape[2 + i])
        outs.append(w)
    return cat(outs, 0) if len(outs) > 1 else outs[0]


def _shared_grad(op, g):
    """The output gradient, made contiguous once when both the input and the kernel
    gradient read it (a broadcast one, from ``sum``, was copied by each: 3.2 MB twice
    for a batch-64 first layer's step)."""
    if op.args[0]._track and op.args[1]._track and not g.is_contiguous():
        return g.contiguous()
    return g


@rule("conv1d")
def _conv1d(op, a, out, g):
    x, k = a
    g = _shared_grad(op, g)
    pad, stride, dil, groups = op.params
    n = x.shape[2]
    opad = (n + 2 * pad - dil * (k.shape[2] - 1) - 1) % stride
    gx = None
    if op.args[0]._track:  # an input image that needs no gradient costs nothing
        gx = g.conv_transpose1d(k, padding=pad, output_padding=opad, stride=stride,
                                dilation=dil, groups=groups)
    gk = _conv_weight_grad(x, g, k.shape, pad, stride, dil, groups, 1) if op.args[1]._track else None
    return [gx, gk]


@rule("conv2d")
def _conv2d(op, a, out, g):
    x, k = a
    g = _shared_grad(op, g)
    pad, stride, dil, groups = op.params
    opad = tuple(
        (x.shape[2 + i] + 2 * pad[i] - dil[i] * (k.shape[2 + i] - 1) - 1) % stride[i]
        for i in range(2)
    )
    gx = None
    if op.args[0]._track:  # an input image that needs no gradient costs nothing
        gx = g.conv_transpose2d(k, padding=pad, output_padding=opad, stride=stride,
                                dilation=dil, groups=groups)
    gk = _conv_weight_grad(x, g, k.shape, pad, stride, dil, groups, 2) if op.args[1]._track else None
    return [gx, gk]


def _fit_input(gx, x):
    """Trim the adjoint convolution to the input's size: with stride 1 an output_padding
    (allowed up to the dilation) gives the output extra positions that map past it."""
    for i in range(2, x.rank):
        if gx.shape[i] > x.shape[i]:
            gx = gx.narrow(i, 0, x.shape[i])
    return gx


@rule("conv_transpose1d")
def _conv_t1d(op, a, out, g):
    x, k = a
    g = _shared_grad(op, g)
    pad, opad, stride, dil, groups = op.params
    gx = _fit_input(g.conv1d(k, padding=pad, stride=stride, dilation=dil, groups=groups), x)
    # The adjoint's weight gradient comes out as (c_in, c_out / groups, k): the kernel's own layout.
    return [gx, _conv_weight_grad(g, x, k.shape, pad, stride, dil, groups, 1)]


@rule("conv_transpose2d")
def _conv_t2d(op, a, out, g):
    x, k = a
    g = _shared_grad(op, g)
    pad, opad, stride, dil, groups = op.params
    gx = _fit_input(g.conv2d(k, padding=pad, stride=stride, dilation=dil, groups=groups), x)
    return [gx, _conv_weight_grad(g, x, k.shape, pad, stride, dil, groups, 2)]


@rule("avg_pool2d")
def _avg_pool(op, a, out, g):
    x = a[0]
    (kh, kw), (sh, sw) = op.params
    fast = _fast(x.shape, lambda: g._storage.avg_pool2d_backward(
        g._layout, x.shape, (kh, kw), (sh, sw)))
    if fast is not None:
        return [fast]
    c = x.shape[1]
    kern = ones((c, 1, kh, kw), dtype=g.dtype, device=g.device) * (1.0 / (kh * kw))
    gx = g.conv_transpose2d(kern, stride=(sh, sw), groups=c)
    h, w = x.shape[2:]
    return [gx.pad_with_zeros(2, 0, h - gx.shape[2]).pad_with_zeros(3, 0, w - gx.shape[3])]


@rule("max_pool2d")
def _max_pool(op, a, out, g):
    x = a[0]
    (kh, kw), (sh, sw) = op.params
    fast = _fast(x.shape, lambda: x._storage.max_pool2d_backward(
        x._layout, g._storage, g._layout, (kh, kw), (sh, sw)))
    if fast is not None:
        return [fast]
    b, c, h, w = x.shape
    oh, ow = out.shape[2:]
    cands = []
    for i in range(kh):
        for j in range(kw):
            cands.append(x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw])
    k = stack(cands, 4).argmax(4).to_dtype(dt.i64)  # first max in each window
    di, dj = k // kw, k % kw
    rows = arange(oh, dtype=dt.i64, device=g.device).reshape((oh, 1)) * sh
    cols = arange(ow, dtype=dt.i64, device=g.device).reshape((1, ow)) * sw
    pos = (di + rows) * w + dj + cols  # (b, c, oh, ow) flat input positions
    flat = zeros((b, c, h * w), dtype=g.dtype, device=g.device)
    gx = flat.scatter_add(pos.reshape((b, c, oh * ow)), g.reshape((b, c, oh * ow)), 2)
    return [gx.reshape((b, c, h, w))]


def _nearest_ids(src, dst, device):
    ids = np.minimum((np.arange(dst) * (src / dst)).astype(np.int64), src - 1)
    return tensor(ids, device=device)


@rule("upsample_nearest1d")
def _up1(op, a, out, g):
    x = a[0]
    ids = _nearest_ids(x.shape[2], op.params, g.device)
    return [zeros_like(x).index_add(ids, g, 2)]


@rule("upsample_nearest2d")
def _up2(op, a, out, g):
    x = a[0]
    b, c, h, w = x.shape
    H, W = op.params
    gw = zeros((b, c, H, w), dtype=g.dtype, device=g.device).index_add(
        _nearest_ids(w, W, g.device), g, 3)
    gh = zeros((b, c, h, w), dtype=g.dtype, device=g.device).index_add(
        _nearest_ids(h, H, g.device), gw, 2)
    return [gh]


@rule("custom")
def _custom(op, a, out, g):
    return list(op.params.backward(a, out, g))


# -- Tensor's autograd methods: defined here, on top of Tensor (tensor_class.py says why)
def _tensor_backward(self):
    """Gradients of this tensor with respect to every Var it depends on (a ``tl.GradStore``)."""
    return backward(self)


def _tensor_sorted_nodes(self):
    """The tracked tensors this one depends on, in topological order."""
    return sorted_nodes(self)


def _tensor_grad(self):
    """PyTorch's ``.grad`` of a tensor that is no leaf requiring grad: None. Only a
    ``Var`` (PyTorch's leaf with ``requires_grad=True``) accumulates one (var.py)."""
    return None


_tensor_backward.__name__ = _tensor_backward.__qualname__ = "backward"
_tensor_sorted_nodes.__name__ = _tensor_sorted_nodes.__qualname__ = "sorted_nodes"
Tensor.backward = _tensor_backward
Tensor.sorted_nodes = _tensor_sorted_nodes
Tensor.grad = property(_tensor_grad)
