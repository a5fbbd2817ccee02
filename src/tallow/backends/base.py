"""The backend protocol: what every backend implements.

A backend has two halves, as in candle (``BackendDevice`` / ``BackendStorage``):

* a *device state* (one object per physical device, shared by every ``Device``
  handle that names it) that creates storages and owns queues, pools and seeds;
* *storages*: a flat buffer of one dtype on that device. Every op takes one or
  more ``(storage, layout)`` pairs and returns a **new** storage holding the
  result contiguously (row-major, offset 0), except the ``*_inplace`` methods,
  which write into ``self``.

Backends never see a Tensor. The Tensor layer has already checked shapes,
dtypes and devices, resolved dims and broadcast layouts (stride 0) before it
calls in, so a backend may assume well-formed arguments; it must still refuse a
dtype it cannot run with ``UnsupportedDTypeError`` (naming op, dtype, device) and
must never read or write outside a buffer.

Layouts may have any non-negative strides, including 0 (broadcast) and
non-mergeable batch strides; a backend reads them directly rather than asking
for a copy first.

A backend's storage class lists its op families as mixins, with this protocol
class last, e.g. ``class CpuStorage(CpuCore, CpuElementwise, CpuReduce, ...,
BackendStorage)``: every op a storage runs is visible in its class's MRO, and
the defaults here apply only to what no mixin defines.

Optional fused ops (``softmax_last_dim``, ``rms_norm``, ``layer_norm``, ``rope``...)
raise ``NotImplementedError`` here; ``tallow.nn.ops`` then composes them from the
primitives, so a new backend works before it has them. The quantized ops
(``dequantize``, ``qmatmul_t``) are optional too: a device whose
``qmatmul_path`` is None gets the weights dequantized on the CPU and uploaded.
"""

from __future__ import annotations

# The op names of ``unary``, ``binary`` and ``cmp``, from the op table (tallow/op.py).
from ..op import BINARY_OPS, CMP_OPS, INT_UNARY_OPS, UNARY_OPS  # noqa: F401  (re-exported)


class BackendDevice:
    """One physical device. Subclasses set ``kind`` ("cpu" / "gpu") and ``ordinal``."""

    kind: str
    ordinal: int
    id: int  # in-process id: two handles name the same device iff their ids are equal
    handle = None  # the public Device handle, made by the front end (tallow.device.Device.of)

    # -- creation: each returns a new contiguous storage of ``count`` elements ----
    def zeros(self, count: int, dtype):
        raise NotImplementedError

    def full(self, count: int, dtype, value):
        raise NotImplementedError

    def arange(self, start, step, count: int, dtype):
        """``start + i * step`` for i in 0..count-1, computed in the dtype's precision."""
        raise NotImplementedError

    def rand_uniform(self, count: int, dtype, low: float, high: float):
        raise NotImplementedError

    def rand_normal(self, count: int, dtype, mean: float, std: float):
        raise NotImplementedError

    def from_numpy(self, array, dtype, copy: bool = True):
        """A storage holding a C-contiguous NumPy array's elements (flattened).

        ``copy=False`` asks to keep the caller's buffer (CPU only); other devices
        always upload.
        """
        raise NotImplementedError

    # -- device control ----------------------------------------------------------
    def set_seed(self, seed: int) -> None:
        raise NotImplementedError

    def synchronize(self) -> None:
        pass

    def supports_dtype(self, dtype) -> bool:
        return True

    def check_dtype(self, dtype, op: str) -> None:
        """Raise ``UnsupportedDTypeError`` (naming the op, the dtype and the device)
        when this device cannot hold ``dtype``."""
        if not self.supports_dtype(dtype):
            from ..errors import UnsupportedDTypeError

            raise UnsupportedDTypeError(f"{op}: dtype {dtype} is not supported on device {self.handle}")

    def info(self) -> dict:
        raise NotImplementedError

    # -- optional: quantized weights ------------------------------------------------
    def qmatmul_path(self, ggml_type):
        """The name of the kernels this device runs ``dequantize`` / ``qmatmul_t`` with
        for GGML type ``ggml_type`` (a ``tallow.quantized.GgmlType``), shown as
        ``QMatMul.path``; None when it has none for that type."""
        return None


