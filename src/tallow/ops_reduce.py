"""Reductions (sum/mean/max/min/arg*), variance, cumsum, log-sum-exp, norms, sorting.

``x_keepdim(dims)`` keeps the reduced dims as size 1; ``x(dims)`` squeezes them,
recorded as two ops (keepdim then squeeze), as candle does. The PyTorch spellings
are the same methods: ``sum(dim=None, keepdim=False)`` (no dim: every dim),
``max(dim)`` -> ``(values, indices)``, ``var``/``std`` unbiased by default.

Sums of bool, u8, i8, i16 and i32 accumulate in i64 and return i64, as PyTorch's
do, so counting a mask never wraps; means of integers return f32.
"""

from __future__ import annotations

from collections import namedtuple

from . import dtype as dt
from .errors import ShapeMismatchError, ShapeTooLargeError, UnsupportedDTypeError
from .layout import Layout
from .limits import check_allocation
from .op import record1
from .shape import normalize_dim, normalize_dims
from .tensor_base import TensorBase

_contig = Layout.contiguous_of
_HALF = (dt.f16, dt.bf16) + dt.SMALL_FLOATS  # mean/var computed in f32
GPU_MAX_ELEMENTS = 2**32 - 1  # the GPU kernels index with u32

ValuesIndices = namedtuple("ValuesIndices", ("values", "indices"))
ValuesIndices.__doc__ = """(values, indices) of ``max(dim)``, ``min(dim)``, ``sort`` and
``topk``, as PyTorch's named tuples; indices are i64."""


def _keep_shape(shape, dims):
    return tuple(1 if i in dims else n for i, n in enumerate(shape))


def _dims_arg(name, dims, dim):
    """The dims of a reduction given as ``dims`` (candle) or ``dim`` (PyTorch)."""
    if dims is not None and dim is not None:
        raise TypeError(f"{name}: give dims or dim, not both")
    return dim if dims is None else dims


# Below this many elements no check of a materialised size is worth its cost.
_CHECK_ABOVE = 2**31


# Sums of these accumulate in, and return, i64 (as PyTorch's: a mask of 300 ones sums
# to 300); u32 keeps candle's u32 sums.
_SUM_WIDENED = frozenset((dt.bool_, dt.u8, dt.i8, dt.i16, dt.i32))


def _wide_int(t):
    """The dtype integer sums accumulate in: i64 (u32 where the device has no i64)."""
    return dt.i64 if t.device.supports_dtype(dt.i64) else dt.u32


