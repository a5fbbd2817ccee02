"""PyTorch's Tensor methods that candle has no name for, composed from tallow's ops.

Each method has PyTorch's name, signature and meaning. They are compositions of the
differentiable primitives (so gradients and the GPU come with them); the few whose
result is not differentiable in PyTorch either (``unique``, ``isclose``, the masks)
compute on the host and put the result on the tensor's device.
"""

from __future__ import annotations

import numpy as np

from . import dtype as dt
from .contraction import einsum
from .errors import InvalidArgumentError, ShapeMismatchError, UnsupportedDTypeError
from .ops_reduce import ValuesIndices
from .shape import normalize_dim
from .tensor_base import TensorBase


def _dims_of(shape):
    """PyTorch's size arguments: ``(2, 3)``, ``[2, 3]`` or ``2, 3``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _on_device(arr, dtype, like):
    """``arr`` as a tensor of ``dtype`` on ``like``'s device."""
    return like.new(np.ascontiguousarray(arr, dtype=dtype.np), device=like.device)


def _tree_product(x, d):
    """The product along dim ``d`` by multiplying halves (log2(n) multiplies, each
    differentiable), keeping ``d`` with size 1."""
    n = x.shape[d]
    if n == 0:
        shape = x.shape[:d] + (1,) + x.shape[d + 1:]
        return x.new_ones(shape)
    while n > 1:
        half = n // 2
        paired = x.narrow(d, 0, half) * x.narrow(d, half, half)
        x = paired if n % 2 == 0 else paired.cat([paired, x.narrow(d, 2 * half, 1)], d)
        n = x.shape[d]
    return x