class BackendStorage:
    """A flat buffer of ``count`` elements of ``dtype`` on ``device``.

    ``bdev`` is the storage's device state (a class or instance attribute).
    """

    __slots__ = ()
    dtype: object
    count: int

    @property
    def device(self):
        """The public ``Device`` handle of the device this storage lives on."""
        return self.bdev.handle

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.size_in_bytes

    @property
    def buffer_size(self) -> int:
        """Bytes of the buffer behind the storage (a GPU pool bucket may be larger)."""
        return self.nbytes

    @property
    def ptr(self) -> int:
        """An integer identifying the buffer: equal for two storages iff they share it."""
        raise NotImplementedError

    # -- moving data out ---------------------------------------------------------
    def to_numpy(self, layout):
        """The elements of ``layout`` as a NumPy array of ``layout.shape``.

        On the CPU this may be a view of the buffer; elsewhere it is a copy (a
        readback, which waits for the work that produces it).
        """
        raise NotImplementedError

    # -- element-wise ------------------------------------------------------------
    def to_dtype(self, layout, dtype):
        raise NotImplementedError

    def unary(self, op: str, layout):
        """One of ``UNARY_OPS``. ``gelu_erf`` computes in f64 internally."""
        raise NotImplementedError

    def affine(self, layout, mul: float, add: float):
        """``x * mul + add`` (on integers: with the scalars cast to the dtype)."""
        raise NotImplementedError

    def powf(self, layout, exponent: float):
        raise NotImplementedError

    def elu(self, layout, alpha: float):
        raise NotImplementedError

    def clamp(self, layout, low, high):
        """``min(max(x, low), high)``; either bound may be None."""
        raise NotImplementedError

    def binary(self, op: str, lhs_layout, rhs, rhs_layout):
        """One of ``BINARY_OPS`` on two layouts of the same shape.

        Integer ``div`` truncates toward zero (as Rust does) and refuses a zero divisor;
        ``rem`` and ``floor_div`` follow Python (floored), and refuse a zero integer
        divisor too; ``bit_*`` refuse float dtypes.
        """
        raise NotImplementedError

    def binary_scalar(self, op: str, layout, scalar, scalar_on_left: bool):
        """``x op scalar`` (or ``scalar op x``); the scalar already fits the dtype."""
        raise NotImplementedError

    def cmp(self, op: str, lhs_layout, rhs, rhs_layout):
        """One of ``CMP_OPS``; the result storage is u8 (1 where true)."""
        raise NotImplementedError

    def cmp_scalar(self, op: str, layout, scalar):
        raise NotImplementedError

    def where_cond(self, layout, on_true, true_layout, on_false, false_layout):
        """``self`` is the (integer) condition: nonzero picks ``on_true``."""
        raise NotImplementedError

    # -- reductions --------------------------------------------------------------
    def reduce(self, op: str, layout, dims: tuple):
        """``op`` ("sum", "max", "min", "argmax" or "argmin") over the sorted ``dims``,
        keeping them as size 1.

        ``argmax`` / ``argmin`` take exactly one dim and return u32 (first index of
        the extreme value). Sums of f16/bf16 accumulate in f32; integer sums wrap
        in their own dtype (as candle).
        """
        raise NotImplementedError

    def cumsum(self, layout, dim: int):
        raise NotImplementedError

    def arg_sort_last_dim(self, layout, ascending: bool):
        """u32 indices that sort each row of the last dim (stable)."""
        raise NotImplementedError

    # -- matrix products ---------------------------------------------------------
    def matmul(self, lhs_layout, rhs, rhs_layout):
        """Batched ``(..., m, k) @ (..., k, n)``; batch dims equal (possibly stride 0).

        Any strides: transposed operands, non-mergeable batch strides, broadcast
        batches. f16/bf16 compute with f32 accumulation.
        """
        raise NotImplementedError

    # -- copies and in-place writes ---------------------------------------------
    def copy_strided(self, layout):
        """A compact contiguous copy of the elements of ``layout``."""
        raise NotImplementedError

    def copy_into_inplace(self, dst_layout, src, src_layout):
        """Write ``src``'s elements into the ``dst_layout`` view of ``self``."""
        raise NotImplementedError

    def fill_inplace(self, layout, value):
        raise NotImplementedError

    def add_scaled_inplace(self, layout, src, src_layout, alpha: float):
        """``self[layout] += alpha * src`` (same shape, float dtypes): an optimiser's step.

        This default composes ``binary_scalar``, ``binary`` and ``copy_into_inplace``
        (one temporary each); a backend may write it in place.
        """
        from ..layout import Layout

        flat = Layout.contiguous_of(layout.shape)
        scaled = src.binary_scalar("mul", src_layout, float(alpha), False)
        total = self.binary("add", layout, scaled, flat)
        self.copy_into_inplace(layout, total, flat)

    # -- indexing ----------------------------------------------------------------
    def index_select(self, layout, ids, ids_layout, dim: int):
        """Rows ``ids`` (1-D, u8/u32/i64) of ``dim``.

        An id equal to u32::MAX (or i64::MAX) selects nothing: zeros. An id past
        the dim raises ``IndexOutOfRangeError`` (or, where checking would stall the
        device, yields zeros; never wraps, never reads out of bounds).
        """
        raise NotImplementedError

    def gather(self, layout, ids, ids_layout, dim: int):
        """``out[..., i, ...] = self[..., ids[..., i, ...], ...]`` along ``dim``."""
        raise NotImplementedError

    def scatter_inplace(self, layout, ids, ids_layout, src, src_layout, dim: int, accumulate: bool):
        """``self[..., ids[i], ...] (+)= src[..., i, ...]`` along ``dim`` (ids shaped like src)."""
        raise NotImplementedError

    def index_add_inplace(self, layout, ids, ids_layout, src, src_layout, dim: int):
        """``self.narrow(dim, ids[i], 1) += src.narrow(dim, i, 1)`` for each i (ids 1-D)."""
        raise NotImplementedError

    # -- convolutions and pooling ------------------------------------------------
    def conv1d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        raise NotImplementedError

    def conv2d(self, layout, kernel, kernel_layout, padding, stride, dilation, groups):
        raise NotImplementedError

    def conv_transpose1d(self, layout, kernel, kernel_layout, padding, output_padding,
                         stride, dilation, groups):
        raise NotImplementedError

    def conv_transpose2d(self, layout, kernel, kernel_layout, padding, output_padding,
                         stride, dilation, groups):
        raise NotImplementedError

    def avg_pool2d(self, layout, kernel: tuple, stride: tuple):
        raise NotImplementedError

    def max_pool2d(self, layout, kernel: tuple, stride: tuple):
        raise NotImplementedError

    def upsample_nearest1d(self, layout, size: int):
        raise NotImplementedError

    # Optional backward kernels (NotImplementedError: autograd composes them from the
    # ops above, as it does on a backend without them).
    def conv2d_kernel_grad(self, layout, grad, grad_layout, kernel_shape: tuple, padding,
                           stride, dilation, groups):
        """dL/dkernel of ``conv2d``: ``self`` the input, ``grad`` dL/doutput; a new storage
        of ``kernel_shape`` (c_out, c_in / groups, kh, kw)."""
        raise NotImplementedError

    def max_pool2d_backward(self, layout, grad, grad_layout, kernel: tuple, stride: tuple):
        """dL/dinput of ``max_pool2d``: ``self`` the input; each window's gradient goes to
        its first maximum, or its last NaN (PyTorch's choice); overlapping windows add up."""
        raise NotImplementedError

    def avg_pool2d_backward(self, layout, input_shape: tuple, kernel: tuple, stride: tuple):
        """dL/dinput of ``avg_pool2d``: ``self`` dL/doutput, spread evenly over each window."""
        raise NotImplementedError

    def upsample_nearest2d(self, layout, h: int, w: int):
        raise NotImplementedError

    # -- optional fused ops (NotImplementedError: tallow.nn.ops composes them) -------
    def softmax_last_dim(self, layout):
        raise NotImplementedError

    def rms_norm(self, layout, alpha, alpha_layout, eps: float):
        raise NotImplementedError

    def layer_norm(self, layout, alpha, alpha_layout, beta, beta_layout, eps: float):
        raise NotImplementedError

    def gelu_erf_fast(self, layout):
        """Exact-form GELU in the tensor's own precision (within 1e-6 of ``gelu_erf``)."""
        raise NotImplementedError

    def bias_gelu_erf(self, layout, bias, bias_layout):
        """``gelu_erf(x + bias)``, bias ``(n,)`` of the last dim or None."""
        raise NotImplementedError

    def add_layer_norm(self, layout, residual, residual_layout, bias, bias_layout,
                       alpha, alpha_layout, beta, beta_layout, eps: float):
        """``layer_norm(x + bias + residual) * alpha + beta``; residual x's shape, bias
        and beta ``(n,)`` or None."""
        raise NotImplementedError

    def rope(self, layout, cos, cos_layout, sin, sin_layout, interleaved: bool):
        """Rotary embedding of ``(b, h, t, d)``; cos/sin ``(t, d/2)`` or ``(b, t, d/2)``."""
        raise NotImplementedError

    def linear(self, layout, weight, weight_layout, bias, bias_layout):
        """``x @ weight.T + bias`` for x ``(..., k)``, weight ``(n, k)``, bias ``(n,)`` or None."""
        raise NotImplementedError

    def linear_backward(self, layout, weight, weight_layout, grad, grad_layout, wanted):
        """The gradients of ``linear`` at x (this storage, ``(m, k)``) and ``weight``
        (``(n, k)``) from the output's ``grad`` (``(m, n)``): ``(grad @ weight, grad^T @
        x, grad summed over its rows)``, storages of ``(m, k)``, ``(n, k)`` and ``(n,)``
        elements, each None where ``wanted`` (three bools) says it is not needed.

        This default makes the backend calls of the composed rule (``g.matmul(w)``,
        ``g.t().matmul(x)``, ``g.sum(0)``), so the results are that rule's bits; what it
        saves is the Tensor layer around each of them."""
        want_x, want_w, want_b = wanted
        gx = grad.matmul(grad_layout, weight, weight_layout) if want_x else None
        gw = grad.matmul(grad_layout.transpose(0, 1), self, layout) if want_w else None
        gb = grad.reduce("sum", grad_layout, (0,)) if want_b else None
        return gx, gw, gb

    def relu_backward(self, layout, grad, grad_layout):
        """ReLU's gradient at x (this storage): ``grad`` where x > 0, else 0 (``grad *
        (x > 0)`` in grad's dtype, as the composed rule computes it), contiguous of x's
        shape. NotImplementedError: the composed rule answers."""
        raise NotImplementedError

    def cross_entropy_ids(self, layout, ids, ids_layout, ignore_index: int, mean: bool,
                          with_grad: bool):
        """Cross entropy of logits ``(n, c)`` at integer class ids ``(n,)``, ids equal to
        ``ignore_index`` left out, reduced by the mean over the kept rows (``mean``) or
        the sum: ``(loss storage of shape (), gradient (n, c) wrt the logits or None)``.
        NotImplementedError (also for ids out of range): composed from primitives."""
        raise NotImplementedError

    def attention_packed(self, layout, k, k_layout, v, v_layout, lengths, scale: float):
        """Self-attention over packed sequences: q, k, v ``(tokens, heads, dim)``, ``lengths``
        the tokens of each sequence (each attends to its own); ``(tokens, heads, dim_v)``."""
        raise NotImplementedError

    def attention(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale: float):
        """``softmax(q k^T * scale + mask) v``: q ``(b, h, sq, d)``, k/v ``(b, hk, sk, d)``
        (h a multiple of hk), mask None or additive, broadcastable to ``(b, h, sq, sk)``."""
        raise NotImplementedError

    # -- optional: quantized weights (where the device's ``qmatmul_path`` is not None) --
    def dequantize(self, layout, ggml_type, n_elements: int):
        """``self`` holds GGML blocks of ``ggml_type`` as u8 (``layout`` 1-D over their
        bytes); a new f32 storage of the ``n_elements`` values they encode."""
        raise NotImplementedError

    def prepare_qweight(self, layout, ggml_type, n: int, k: int):
        """The weight ``(n, k)`` whose blocks ``self`` holds in the form ``qmatmul_t``
        reads (built once and kept while the storage lives), or None where the blocks
        are read as they are. Its ``nbytes`` is what a product reads."""
        return None

    def qmatmul_t(self, layout, weight, weight_layout, ggml_type, n: int, k: int):
        """``x @ W.T`` as ggml computes it: ``self`` f32 activations ``(..., k)`` (any
        strides), ``weight`` the u8 blocks of a ``(n, k)`` ``ggml_type`` matrix; the
        activations are quantized to the type's dot type, block sums are exact
        integers. A new f32 storage ``(..., n)``."""
        raise NotImplementedError
