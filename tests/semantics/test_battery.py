"""The kept battery: PyTorch and NumPy idioms, each row evaluated with tallow and with
its oracle (PyTorch or NumPy) and compared by value, dtype and shape, or by both
raising. A row is a string: statements separated by ``;``, the last an expression.

``m`` is the library (``tl``, with its creation functions on the test's device, or
``torch``); ``x y z i j u b a3 s h e big`` are the same data in each (below). NumPy rows
evaluate with ``np`` and ``x``... as NumPy arrays for the oracle, tallow tensors for
tallow. Every row runs on the CPU and the GPU.
"""

import functools
import math

import numpy as np
import pytest
import torch

import tallow as tl

DATA = {
    "x": np.array([[1.5, -2.0, 0.0], [3.25, -0.5, 2.0]], dtype=np.float32),
    "y": np.array([0.5, -1.0, 2.0], dtype=np.float32),
    "z": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], dtype=np.float32),
    "i": np.array([[3, -7, 0], [5, 2, -4]], dtype=np.int64),
    "j": np.array([2, -3, 4], dtype=np.int64),
    "u": np.array([[0, 1, 200], [255, 3, 7]], dtype=np.uint8),
    "b": np.array([[True, False, True], [False, False, True]]),
    "a3": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "s": np.array([1, -2, 3], dtype=np.int32),
    "h": np.array([0.5, 1.5, -2.25], dtype=np.float16),
    "e": np.zeros((0, 3), dtype=np.float32),
    # i64 whose words have their top bits set (a GPU kernel's scalar is two u32 words)
    "big": np.array([2**63 - 1, 2**31, -2**63, 5, 3_000_000_000], dtype=np.int64),
}

# -- rows checked against PyTorch ---------------------------------------------------------
INDEXING = [
    "x[0]", "x[1, 2]", "x[:, 1]", "x[-1]", "x[..., -1]", "x[None]", "x[:, None, :]",
    "x[:, ::2]", "x[1:, 1:]", "x[[0, 1], [1, 0]]", "x[[1, 0]]", "x[[0, 0, 1]]",
    "x[:, [2, 0]]", "x[m.tensor([0, 1]), m.tensor([2, 2])]", "x[m.tensor([[0], [1]]), m.tensor([0, 2])]",
    "x[b]", "x[x > 0]", "x[~b]", "x[b[0]]", "x[:, b[1]]", "x[0, b[0]]",
    "a3[:, [0, 1], [1, 2]]", "a3[[0, 1], :, [1, 2]]", "a3[[0, 1], [1, 2], [3, 0]]",
    "a3[..., [0, 3]]", "a3[1, ..., 2]", "a3[:, 1:, ::2]", "a3[[1], 0]", "a3[0, [2, 0], 1:3]",
    "a3[m.tensor([1, 0]), :, m.tensor([0])]", "a3[a3 > 20]", "a3[0][a3[0] % 2 == 0]",
    "a3[:, None, 0, [1, 2]]", "i[j > 0]", "i[:, -1]", "i[[1, 0], [0, 0]]", "u[1]", "s[m.tensor([2, 0])]",
    "x[m.tensor([0, 1]).unsqueeze(1), m.tensor([[0, 1]])]", "x[1][2]", "z[1:5:2]", "z[-3:]",
    "x[-2:, -2:]", "x[0, -1]", "a3[-1, -1, -1]", "x[True]", "x[False]", "x[0, True]", "x[..., True]",
]

SETITEM = [
    "w = x.clone(); w[0] = 9.0; w", "w = x.clone(); w[:, 1] = y[:2]; w",
    "w = x.clone(); w[[0, 1], [1, 0]] = 5.0; w", "w = x.clone(); w[[0, 0], [1, 1]] = m.tensor([1.0, 2.0]); w",
    "w = x.clone(); w[b] = 0.0; w", "w = x.clone(); w[x < 0] = x[x < 0] * 10; w",
    "w = x.clone(); w[1] = y; w", "w = x.clone(); w[...] = 1.0; w", "w = x.clone(); w[:, ::2] = -1.0; w",
    "w = i.clone(); w[0, 0] = 100; w", "w = i.clone(); w[i < 0] = 0; w", "w = i.clone(); w[1] = 2.7; w",
    "w = a3.clone(); w[:, [0, 2], [1, 3]] = 0.0; w", "w = a3.clone(); w[[0, 1], :, [1, 2]] = 7.0; w",
    "w = m.zeros((3, 3)); w[[0, 1, 2], [0, 1, 2]] = 1; w",
    "w = m.zeros(5); w.index_put_((m.tensor([0, 0, 3]),), m.tensor([1.0, 2.0, 3.0]), accumulate=True); w",
    "w = m.zeros(5); w[m.tensor([4, 1])] = m.tensor([7.0, 8.0]); w",
    "w = x.clone(); w[0][1] = 42.0; w", "w = x.clone(); w[-1, -1] = -8.0; w",
    "w = u.clone(); w[b] = 9; w", "w = x.clone(); w[True] = 1.0; w", "w = x.clone(); w[False] = 1.0; w",
]