class TorchMethods:
    """PyTorch's Tensor methods missing from candle's API (mixed into Tensor)."""

    __slots__ = ()

    # -- autograd flags ------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """True for a ``Var`` and for a result computed from one (the ops recorded)."""
        return self._track

    @property
    def is_leaf(self) -> bool:
        """True when no recorded op produced this tensor (a ``Var``, or untracked)."""
        return self._op is None

    def requires_grad_(self, requires_grad: bool = True):
        """Self when it already is what is asked; a plain tensor cannot start recording
        in place (a trainable tensor is a ``tl.Var``), so that raises with the fix."""
        if bool(requires_grad) == self._track:
            return self
        if requires_grad:
            raise InvalidArgumentError(
                "requires_grad_(): a trainable tensor is a tl.Var; write w = tl.Var(x) "
                "(or nn.Parameter(x)) and use w in place of x")
        raise InvalidArgumentError(
            "requires_grad_(False): a Var always records its ops; use x.detach() for a "
            "tensor that does not, or model.requires_grad_(False) to freeze a module")

    # -- new tensors like this one ---------------------------------------------------------
    def _new_full(self, shape, value, dtype, device):
        return self.full(_dims_of(shape), value, dtype=dtype or self.dtype,
                           device=device or self.device)

    def new_zeros(self, *size, dtype=None, device=None):
        """Zeros of ``size`` with this tensor's dtype and device (unless given)."""
        return self._new_full(size, 0, dtype, device)

    def new_ones(self, *size, dtype=None, device=None):
        """Ones of ``size`` with this tensor's dtype and device (unless given)."""
        return self._new_full(size, 1, dtype, device)

    def new_empty(self, *size, dtype=None, device=None):
        """A tensor of ``size`` with this dtype and device; its values are zeros here."""
        return self._new_full(size, 0, dtype, device)

    def new_full(self, size, fill_value, *, dtype=None, device=None):
        """``fill_value`` in ``size`` with this tensor's dtype and device (unless given)."""
        return self._new_full((size,), fill_value, dtype, device)

    def new_tensor(self, data, dtype=None, device=None):
        """A copy of ``data`` with this tensor's dtype and device (unless given)."""
        return self.new(data, device=device or self.device).to_dtype(dtype or self.dtype)

    def uniform_(self, from_=0.0, to=1.0, **kwargs):
        """Fill in place with values drawn uniformly from ``[from_, to)``."""
        from_ = kwargs.pop("from", from_)
        draw = self.rand(self.shape, low=from_, high=to, dtype=self.dtype, device=self.device)
        return self.copy_(draw)

    def normal_(self, mean=0.0, std=1.0):
        """Fill in place with values drawn from a normal distribution."""
        draw = self.randn(self.shape, mean=mean, std=std, dtype=self.dtype, device=self.device)
        return self.copy_(draw)

    # -- shape ---------------------------------------------------------------------------------
    @property
    def mT(self):
        """A view with the last two dims swapped."""
        return self.transpose(-2, -1)

    def view_as(self, other):
        """``view(other.shape)``."""
        return self.view(other.shape)

    def expand_as(self, other):
        """``expand(other.shape)``."""
        return self.expand(other.shape)

    def unflatten(self, dim, sizes):
        """Split dim ``dim`` into ``sizes`` (one ``-1`` is inferred)."""
        d = normalize_dim(dim, self.rank, "unflatten")
        sizes = list(sizes)
        if sizes.count(-1) == 1:
            known = int(np.prod([s for s in sizes if s != -1]))
            sizes[sizes.index(-1)] = self.shape[d] // known if known else 0
        if int(np.prod(sizes)) != self.shape[d]:
            raise ShapeMismatchError(
                f"unflatten: sizes {tuple(sizes)} do not multiply to dim {d}'s size {self.shape[d]}")
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def movedim(self, source, destination):
        """Move dims ``source`` to positions ``destination`` (ints or sequences)."""
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise InvalidArgumentError(
                f"movedim: source {src} and destination {dst} have different lengths")
        rank = self.rank
        src = [normalize_dim(d, rank, "movedim") for d in src]
        dst = [normalize_dim(d, rank, "movedim") for d in dst]
        order = [None] * rank
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(d for d in range(rank) if d not in src)
        order = [next(rest) if o is None else o for o in order]
        return self.permute(tuple(order))

    moveaxis = movedim

    def swapaxes(self, axis0, axis1):
        """``transpose(axis0, axis1)``."""
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    def unbind(self, dim=0):
        """A tuple of the slices along ``dim``, that dim removed (views)."""
        d = normalize_dim(dim, self.rank, "unbind")
        return tuple(self.narrow(d, i, 1).squeeze(d) for i in range(self.shape[d]))

    def tile(self, *dims):
        """Repeat the tensor ``dims`` times per dim (dims padded with 1s on the left)."""
        dims = _dims_of(dims)
        if len(dims) < self.rank:
            dims = (1,) * (self.rank - len(dims)) + dims
        return self.repeat(dims)

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        """Each element (or slice along ``dim``) repeated ``repeats`` times in place:
        ``repeats`` an int or a 1-D tensor of counts; without ``dim`` the tensor is
        flattened first."""
        x = self.flatten_all() if dim is None else self
        d = 0 if dim is None else normalize_dim(dim, x.rank, "repeat_interleave")
        n = x.shape[d]
        counts = repeats._host() if isinstance(repeats, TensorBase) else np.array(repeats)
        counts = np.broadcast_to(counts.astype(np.int64).reshape(-1), (n,)) if counts.size == 1 \
            else counts.astype(np.int64)
        if counts.shape != (n,):
            raise ShapeMismatchError(
                f"repeat_interleave: repeats has {counts.size} counts for a dim of size {n}")
        ids = np.repeat(np.arange(n, dtype=np.int64), counts)
        return x.index_select(_on_device(ids, dt.i64, x), d)

    def unfold(self, dimension, size, step):
        """The windows of ``size`` taken every ``step`` along ``dimension``, as a new last
        dim (a copy here, a view in PyTorch)."""
        d = normalize_dim(dimension, self.rank, "unfold")
        n = self.shape[d]
        if size > n or step <= 0:
            raise ShapeMismatchError(
                f"unfold: size {size} and step {step} do not fit dim {d} of size {n}")
        count = (n - size) // step + 1
        ids = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
        picked = self.index_select(_on_device(ids, dt.i64, self), d)
        split = picked.reshape(self.shape[:d] + (count, size) + self.shape[d + 1:])
        return split.movedim(d + 1, -1)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        """The diagonal of the ``(dim1, dim2)`` planes (``offset`` above it when
        positive), as the last dim."""
        d1 = normalize_dim(dim1, self.rank, "diagonal")
        d2 = normalize_dim(dim2, self.rank, "diagonal")
        x = self.movedim((d1, d2), (-2, -1))
        rows, cols = x.shape[-2:]
        length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
        ids = (np.arange(length) + r0) * cols + np.arange(length) + c0
        flat = x.reshape(x.shape[:-2] + (rows * cols,))
        return flat.index_select(_on_device(ids.astype(np.int64), dt.i64, x), -1)

    def diag(self, diagonal=0):
        """A 1-D tensor's square matrix with it on ``diagonal``; a 2-D tensor's diagonal."""
        if self.rank == 2:
            return self.diagonal(diagonal)
        if self.rank != 1:
            raise ShapeMismatchError(f"diag: expects a 1-D or 2-D tensor, got shape {self.shape}")
        n = self.shape[0]
        off_diagonal = _on_device(~np.eye(n, dtype=bool), dt.bool_, self)
        square = self.unsqueeze(0).broadcast_as((n, n)).masked_fill(off_diagonal, 0)
        k = abs(diagonal)
        if k == 0:
            return square
        if diagonal > 0:
            return square.pad_with_zeros(1, k, 0).pad_with_zeros(0, 0, k)
        return square.pad_with_zeros(0, k, 0).pad_with_zeros(1, 0, k)

    def trace(self):
        """The sum of a 2-D tensor's diagonal."""
        if self.rank != 2:
            raise ShapeMismatchError(f"trace: expects a 2-D tensor, got shape {self.shape}")
        return self.diagonal().sum()

    def rsqrt(self):
        """``1 / sqrt(x)``."""
        return self.sqrt().recip()

    def log1p(self):
        """``log(1 + x)``, accurate for tiny ``x`` (Goldberg's form
        ``x * log(u) / (u - 1)`` with ``u = 1 + x``; its gradient is exactly ``1 / u``)."""
        u = self + 1
        at_one = u.eq(1)
        ratio = u.log() / (u - 1).masked_fill(at_one, 1)
        return (self * ratio.masked_fill(at_one, 1)).masked_fill(self.eq(float("inf")), float("inf"))

    def expm1(self):
        """``exp(x) - 1``, accurate for tiny ``x`` (Kahan's form
        ``(u - 1) * x / log(u)`` with ``u = exp(x)``; its gradient is exactly ``u``)."""
        u = self.exp()
        at_one = u.eq(1)
        plain = at_one.logical_or(u.eq(0)).logical_or(u.eq(float("inf")))
        general = (u - 1) * self / u.log().masked_fill(plain, 1)
        # where exp rounds to 0, 1 or inf: -1, x itself, inf
        return general.where(plain.logical_not(), u - 1).where(at_one.logical_not(), self)

    def clamp_min(self, min):  # noqa: A002  (PyTorch's argument name)
        """``clamp(min=min)``."""
        return self.clamp(min, None)

    def clamp_max(self, max):  # noqa: A002
        """``clamp(max=max)``."""
        return self.clamp(None, max)

    def fmod(self, other):
        """The remainder of the division truncated toward zero (the dividend's sign),
        unlike ``remainder``, which takes the divisor's."""
        r = self.remainder(other)
        sign_r = r.gt(0)
        differs = r.ne(0).logical_and(sign_r.ne(self.gt(0)))
        return r.where(differs.logical_not(), r - other)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (by default
        0 and the dtype's largest and lowest finite values)."""
        if not self.dtype.is_float:
            return self
        info = np.finfo(np.float32 if self.dtype is dt.bf16 else self.dtype.np)
        if self.dtype is dt.bf16:
            info_max = float(np.float32(3.3895313892515355e38))
            hi, lo = info_max, -info_max
        else:
            hi, lo = float(info.max), float(info.min)
        out = self.masked_fill(self.isnan(), nan)
        out = out.masked_fill(self.eq(float("inf")), hi if posinf is None else posinf)
        return out.masked_fill(self.eq(float("-inf")), lo if neginf is None else neginf)

    # -- tests of values ---------------------------------------------------------------------
    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        """A bool tensor: ``|self - other| <= atol + rtol * |other|`` elementwise."""
        b = other._host() if isinstance(other, TensorBase) else other
        close = np.isclose(self._host(), b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        return _on_device(close, dt.bool_, self)

    def count_nonzero(self, dim=None):
        """The number of non-zero values (over ``dim``, or all), as i64."""
        nonzero = self.ne(0).to_dtype(dt.i64)
        return nonzero.sum() if dim is None else nonzero.sum(dim)

    # -- reductions and scans ----------------------------------------------------------------
    def prod(self, dim=None, keepdim=False, *, dtype=None):
        """The product of the values (over ``dim``, or all); integer and bool tensors
        give i64, as PyTorch."""
        x = self
        if dtype is not None:
            x = x.to_dtype(dtype)
        elif not x.dtype.is_float:
            x = x.to_dtype(dt.i64)
        if dim is None:
            out = _tree_product(x.flatten_all(), 0)
            return out.reshape(()) if not keepdim else out.reshape((1,) * self.rank)
        d = normalize_dim(dim, x.rank, "prod")
        out = _tree_product(x, d)
        return out if keepdim else out.squeeze(d)

    def cumprod(self, dim, *, dtype=None):
        """The running product along ``dim`` (a Hillis-Steele scan of log2(n) multiplies,
        each differentiable)."""
        x = self
        if dtype is not None:
            x = x.to_dtype(dtype)
        elif not x.dtype.is_float:
            x = x.to_dtype(dt.i64)
        d = normalize_dim(dim, x.rank, "cumprod")
        n = x.shape[d]
        shift = 1
        while shift < n:
            ones = x.new_ones(x.shape[:d] + (shift,) + x.shape[d + 1:])
            x = x * ones.cat([ones, x.narrow(d, 0, n - shift)], d)
            shift *= 2
        return x

    def diff(self, n=1, dim=-1, prepend=None, append=None):
        """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first)."""
        d = normalize_dim(dim, self.rank, "diff")
        x = self
        if prepend is not None or append is not None:
            parts = [p for p in (prepend, self, append) if p is not None]
            x = self.cat(parts, d)
        for _ in range(n):
            m = x.shape[d]
            if m == 0:
                break
            hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
            x = hi.logical_xor(lo) if x.dtype is dt.bool_ else hi - lo
        return x

    def median(self, dim=None, keepdim=False):
        """The lower median; NaN where a NaN is among the values (PyTorch's rule). With
        ``dim``, ``(values, indices)``."""
        if dim is None:
            return self.flatten_all().median(0).values.reshape(
                (1,) * self.rank if keepdim else ())
        d = normalize_dim(dim, self.rank, "median")
        n = self.shape[d]
        if n == 0:
            raise ShapeMismatchError(f"median: dim {d} is empty")
        order = np.argsort(self._host(), axis=d, kind="stable")
        values = np.take_along_axis(self._host(), order, d)
        has_nan = np.isnan(values).any(axis=d, keepdims=True) if self.dtype.is_float \
            else np.zeros(values.shape[:d] + (1,) + values.shape[d + 1:], bool)
        finite_count = (~np.isnan(values)).sum(axis=d, keepdims=True) if self.dtype.is_float \
            else np.full_like(has_nan, n, dtype=np.int64)
        pos = np.where(has_nan, finite_count, (n - 1) // 2)
        ids = np.take_along_axis(order, pos, d).astype(np.int64)
        index = _on_device(ids, dt.i64, self)
        vals = self.gather(index, d)
        if not keepdim:
            vals, index = vals.squeeze(d), index.squeeze(d)
        return _values_indices(vals, index)

    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
        """The distinct values, sorted (each NaN counts as distinct, as PyTorch);
        ``return_inverse`` and ``return_counts`` add the tensors PyTorch adds. With
        ``dim``, the distinct slices along it."""
        arr = self._host()
        if self.dtype is dt.bf16:
            arr = arr.astype(np.float32)
        if dim is None:
            values, inverse, counts = np.unique(arr.reshape(-1), return_inverse=True,
                                                return_counts=True, equal_nan=False)
            inverse = inverse.reshape(self.shape)
        else:
            d = normalize_dim(dim, self.rank, "unique")
            values, inverse, counts = np.unique(arr, return_inverse=True, return_counts=True,
                                                axis=d)
            inverse = inverse.reshape(-1)
        out = [_on_device(values, self.dtype, self)]
        if return_inverse:
            out.append(_on_device(inverse.astype(np.int64), dt.i64, self))
        if return_counts:
            out.append(_on_device(counts.astype(np.int64), dt.i64, self))
        return out[0] if len(out) == 1 else tuple(out)

    # -- softmax --------------------------------------------------------------------------------
    def mm(self, mat2):
        """The product of two 2-D tensors."""
        if self.rank != 2 or mat2.rank != 2:
            raise ShapeMismatchError(f"mm: expects 2-D tensors, got {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def bmm(self, mat2):
        """The batched product of two 3-D tensors of the same batch size."""
        if self.rank != 3 or mat2.rank != 3 or self.shape[0] != mat2.shape[0]:
            raise ShapeMismatchError(
                f"bmm: expects 3-D tensors with one batch size, got {self.shape} and {mat2.shape}")
        return self.matmul(mat2)


    def einsum(self, equation, *operands):
        """``tl.einsum(equation, self, *operands)``."""
        return einsum(equation, self, *operands)

    # -- indexing ------------------------------------------------------------------------------
    def take_along_dim(self, indices, dim=None):
        """Values at ``indices`` along ``dim``, the two broadcast against each other
        (except along ``dim``); without ``dim``, indices into the flattened tensor."""
        if dim is None:
            return self.flatten_all().gather(indices.flatten_all(), 0).reshape(indices.shape)
        d = normalize_dim(dim, self.rank, "take_along_dim")
        if indices.rank != self.rank:
            raise ShapeMismatchError(
                f"take_along_dim: indices of shape {indices.shape} need rank {self.rank}")
        shape = np.broadcast_shapes(tuple(1 if i == d else n for i, n in enumerate(self.shape)),
                                    tuple(1 if i == d else n for i, n in enumerate(indices.shape)))
        src = self.broadcast_as(tuple(self.shape[d] if i == d else n for i, n in enumerate(shape)))
        ids = indices.broadcast_as(tuple(indices.shape[d] if i == d else n
                                         for i, n in enumerate(shape)))
        return src.gather(ids.contiguous(), d)

    def index_fill(self, dim, index, value):
        """A copy with the slices at ``index`` along ``dim`` set to ``value``."""
        d = normalize_dim(dim, self.rank, "index_fill")
        ids = index._host() if isinstance(index, TensorBase) else np.asarray(index)
        if not np.issubdtype(ids.dtype, np.integer):
            raise UnsupportedDTypeError(f"index_fill: index must be integers, got {ids.dtype}")
        picked = np.zeros(self.shape[d], dtype=bool)
        picked[ids.reshape(-1)] = True
        mask = picked.reshape((-1,) + (1,) * (self.rank - d - 1))
        return self.masked_fill(_on_device(mask, dt.bool_, self), value)


def _values_indices(values, indices):
    return ValuesIndices(values, indices)


_TYPE_NAMES = {"f32": "Float", "f64": "Double", "f16": "Half", "bf16": "BFloat16", "i64": "Long",
               "i32": "Int", "i16": "Short", "i8": "Char", "u8": "Byte", "bool": "Bool"}