class ReduceOps:
    __slots__ = ()

    def _reduce(self, op, dims, name):
        if op == "sum" and self._storage.dtype in _SUM_WIDENED:
            # A u8 sum would wrap at 256 (a mask of 300 ones summing to 44). The
            # widened copy holds one element per stored one: reduced broadcast dims
            # are left out of it and made up for by a multiplication.
            wide = _wide_int(self)
            narrowed, copies = self._reduced_broadcast_dropped(dims)
            out = narrowed.to_dtype(wide)._reduce(op, dims, name)
            # u32 (a device without i64) wraps at 2^32 as the repeated sum would.
            return out if copies == 1 else out * (copies % 2**32 if wide is dt.u32 else copies)
        lay = self._layout
        if lay.count > GPU_MAX_ELEMENTS and self.device.kind != "cpu":
            raise ShapeTooLargeError(
                f"{name}: shape {lay.shape} has {lay.count} elements; GPU reductions take "
                f"at most {GPU_MAX_ELEMENTS} (32-bit indices)")
        out_shape = _keep_shape(lay.shape, dims)
        if lay.count > _CHECK_ABOVE:  # the result of a huge (broadcast) view must fit
            check_allocation(name, out_shape, dt.u32 if op.startswith("arg") else self.dtype,
                             self.device)
        out = self._storage.reduce(op, lay, dims)
        rec = None
        if op in ("sum", "max", "min"):
            rec = record1(name, self, dims)
        return self._wrap(out, _contig(out_shape), rec)

    def _reduced_broadcast_dropped(self, dims):
        """(this tensor with each reduced broadcast dim, of stride 0, narrowed to
        size 1, the number of copies so dropped): a sum over such a dim is that
        number times the sum over one element of it, and every other reduction
        the reduction over one. Not recorded: for untracked tensors only."""
        lay, copies = self._layout, 1
        for d in dims:
            if lay.stride[d] == 0 and lay.shape[d] > 1:
                copies *= lay.shape[d]
                lay = lay.narrow(d, 0, 1)
        return (self._wrap(self._storage, lay) if copies > 1 else self), copies

    def _check_materialised(self, name, dtype=None):
        """The full-size intermediate ``name`` computes (``var``'s centred values,
        ``cumsum``'s running sums) can exist: a huge broadcast view fails here with
        ShapeTooLargeError, before any work, rather than in the allocator."""
        if self._layout.count > _CHECK_ABOVE:
            check_allocation(name, self._layout.shape, dtype or self.dtype, self.device)

    def _single_dim(self, dim, name):
        if isinstance(dim, (list, tuple)):
            if len(dim) != 1:
                raise ShapeMismatchError(f"{name}: expects a single dim, got {dim}")
            dim = dim[0]
        return normalize_dim(dim, self.rank, name)

    def _all_dims(self):
        return tuple(range(self.rank))

    # -- sums and means -------------------------------------------------------------
    def sum_keepdim(self, dims):
        """Sum over ``dims`` (an int or a sequence), keeping them as size 1 (candle).

        bool/u8/i8/i16/i32 sums return i64 (they never wrap); u32 and i64 sums wrap in their dtype.
        """
        dims = normalize_dims(dims, self.rank, "sum_keepdim")
        return self._reduce("sum", dims, "sum_keepdim")

    def sum(self, dims=None, keepdim=False, *, dim=None):
        """Sum over ``dims`` (or PyTorch's ``dim=``; an int or a sequence), dropping
        them unless ``keepdim``; with no dims, over every element (a rank-0 tensor).
        bool/u8/i8/i16/i32 sums return i64, as PyTorch's."""
        dims = _dims_arg("sum", dims, dim)
        if dims is None:
            out = self.sum_all()
            return out.reshape((1,) * self.rank) if keepdim else out
        dims = normalize_dims(dims, self.rank, "sum")
        out = self._reduce("sum", dims, "sum_keepdim")
        return out if keepdim else out.squeeze_dims(dims)

    def sum_all(self):
        """The sum of every element, as a rank-0 tensor (bool and narrow integer sums return i64)."""
        return self._reduce("sum", self._all_dims(), "sum_keepdim").reshape(())

    def _mean_scale(self, dims, name):
        if not self.dtype.is_float:
            raise UnsupportedDTypeError(f"{name}: needs a float dtype, got {self.dtype}")
        n = 1
        for d in dims:
            n *= self._layout.shape[d]
        return 1.0 / n if n else float("nan")

    def _half_in_f32(self, f, name):
        """``f`` of this f16/bf16 tensor computed in f32 (PyTorch's accumulation): the f32
        sum rounded to f16 before scaling overflows (100.0 * 1000 elements is inf)."""
        self._check_materialised(name, dt.f32)
        return f(self.to_dtype(dt.f32)).to_dtype(self.dtype)

    def _half_mean_in_f32(self, dims, f, name):
        """A mean of this f16/bf16 tensor in f32: of an untracked tensor over one
        element of each reduced broadcast dim (a mean of copies is the mean of
        one), so that a huge broadcast view is never widened."""
        if not self._track:
            narrowed, copies = self._reduced_broadcast_dropped(dims)
            if copies > 1:
                return narrowed._half_in_f32(f, name)
        return self._half_in_f32(f, name)

    def _int_mean(self, dims, keepdim):
        """The f32 mean of an integer tensor, from an exact wide integer sum."""
        dims = self._all_dims() if dims is None else normalize_dims(dims, self.rank, "mean")
        n = 1
        for d in dims:
            n *= self._layout.shape[d]
        # The widened copy skips the reduced broadcast dims: their mean is that of one copy.
        narrowed, copies = self._reduced_broadcast_dropped(dims)
        total = narrowed.to_dtype(_wide_int(self)).sum(dims, keepdim=keepdim)
        n //= copies
        return total.to_dtype(dt.f32) * (1.0 / n if n else float("nan"))

    def mean_keepdim(self, dims):
        """Mean over ``dims``, kept as size 1 (integers: an f32 mean of an exact sum)."""
        dims = normalize_dims(dims, self.rank, "mean_keepdim")
        if self.dtype.is_int:
            return self._int_mean(dims, True)
        if self.dtype in _HALF:
            return self._half_mean_in_f32(dims, lambda t: t.mean_keepdim(dims), "mean_keepdim")
        return self.sum_keepdim(dims) * self._mean_scale(dims, "mean_keepdim")

    def mean(self, dims=None, keepdim=False, *, dim=None):
        """Mean over ``dims`` (or ``dim=``), dropping them unless ``keepdim``; with no
        dims over every element. Integer tensors give an f32 mean (no wrapping)."""
        dims = _dims_arg("mean", dims, dim)
        if dims is None:
            out = self.mean_all()
            return out.reshape((1,) * self.rank) if keepdim else out
        dims = normalize_dims(dims, self.rank, "mean")
        if keepdim:
            return self.mean_keepdim(dims)
        if self.dtype.is_int:
            return self._int_mean(dims, False)
        if self.dtype in _HALF:
            return self._half_mean_in_f32(dims, lambda t: t.mean(dims), "mean")
        return self.sum(dims) * self._mean_scale(dims, "mean")

    def mean_all(self):
        """The mean of every element, as a rank-0 tensor (integers give f32)."""
        if self.dtype.is_int:
            return self._int_mean(None, False)
        if self.dtype in _HALF:
            return self._half_mean_in_f32(self._all_dims(), lambda t: t.mean_all(), "mean_all")
        return self.sum_all() * self._mean_scale(self._all_dims(), "mean_all")

    # -- extremes -------------------------------------------------------------------------
    def max_keepdim(self, dim):
        """The largest values over ``dim``, kept as size 1 (candle)."""
        d = self._single_dim(dim, "max_keepdim")
        return self._reduce("max", (d,), "max_keepdim")

    def min_keepdim(self, dim):
        """The smallest values over ``dim``, kept as size 1 (candle)."""
        d = self._single_dim(dim, "min_keepdim")
        return self._reduce("min", (d,), "min_keepdim")

    def _extreme(self, op, dim, keepdim):
        if dim is None:
            return self.max_all() if op == "max" else self.min_all()
        if isinstance(dim, TensorBase):
            # PyTorch's max(a, b) / min(a, b): the element-wise maximum / minimum.
            return self.broadcast_maximum(dim) if op == "max" else self.broadcast_minimum(dim)
        d = self._single_dim(dim, op)
        values = self._reduce(op, (d,), op + "_keepdim")
        indices = self._arg(op, d)
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return ValuesIndices(values, indices)

    def max(self, dim=None, keepdim=False):
        """PyTorch's ``max``: no dim -> the largest element (rank 0); ``max(dim)`` ->
        ``(values, indices)`` (i64 indices of the first maximum); ``max(tensor)`` ->
        the element-wise maximum. candle's ``max(dim)`` (values only) is
        ``max(dim).values`` or ``max_keepdim(dim).squeeze(dim)``."""
        return self._extreme("max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        """PyTorch's ``min``: as ``max``, for the smallest values."""
        return self._extreme("min", dim, keepdim)

    def max_all(self):
        """The largest element, as a rank-0 tensor."""
        return self._reduce("max", self._all_dims(), "max_keepdim").reshape(())

    def min_all(self):
        """The smallest element, as a rank-0 tensor."""
        return self._reduce("min", self._all_dims(), "min_keepdim").reshape(())

    def amax(self, dim=None, keepdim=False):
        """PyTorch's ``amax``: the largest values over ``dim`` (an int or a sequence)."""
        return self._amin_amax("max", dim, keepdim)

    def amin(self, dim=None, keepdim=False):
        """PyTorch's ``amin``: the smallest values over ``dim`` (an int or a sequence)."""
        return self._amin_amax("min", dim, keepdim)

    def _amin_amax(self, op, dim, keepdim):
        dims = self._all_dims() if dim is None else normalize_dims(dim, self.rank, "a" + op)
        out = self._reduce(op, dims, op + "_keepdim")
        return out if keepdim else out.squeeze_dims(dims)

    def _arg(self, op, d):
        """i64 indices of the first extreme over dim ``d``, kept as size 1."""
        out = self._reduce("arg" + op, (d,), "arg" + op + "_keepdim")
        return out.to_dtype(dt.i64) if self.device.supports_dtype(dt.i64) else out

    def _flat_arg(self, op):
        """The index of the first extreme in the flattened tensor, rank 0.

        Flattening a broadcast view would copy every repeat; the first extreme
        lies where every broadcast coordinate is 0, so the search runs over one
        element of each broadcast dim and the index found there is mapped back to
        the full shape."""
        narrowed, copies = self._reduced_broadcast_dropped(self._all_dims())
        flat = narrowed.flatten_all()._arg(op, 0).reshape(())
        if copies == 1:
            return flat
        index, rest, stride = flat * 0, flat, 1
        for n_small, n_full in zip(reversed(narrowed.shape), reversed(self.shape)):
            if n_small > 1:  # a dim kept whole: its coordinate counts at the full stride
                index = index + (rest % n_small) * stride
                rest = rest // n_small
            stride *= n_full
        return index

    def argmax_keepdim(self, dim):
        """Indices (i64) of the first maximum over ``dim``, kept as size 1."""
        return self._arg("max", self._single_dim(dim, "argmax_keepdim"))

    def argmax(self, dim=None, keepdim=False):
        """Indices (i64) of the first maximum over ``dim``; with no dim, the index into
        the flattened tensor (PyTorch)."""
        return self._argext("max", dim, keepdim)

    def argmin_keepdim(self, dim):
        """Indices (i64) of the first minimum over ``dim``, kept as size 1."""
        return self._arg("min", self._single_dim(dim, "argmin_keepdim"))

    def argmin(self, dim=None, keepdim=False):
        """Indices (i64) of the first minimum over ``dim`` (no dim: of the flattened tensor)."""
        return self._argext("min", dim, keepdim)

    def _argext(self, op, dim, keepdim):
        if dim is None:
            out = self._flat_arg(op)
            return out.reshape((1,) * self.rank) if keepdim else out
        d = self._single_dim(dim, "arg" + op)
        out = self._arg(op, d)
        return out if keepdim else out.squeeze(d)

    # -- logical reductions -----------------------------------------------------------------
    def any(self, dim=None, keepdim=False):
        """bool: True where some element over ``dim`` (default: all) is nonzero."""
        self._check_materialised("any", dt.bool_)
        return self.ne(0)._amin_amax("max", dim, keepdim)

    def all(self, dim=None, keepdim=False):
        """bool: True where every element over ``dim`` (default: all) is nonzero."""
        self._check_materialised("all", dt.bool_)
        return self.ne(0)._amin_amax("min", dim, keepdim)

    # -- statistics -------------------------------------------------------------------------
    def var_keepdim(self, dim, unbiased=True):
        """Variance over ``dim`` (n - 1 in the denominator, as candle), kept as size 1."""
        d = self._single_dim(dim, "var_keepdim")
        return self._variance((d,), 1 if unbiased else 0, True)

    def _variance(self, dims, correction, keepdim):
        if not self.dtype.is_float:
            raise UnsupportedDTypeError(f"var: needs a float dtype, got {self.dtype}")
        if self.dtype in _HALF:
            return self._half_in_f32(lambda t: t._variance(dims, correction, keepdim), "var")
        self._check_materialised("var")
        n = 1
        for d in dims:
            n *= self._layout.shape[d]
        mean = self.mean_keepdim(dims)
        centred = self.broadcast_sub(mean)
        denom = n - correction
        # Corrected two-pass: the rounding error e of the mean adds n e^2 to the sum of
        # squares (1000x PyTorch's error on rows with a large mean); the sum of the
        # centred values is n e, so (sum c)^2 / n takes it off again.
        rest = centred.sum_keepdim(dims)
        ss = centred.sqr().sum_keepdim(dims) - rest.sqr() * (1.0 / n if n else 0.0)
        out = ss * (1.0 / denom if denom > 0 else float("nan"))
        return out if keepdim else out.squeeze_dims(dims)

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        """Variance over ``dim`` (an int, a sequence, or None for every element).

        Unbiased (n - 1) by default, as PyTorch and candle; ``unbiased=False`` or
        ``correction=0`` divides by n, ``correction=c`` by n - c.
        """
        if unbiased is not None and correction is not None:
            raise TypeError("var: give unbiased or correction, not both")
        if correction is None:
            correction = 0 if unbiased is False else 1
        dims = self._all_dims() if dim is None else normalize_dims(dim, self.rank, "var")
        return self._variance(dims, correction, keepdim)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        """Standard deviation: ``sqrt(var(...))`` with the same arguments (unbiased by default)."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def cumsum(self, dim):
        """Running sums along ``dim`` (bool, u8, i8, i16 and i32 accumulate and return i64, as PyTorch)."""
        d = normalize_dim(dim, self.rank, "cumsum")
        self._check_materialised("cumsum", dt.i64 if self.dtype in _SUM_WIDENED else None)
        if self._storage.dtype in _SUM_WIDENED:
            return self.to_dtype(_wide_int(self)).cumsum(d)
        out = self._storage.cumsum(self._layout, d)
        return self._wrap(out, _contig(self._layout.shape), record1("cumsum", self, d))

    def log_sum_exp(self, dims):
        """``log(sum(exp(x)))`` over ``dims``, stable (the max is subtracted first)."""
        dims = normalize_dims(dims, self.rank, "log_sum_exp")
        if not dims:
            return self
        self._check_materialised("log_sum_exp")  # exp(x - max) is full-size
        mx = self.max_keepdim(dims[0])
        for d in dims[1:]:
            mx = mx.max_keepdim(d)
        mx = mx.detach()
        # An infinite max (a row of -inf, or one holding +inf) is replaced by 0, as
        # PyTorch does: x - max would be inf - inf = nan.
        mx = mx.abs().eq(float("inf")).where_cond(0.0, mx)
        s = self.broadcast_sub(mx).exp().sum(dims)
        return s.log() + mx.squeeze_dims(dims)

    def logsumexp(self, dim, keepdim=False):
        """PyTorch's ``logsumexp``: ``log_sum_exp`` over ``dim`` (an int or a sequence)."""
        dims = normalize_dims(dim, self.rank, "logsumexp")
        out = self.log_sum_exp(dims)
        return out.reshape(_keep_shape(self.shape, dims)) if keepdim else out

    def norm(self, p="fro", dim=None, keepdim=False):
        """The 2-norm (Frobenius): ``sqrt(sum(x^2))`` over every element, or over ``dim``
        (PyTorch's ``norm``; ``p`` may be 2/"fro", 1 or ``inf``)."""
        self._check_materialised("norm")  # x^2 or |x| is full-size
        if p in ("fro", 2, 2.0):
            return self.sqr().sum(dim, keepdim=keepdim).sqrt()
        if p in (1, 1.0):
            return self.abs().sum(dim, keepdim=keepdim)
        if p == float("inf"):
            return self.abs().amax(dim, keepdim=keepdim)
        raise ValueError(f"norm: p={p!r} is not supported (2, 'fro', 1 or inf)")

    # -- sorting ------------------------------------------------------------------------------
    def arg_sort_last_dim(self, asc=True):
        """u32 indices that sort the last dim (stable), ascending unless ``asc=False`` (candle)."""
        if self.rank == 0:
            raise ShapeMismatchError("arg_sort_last_dim: needs rank >= 1")
        out = self._storage.arg_sort_last_dim(self._layout, bool(asc))
        return self._wrap(out, _contig(self._layout.shape))

    def sort_last_dim(self, asc=True):
        """(sorted values, u32 indices) along the last dim."""
        idx = self.arg_sort_last_dim(asc)
        return self.gather(idx, self.rank - 1), idx

    def sort(self, dim=-1, descending=False, stable=True):
        """PyTorch's ``sort`` along any ``dim``: ``(values, indices)`` with i64 indices.

        The sort is always stable (equal values keep their order), descending too.
        """
        if self.rank == 0:
            return ValuesIndices(self, self.zeros((), dtype=dt.i64, device=self.device))
        d = normalize_dim(dim, self.rank, "sort")
        last = self.rank - 1
        moved = self.transpose(d, last) if d != last else self
        idx = moved.arg_sort_last_dim(not descending)
        values = moved.gather(idx, last)
        if self.device.supports_dtype(dt.i64):
            idx = idx.to_dtype(dt.i64)
        if d != last:
            values, idx = values.transpose(d, last), idx.transpose(d, last)
        return ValuesIndices(values, idx)

    def argsort(self, dim=-1, descending=False, stable=True):
        """i64 indices that sort ``dim`` (stable), as PyTorch's ``argsort``."""
        return self.sort(dim, descending, stable).indices

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The ``k`` largest (or smallest) values along ``dim`` and their i64 indices,
        largest first (smallest first with ``largest=False``), as PyTorch's ``topk``."""
        d = normalize_dim(dim, self.rank, "topk")
        k = int(k)
        if not 0 <= k <= self.shape[d]:
            raise ShapeMismatchError(f"topk: k={k} is out of range for dim {d} of size {self.shape[d]}")
        values, idx = self.sort(d, descending=bool(largest))
        return ValuesIndices(values.narrow(d, 0, k), idx.narrow(d, 0, k))