PROMOTION = []
_DT = {"f32": "x", "i64": "i", "u8": "u", "bool": "b"}
for _a, _an in _DT.items():
    for _b, _bn in _DT.items():
        for _op in ("+", "*", "<", "==", "maximum"):
            if _op == "maximum":
                PROMOTION.append(f"{_an}.maximum({_bn})")
            else:
                PROMOTION.append(f"{_an} {_op} {_bn}")
PROMOTION += [
    "x + 1", "x * 2.5", "i + 1", "i * 2.5", "i + True", "u + 1", "u * 1.5", "b + 1", "b * 2.0",
    "b | b", "b & ~b", "b ^ b", "h + 2.0", "h + x[0]", "s + j", "s + 1", "s * 0.5",
    "s + u[0]", "j.float() + h", "x.double() + x", "(x > 0) + 255", "(x > 0) + (x > 0)",
    "i & 6", "i | 1", "i ^ j", "~i", "~b", "u & 15", "s.to(m.int8) + u[0]",
    "big == 9223372036854775807", "big < 9223372036854775807", "big != -2**63", "big >= 2**31",
    "big == 3_000_000_000", "big + 2**31", "big - 3_000_000_000", "big * (2**32 - 1)",
    "big.clamp(-2**31 - 5, 2**31)", "big.maximum(big // 3)", "big // 2**33", "big % 2**31",
]

ARITHMETIC = [
    "i / 2", "i // 3", "i % 3", "-i % 3", "i // -3", "i % -3", "j / j", "x / y", "x // y", "x % y",
    "-x % 1.5", "i ** 2", "x ** 2", "x.abs() ** 0.5", "x - y", "y - x", "1 - x",
    "2 / x[:, :2].abs()", "i * -1", "-x", "-i", "abs(x)", "abs(i)", "x.neg()", "i.sign()",
    "x.sign()", "x.reciprocal()", "x.exp()", "x.abs().log()", "x.abs().sqrt()", "x.tanh()",
    "x.sigmoid()", "x.relu()", "x.sin()", "x.cos()", "x.floor()", "x.ceil()", "z.round()",
    "z.floor()", "z.ceil()", "z.trunc()", "z.frac()", "x.square()", "x.pow(2)", "x.clamp(-1, 1)",
    "x.clamp(min=0)", "x.clamp(max=0.5)", "i.clamp(-2, 2)", "i.clamp(0.5, 4.5)", "j.clamp(min=0)",
    "x.clamp(y.min(), y.max())", "x.maximum(x * 2)", "x.minimum(-x)", "i.maximum(-i)",
]

REDUCTIONS = [
    "x.sum()", "x.sum(0)", "x.sum(1)", "x.sum(dim=1, keepdim=True)", "x.sum((0, 1))", "x.mean()",
    "x.mean(0)", "x.mean(dim=-1, keepdim=True)", "x.max()", "x.min()", "x.max(1)", "x.min(0)",
    "x.max(dim=1, keepdim=True)", "x.argmax()", "x.argmax(1)", "x.argmin(0)",
    "x.argmax(dim=1, keepdim=True)", "x.var()", "x.var(0)",
    "x.std()", "x.std(1)", "x.var(1, unbiased=False)", "x.cumsum(1)", "x.cumsum(0)",
    "i.sum()", "i.sum(0)", "u.sum()", "u.sum(1)", "b.sum()", "b.sum(0)", "s.sum()", "i.max()",
    "i.argmax(1)", "b.any()", "b.all()", "b.any(1)", "b.all(0)", "x.logsumexp(1)",
    "a3.sum((0, 2))", "a3.mean(1)", "a3.amax(2)", "a3.amin((0, 1))", "x.norm()", "i.float().mean()",
    "e.sum()", "e.sum(0)", "e.mean(0)", "i.cumsum(1)", "u.cumsum(0)", "b.cumsum(1)",
]

