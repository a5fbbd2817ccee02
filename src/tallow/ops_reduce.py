"""Reductions (sum/mean/max/min/arg*), variance, cumsum, log-sum-exp, norms, sorting.

``x_keepdim(dims)`` keeps the reduced dims as size 1; ``x(dims)`` squeezes them,
recorded as two ops (keepdim then squeeze), as candle does.
"""

from __future__ import annotations

from . import dtype as dt
from .errors import ShapeMismatchError, ShapeTooLargeError, UnsupportedDTypeError
from .layout import Layout
from .op import record1
from .shape import normalize_dim, normalize_dims

_contig = Layout.contiguous_of
_HALF = (dt.f16, dt.bf16)
GPU_MAX_ELEMENTS = 2**32 - 1  # the GPU kernels index with u32


def _keep_shape(shape, dims):
    return tuple(1 if i in dims else n for i, n in enumerate(shape))


class ReduceOps:
    __slots__ = ()

    def _reduce(self, op, dims, name):
        lay = self._layout
        if lay.count > GPU_MAX_ELEMENTS and self.device.kind != "cpu":
            raise ShapeTooLargeError(
                f"{name}: shape {lay.shape} has {lay.count} elements; GPU reductions take "
                f"at most {GPU_MAX_ELEMENTS} (32-bit indices)")
        out_shape = _keep_shape(lay.shape, dims)
        out = self._storage.reduce(op, lay, dims)
        rec = None
        if op in ("sum", "max", "min"):
            rec = record1(name, self, dims)
        return self._wrap(out, _contig(out_shape), rec)

    def _single_dim(self, dim, name):
        if isinstance(dim, (list, tuple)):
            if len(dim) != 1:
                raise ShapeMismatchError(f"{name}: expects a single dim, got {dim}")
            dim = dim[0]
        return normalize_dim(dim, self.rank, name)

    # -- sums and means -------------------------------------------------------------
    def sum_keepdim(self, dims):
        dims = normalize_dims(dims, self.rank, "sum_keepdim")
        return self._reduce("sum", dims, "sum_keepdim")

    def sum(self, dims):
        dims = normalize_dims(dims, self.rank, "sum")
        return self._reduce("sum", dims, "sum_keepdim").squeeze_dims(dims)

    def sum_all(self):
        dims = tuple(range(self.rank))
        return self._reduce("sum", dims, "sum_keepdim").reshape(())

    def _mean_scale(self, dims, name):
        if not self.dtype.is_float:
            raise UnsupportedDTypeError(f"{name}: needs a float dtype, got {self.dtype}")
        n = 1
        for d in dims:
            n *= self._layout.shape[d]
        return 1.0 / n if n else float("nan")

    def _half_in_f32(self, f):
        """``f`` of this f16/bf16 tensor computed in f32 (PyTorch's accumulation): the f32
        sum rounded to f16 before scaling overflows (100.0 * 1000 elements is inf)."""
        return f(self.to_dtype(dt.f32)).to_dtype(self.dtype)

    def mean_keepdim(self, dims):
        dims = normalize_dims(dims, self.rank, "mean_keepdim")
        if self.dtype in _HALF:
            return self._half_in_f32(lambda t: t.mean_keepdim(dims))
        return self.sum_keepdim(dims) * self._mean_scale(dims, "mean_keepdim")

    def mean(self, dims):
        dims = normalize_dims(dims, self.rank, "mean")
        if self.dtype in _HALF:
            return self._half_in_f32(lambda t: t.mean(dims))
        return self.sum(dims) * self._mean_scale(dims, "mean")

    def mean_all(self):
        if self.dtype in _HALF:
            return self._half_in_f32(lambda t: t.mean_all())
        return self.sum_all() * self._mean_scale(tuple(range(self.rank)), "mean_all")

    # -- extremes -------------------------------------------------------------------------
    def max_keepdim(self, dim):
        d = self._single_dim(dim, "max_keepdim")
        return self._reduce("max", (d,), "max_keepdim")

    def max(self, dim):
        d = self._single_dim(dim, "max")
        return self._reduce("max", (d,), "max_keepdim").squeeze(d)

    def min_keepdim(self, dim):
        d = self._single_dim(dim, "min_keepdim")
        return self._reduce("min", (d,), "min_keepdim")

    def min(self, dim):
        d = self._single_dim(dim, "min")
        return self._reduce("min", (d,), "min_keepdim").squeeze(d)

    def max_all(self):
        dims = tuple(range(self.rank))
        return self._reduce("max", dims, "max_keepdim").reshape(())

    def min_all(self):
        dims = tuple(range(self.rank))
        return self._reduce("min", dims, "min_keepdim").reshape(())

    def argmax_keepdim(self, dim):
        d = self._single_dim(dim, "argmax_keepdim")
        return self._reduce("argmax", (d,), "argmax_keepdim")

    def argmax(self, dim):
        d = self._single_dim(dim, "argmax")
        return self._reduce("argmax", (d,), "argmax_keepdim").squeeze(d)

    def argmin_keepdim(self, dim):
        d = self._single_dim(dim, "argmin_keepdim")
        return self._reduce("argmin", (d,), "argmin_keepdim")

    def argmin(self, dim):
        d = self._single_dim(dim, "argmin")
        return self._reduce("argmin", (d,), "argmin_keepdim").squeeze(d)

    # -- statistics -------------------------------------------------------------------------
    def var_keepdim(self, dim, unbiased=True):
        """Variance over ``dim`` (n - 1 in the denominator, as candle), kept as size 1."""
        d = self._single_dim(dim, "var_keepdim")
        if self.dtype in _HALF:
            return self._half_in_f32(lambda t: t.var_keepdim(d, unbiased))
        n = self._layout.shape[d]
        mean = self.mean_keepdim(d)
        centred = self.broadcast_sub(mean)
        denom = (n - 1) if unbiased else n
        # Corrected two-pass: the rounding error e of the mean adds n e^2 to the sum of
        # squares (1000x PyTorch's error on rows with a large mean); the sum of the
        # centred values is n e, so (sum c)^2 / n takes it off again.
        rest = centred.sum_keepdim(d)
        ss = centred.sqr().sum_keepdim(d) - rest.sqr() * (1.0 / n if n else 0.0)
        return ss * (1.0 / denom if denom > 0 else float("nan"))

    def var(self, dim, unbiased=True):
        d = self._single_dim(dim, "var")
        return self.var_keepdim(d, unbiased).squeeze(d)

    def cumsum(self, dim):
        d = normalize_dim(dim, self.rank, "cumsum")
        out = self._storage.cumsum(self._layout, d)
        return self._wrap(out, _contig(self._layout.shape), record1("cumsum", self, d))

    def log_sum_exp(self, dims):
        """``log(sum(exp(x)))`` over ``dims``, stable (the max is subtracted first)."""
        dims = normalize_dims(dims, self.rank, "log_sum_exp")
        if not dims:
            return self
        mx = self.max_keepdim(dims[0])
        for d in dims[1:]:
            mx = mx.max_keepdim(d)
        mx = mx.detach()
        # An infinite max (a row of -inf, or one holding +inf) is replaced by 0, as
        # PyTorch does: x - max would be inf - inf = nan.
        mx = mx.abs().eq(float("inf")).where_cond(0.0, mx)
        s = self.broadcast_sub(mx).exp().sum(dims)
        return s.log() + mx.squeeze_dims(dims)

    def norm(self):
        """The Frobenius norm: ``sqrt(sum(x^2))`` over every element."""
        return self.sqr().sum_all().sqrt()

    # -- sorting ------------------------------------------------------------------------------
    def arg_sort_last_dim(self, asc=True):
        if self.rank == 0:
            raise ShapeMismatchError("arg_sort_last_dim: needs rank >= 1")
        out = self._storage.arg_sort_last_dim(self._layout, bool(asc))
        return self._wrap(out, _contig(self._layout.shape))

    def sort_last_dim(self, asc=True):
        """(sorted values, u32 indices) along the last dim."""
        idx = self.arg_sort_last_dim(asc)
        return self.gather(idx, self.rank - 1), idx