SHAPES = [
    "x.T", "x.t()", "x.reshape(3, 2)", "x.reshape(-1)", "x.view(3, 2)", "x.flatten()",
    "x.unsqueeze(0)", "x.unsqueeze(-1)", "x[None].squeeze(0)", "x.squeeze()", "x.transpose(0, 1)",
    "a3.permute(2, 0, 1)", "a3.flatten(1)", "a3.flatten(0, 1)", "x.chunk(2, 1)", "m.arange(0, 6).chunk(4)",
    "m.arange(0, 7).chunk(3)", "m.arange(0, 5).chunk(5)", "x.split(2, 1)", "x.split([1, 2], 1)",
    "m.cat([x, x], 0)", "m.cat([x, x], dim=1)", "m.stack([y, y])", "m.stack([y, y], 1)",
    "x.expand(4, 2, 3)", "y.expand(2, 3)", "x.repeat(2, 1)", "x.narrow(1, 1, 2)", "x.contiguous()",
    "x.flip(0)", "x.roll(1, 1)", "x.tril()", "x.triu(1)", "a3.transpose(0, 2).reshape(4, -1)",
    "x.size()", "x.size(1)", "x.dim()", "x.numel()", "x.ndim", "x.shape", "a3.stride()",
    "x.is_contiguous()", "x.t().is_contiguous()",
]

MASKS_AND_COMPARE = [
    "x > 0", "x >= y", "x != y", "x < 1.5", "i > 0", "i == 3", "i < 2.5", "u > 100",
    "u == 255", "i > 2**40", "x.eq(0)", "x.ne(y)", "x.gt(y)", "x.le(0.0)",
    "m.where(b, x, 0.0)", "m.where(x > 0, x, y)", "m.where(b, i, -1)", "x.masked_fill(b, -1.0)",
    "i.masked_fill(b, 0)", "(x > 0).float()", "(x > 0).long()", "(x > 0).int()",
    "(x > 0) & (x < 3)", "(x > 0) | b", "~(x > 0)", "(x > 0).sum()", "(x > 0).any()",
    "x.isnan()", "(x / 0).isinf()", "x.isfinite()", "b.logical_and(x > 0)",
    "i.logical_not()", "x.nonzero()", "b.nonzero()",
]

INPLACE = [
    "w = x.clone(); w.add_(10); x", "w = x.clone(); w.add_(10); w", "w = x.clone(); w.mul_(2); w",
    "w = x.clone(); w.sub_(1); w", "w = x.clone(); w.div_(2); w", "w = x.clone(); w.zero_(); w",
    "w = x.clone(); w.fill_(3.0); w", "w = x.clone(); w.clamp_(-1, 1); w",
    "w = x.clone(); w.masked_fill_(b, 0.0); w", "w = x.clone(); w.copy_(x * 2); w",
    "w = x.clone(); w += 1; w", "w = x.clone(); w -= y; w", "w = x.clone(); w *= 3; w",
    "w = x.clone(); w /= 4; w", "w = i.clone(); w //= 2; w", "w = i.clone(); w %= 3; w",
    "w = i.clone(); w **= 2; w", "w = i.clone(); w &= 6; w", "w = i.clone(); w |= 1; w",
    "w = i.clone(); w ^= j; w", "w = x.clone(); r = w[0]; r += 1; w", "w = x.clone(); w[1] += 1; w",
    "w = x.clone(); w[:, 0] *= 2; w", "w = x.clone(); w[[0, 0], [1, 1]] += 1; w",
    "w = x.clone(); v = w.view(-1); v[2] = 8.0; w", "w = x.clone(); w.t()[0] = 5.0; w",
    "w = i.clone(); w /= 2; w", "w = i.clone(); w += 1.5; w", "w = x.clone(); w.exp_(); w",
    "w = x.clone(); w.relu_(); w", "w = x.clone(); w.neg_(); w", "w = x.clone(); w.abs_(); w",
    "w = x.clone(); w.sqrt_(); w", "w = x.clone(); w.index_put_((m.tensor([1]),), y); w",
    "w = x.clone(); w.scatter_(1, m.tensor([[0], [2]]), 5.0); w",
    "w = x.clone(); w.index_add_(0, m.tensor([1, 1]), x); w",
    "w = b.clone(); w &= ~b; w", "w = u.clone(); w += 1; w", "w = u.clone(); w *= 2; w",
]

CASTS = [
    "x.to(m.int64)", "x.long()", "x.int()", "x.abs().to(m.uint8)", "x.bool()",
    "i.to(m.float32)", "i.float()", "i.double()", "i.to(m.int8)", "i.to(m.int16)", "i.to(m.int32)",
    "i.bool()", "u.to(m.int8)", "u.float()", "b.float()", "b.long()", "b.to(m.uint8)", "s.long()",
    "s.float()", "h.float()", "x.half()", "x.to(m.bfloat16).float()", "x.to(m.float16)",
    "x.to(m.float32) is x", "x.type(m.float64)", "j.to(m.float16)", "x.to(m.int8)",
    "m.tensor([1, 2, 3])", "m.tensor([1.0, 2.0])", "m.tensor([True, False])", "m.tensor(3)",
    "m.tensor(2.5)", "m.tensor([[1, 2], [3, 4]]) - 5", "m.arange(0, 5)", "m.arange(0, 5) / 2",
    "m.arange(0.0, 1.0, 0.25)", "m.zeros(2, 3)", "m.ones((2,), dtype=m.int64)",
    "m.full((2, 2), 7)", "m.full((2,), 1.5)", "m.zeros_like(i)", "m.ones_like(x)", "m.eye(3)",
    "m.linspace(0, 1, 5)", "x.dtype", "i.dtype", "b.dtype", "(x > 0).dtype", "u.dtype", "s.dtype",
    "h.dtype", "x.is_floating_point()", "i.is_floating_point()",
]

MATH_AND_NN = [
    "x.softmax(1)", "x.softmax(0)", "x.softmax(-1).sum(-1)", "x.log_softmax(1)", "x @ y", "x @ x.T",
    "x.T @ x", "x.matmul(y)", "a3 @ a3.transpose(1, 2)", "y.dot(y)", "y.outer(y)", "x.sort(1)",
    "x.sort(1, descending=True)", "x.prod()", "x.prod(1)", "x.unique()", "i.unique()", "x.argsort(1)", "x.topk(2, 1)", "y.topk(1)", "x.gather(1, m.tensor([[0], [2]]))",
    "x.index_select(1, m.tensor([2, 0]))", "x.masked_select(b)",     "m.nn.functional.relu(x)", "m.nn.functional.gelu(x)", "m.nn.functional.silu(x)",
    "m.nn.functional.softmax(x, dim=1)", "m.nn.functional.log_softmax(x, dim=0)",
    "m.nn.functional.one_hot(m.tensor([0, 2, 1]), 3)", "m.nn.functional.pad(x, (1, 1))",
    "m.nn.functional.normalize(x, dim=1)", "m.nn.functional.layer_norm(x, (3,))",
    "m.nn.functional.cross_entropy(x, m.tensor([0, 2]))", "m.nn.functional.mse_loss(x, x * 2)",
    "m.nn.functional.embedding(m.tensor([1, 0]), x)", "m.nn.functional.dropout(x, 0.5, False)",
    "x.lerp(x * 2, 0.5)", "x.addcmul(x, x, value=0.5)", "x.erf()", "x.clip(-1, 1)",
    "x.allclose(x + 1e-9)", "x.equal(x)", "x.item() if x.numel() == 1 else x[0, 0].item()",
    "i[0, 1].item()", "b[0, 0].item()", "x.tolist()", "i.tolist()", "len(x)", "bool(b[0, 0])",
    "int(i[0, 0])", "float(x[1, 0])",
]

FORMATTING = [
    "f'{x[0, 0]:.3f}'", "f'{x.sum():.4f}'", "f'{i[0, 0]:d}'", "f'{x[1, 0]:g}'", "'%.2f' % x[0, 0]",
    "f'{x.mean().item():.5f}'", "round(x[1, 0].item(), 1)", "f'{i.sum():+d}'",
]

RAISES = [
    "x[5]", "x[0, 0, 0]", "x[m.tensor([3])]", "x.reshape(4, 2)", "x @ x", "x.view(4, -1)",
    "b - b", "-b", "m.cat([x, y], 0)", "x.sum(3)", "m.arange(0, 6).chunk(0)",
    "w = i.clone(); w /= x.abs() + 1; w", "w = i.clone(); w += 0.5 * x; w",
    "w = b.clone(); w += 1; w", "x.expand(3, 3)", "x[b[:, :2]]", "x.t().view(-1)",
]

# Rows where tallow differs from PyTorch on purpose (docs/differences.md): tallow's
# outcome, as a value or the error it raises.
DOCUMENTED = {
    "u < -1": [[False] * 3] * 2,                    # an exact comparison; PyTorch wraps -1 to 255
    "u > -1": [[True] * 3] * 2,
    "x.to(m.uint8)": [[1, 0, 0], [3, 0, 2]],        # saturates (Rust's `as`); C's cast is undefined
    "2 ** j.abs()": tl.UnsupportedDTypeError,       # no integer pow with a tensor exponent
    "i ** j.abs()": tl.UnsupportedDTypeError,
    "u + 300": OverflowError,
    "x.maximum(y)": tl.ShapeMismatchError,          # candle's methods take equal shapes
    "x.add(y)": tl.ShapeMismatchError,                       # NumPy 2's rule; PyTorch wraps the scalar
    "u - (-1)": OverflowError,
}

TORCH_ROWS = (INDEXING + SETITEM + PROMOTION + ARITHMETIC + REDUCTIONS + SHAPES
              + MASKS_AND_COMPARE + INPLACE + CASTS + MATH_AND_NN + FORMATTING + RAISES)

# -- rows checked against NumPy ------------------------------------------------------------
NUMPY_ROWS = [
    "x[::-1]", "x[:, ::-1]", "z[::-2]", "a3[::-1, 1, ::-2]",  # PyTorch refuses negative steps
    "a3[1, ..., False]", "a3[True, :, 0]", "a3[False, 1:, True]", "x[True, None, 0]",
    "np.mean(x)", "np.sum(x, axis=0)", "np.sum(x)", "np.max(x, axis=1)", "np.min(x)",
    "np.argmax(x)", "np.argmax(x, axis=1)", "np.std(x)", "np.var(x, axis=0)", "np.prod(y)",
    "np.cumsum(x, axis=1)", "np.abs(x)", "np.exp(x)", "np.sqrt(np.abs(x))", "np.clip(x, -1, 1)",
    "np.where(x > 0, x, 0)", "np.asarray(x)", "np.array(i)", "np.asarray(b)", "np.asarray(u)",
    "np.asarray(s)", "np.asarray(h)", "np.concatenate([np.asarray(x), np.asarray(x)])",
    "np.allclose(x, x)", "np.array_equal(i, i)", "np.dot(y, y)", "np.matmul(np.asarray(x), np.asarray(y))",
    "np.round(z)", "np.sort(y)", "np.unique(np.asarray(i))", "np.median(x)", "np.linalg.norm(x)",
    "np.isnan(x)", "np.sum(b)", "np.sum(u)", "np.mean(i)", "np.sum(a3, axis=(0, 2))", "np.shape(a3)",
    "np.ndim(x)", "np.size(x)", "x.astype(np.float64)", "i.astype(np.float32)", "x.astype(np.int32)",
    "b.astype(np.uint8)", "np.maximum(x, 0)", "np.add(x, 1)", "np.multiply(x, y)", "np.float32(x[0, 0])",
    "np.mean(x, axis=1, keepdims=True)", "np.any(b)", "np.all(b, axis=0)", "np.count_nonzero(b)",
]

_TORCH_DTYPE = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
                torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


def _name_of_dtype(d):
    if isinstance(d, torch.dtype):
        return _TORCH_DTYPE[d]
    if isinstance(d, tl.DType):
        return str(d).replace("tallow.", "")
    return None


class _OnDevice:
    """``tl`` with its creation functions on one device, so rows read as PyTorch's."""

    _CREATE = ("tensor", "arange", "zeros", "ones", "full", "eye", "linspace")

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        value = getattr(tl, name)
        if name in self._CREATE:
            return functools.partial(value, device=self._device)
        return value


def _env(lib, device):
    if lib == "torch":
        env = {k: torch.from_numpy(v.copy()) for k, v in DATA.items()}
        env["m"] = torch
    elif lib == "np":
        env = {k: v.copy() for k, v in DATA.items()}
    else:
        env = {k: tl.tensor(v.copy(), device=device) for k, v in DATA.items()}
        env["m"] = _OnDevice(device)
    env["np"] = np
    return env


def _run(row, env):
    *statements, last = [part.strip() for part in row.split(";")]
    for statement in statements:
        exec(statement, env)
    return eval(last, env)


def _outcome(row, env):
    try:
        return _run(row, env), None
    except Exception as error:  # noqa: BLE001 - a raise is an outcome to compare
        return None, error


def _normal(value):
    """A comparable form: ("tensor", dtype name, shape, float64 values), or the value."""
    if isinstance(value, (torch.Tensor, tl.Tensor)):
        name = _name_of_dtype(value.dtype)
        array = value.detach().float().numpy() if name == "bf16" else (
            value.detach().numpy() if isinstance(value, torch.Tensor) else value.numpy())
        return ("tensor", name, tuple(array.shape), array.astype(np.float64))
    if isinstance(value, np.ndarray):
        name = {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64",
                "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}.get(str(value.dtype), str(value.dtype))
        return ("tensor", name, tuple(value.shape), value.astype(np.float64))
    if isinstance(value, np.generic):
        return _normal(np.asarray(value))
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return tuple(_normal(v) for v in value) if type(value) is not list or any(
            isinstance(v, (torch.Tensor, tl.Tensor)) for v in value) else value
    if hasattr(value, "values") and hasattr(value, "indices") and not isinstance(value, dict):
        return (_normal(value.values), _normal(value.indices))
    if isinstance(value, (torch.dtype, tl.DType)):
        return ("dtype", _name_of_dtype(value))
    if isinstance(value, torch.Size):
        return tuple(value)
    return value


def _assert_same(got, want, row):
    if isinstance(want, tuple) and want and want[0] == "tensor":
        assert isinstance(got, tuple) and got[0] == "tensor", f"{row}: {got!r} is no tensor"
        assert got[1] == want[1], f"{row}: dtype {got[1]} != {want[1]}"
        assert got[2] == want[2], f"{row}: shape {got[2]} != {want[2]}"
        np.testing.assert_allclose(got[3], want[3], rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=row)
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{row}: {got!r} != {want!r}"
        for g, w in zip(got, want):
            _assert_same(g, w, row)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=2e-6) or (math.isnan(want) and math.isnan(got)), row
    else:
        assert got == want, f"{row}: {got!r} != {want!r}"


def _check(row, oracle, device):
    want, want_error = _outcome(row, _env(oracle, device))
    got, got_error = _outcome(row, _env("tl", device))
    if want_error is not None:
        assert got_error is not None, f"{row}: {oracle} raises {want_error!r}, tallow gives {got!r}"
        return
    if got_error is not None:
        raise AssertionError(f"{row}: tallow raises {got_error!r}, {oracle} gives {want!r}") from got_error
    _assert_same(_normal(got), _normal(want), row)


def test_the_battery_holds_at_least_300_expressions():
    rows = set(TORCH_ROWS) | set(NUMPY_ROWS) | set(DOCUMENTED)
    assert len(rows) == len(TORCH_ROWS) + len(NUMPY_ROWS) + len(DOCUMENTED) >= 300


@pytest.mark.parametrize("row", list(DOCUMENTED))
def test_documented_row_gives_tallows_answer(device, row):
    expected = DOCUMENTED[row]
    want, want_error = _outcome(row, _env("torch", device))
    got, got_error = _outcome(row, _env("tl", device))
    if isinstance(expected, type):
        assert isinstance(got_error, expected), f"{row}: {got_error!r}"
        return
    assert got_error is None, f"{row}: {got_error!r}"
    assert got.values() == expected
    assert want_error is not None or want.tolist() != expected  # a difference indeed


@pytest.mark.parametrize("row", TORCH_ROWS)
def test_row_matches_torch(device, row):
    _check(row, "torch", device)


@pytest.mark.parametrize("row", NUMPY_ROWS)
def test_row_matches_numpy(device, row):
    _check(row, "np", device)
