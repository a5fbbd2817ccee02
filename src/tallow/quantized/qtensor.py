"""QTensor and QMatMul: GGML block-quantized tensors at the Tensor level (candle's ``QTensor``).

A ``QTensor`` is the raw GGML blocks of a tensor (exactly the bytes a GGUF file
stores), its shape (row-major, the last dimension a multiple of the block
size) and the GGML type.  On the CPU the bytes are a NumPy ``uint8`` array
(for a tensor loaded from a GGUF file, a view of the file's memory map); on a
GPU they are a ``u8`` tensor on that device.

``QMatMul`` multiplies activations by a quantized ``(n, k)`` weight:
``forward(x) = x @ W.T`` for ``x`` of shape ``(..., k)``.  What it computes is
ggml's quantized matmul (see ``src/tallow/ggml/README.md``): the activations are
quantized to the weight format's dot type and block products are exact
integer sums, then scaled.  On the CPU that runs the C kernels of
:mod:`tallow.backends.cpu.native` for the formats they cover (Q4_0, Q8_0, Q5_0,
Q4K, Q6K; byte dot products), else the compiled kernel of
:mod:`tallow.backends.cpu.quantized.fast` (numba), else the NumPy path of
:mod:`tallow.backends.cpu.quantized.vec_dot`; all give the same bits.  F32/F16/BF16 weights, and every weight
when ``TALLOW_DEQUANTIZE_ALL=1`` (candle's ``CANDLE_DEQUANTIZE_ALL``) or
``QMatMul(qt, dequantize=True)``, are dequantized once and multiplied as an
f32 matrix instead.

The blocks are a 1-D u8 tensor on the QTensor's device; ``dequantize`` and the
product are the backend's optional quantized ops (``tallow.ops_quantized``).
The device's ``qmatmul_path`` names its kernels ("numba" / "numpy" on the CPU,
"gpu" for the types the GPU kernels support); where it has none for a type, the
weight is dequantized on the CPU and its f32 matrix uploaded once: the product
is then the f32 product (``DequantizeAll``), not ggml's quantized-activation
product.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import config
from .. import dtype as dt
from .. import ops_quantized as qops
from ..device import Device, cpu
from ..errors import DeviceMismatchError, ShapeMismatchError, UnsupportedDTypeError
from ..layout import Layout
from ..constructors import adopt_array
from ..tensor_class import Tensor
from ..ggml.blocks import as_bytes
from ..ggml.types import GgmlType, ggml_type

_contig = Layout.contiguous_of


def dequantize_all() -> bool:
    """``TALLOW_DEQUANTIZE_ALL`` is on (see tallow.config)."""
    return config.settings.dequantize_all


def _f32_tensor(arr: np.ndarray, shape, device: Device) -> Tensor:
    """A tensor taking over a freshly made f32 array."""
    storage = adopt_array(np.ascontiguousarray(arr, dtype=np.float32).reshape(-1), dt.f32, Device.cpu())
    t = Tensor._wrap(storage, _contig(tuple(shape)))
    return t if device.kind == "cpu" else t.to_device(device)


class QTensor:
    """GGML blocks + shape + type.  Build with ``Tensor.quantize(name)`` or ``QTensor.from_bytes``."""

    __slots__ = ("_type", "_shape", "_blocks", "_device", "_cache", "_lock", "__weakref__")

    def __init__(self, raw, shape, ggml_dtype, device=None):
        t = ggml_type(ggml_dtype)
        shape = tuple(int(d) for d in shape)
        if not shape:
            raise ShapeMismatchError(f"QTensor: a {t.name} tensor needs at least one dimension")
        if any(d < 0 for d in shape):
            raise ShapeMismatchError(f"QTensor: negative dimension in shape {shape}")
        if shape[-1] % t.block_size:
            raise ShapeMismatchError(
                f"QTensor: the last dimension of shape {shape} is not a multiple of the "
                f"{t.name} block size {t.block_size}")
        n_el = int(np.prod(shape, dtype=np.int64))
        expected = t.nbytes(n_el)
        device = Device.cpu() if device is None else Device.parse(device)
        if isinstance(raw, Tensor):
            if raw.dtype is not dt.u8 or raw.rank != 1:
                raise UnsupportedDTypeError(f"QTensor: raw blocks must be a 1-D u8 tensor, got {raw.dtype} {raw.shape}")
            blocks = raw.contiguous()
            device = raw.device
        else:
            # On the CPU the tensor keeps the array's buffer (a GGUF file's memory map).
            blocks = Tensor.from_vec(np.ascontiguousarray(as_bytes(raw)), None, cpu)
        nbytes = blocks.shape[0]
        if nbytes != expected:
            raise ShapeMismatchError(
                f"QTensor: shape {shape} as {t.name} takes {expected} bytes, got {nbytes}")
        self._type, self._shape, self._blocks, self._device = t, shape, blocks.to_device(device), device
        self._cache = {}
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def quantize(tensor: Tensor, ggml_dtype) -> "QTensor":
        """Quantize a float tensor (the last dimension a multiple of the block size)."""
        try:
            t = ggml_type(ggml_dtype)
        except (ValueError, TypeError) as e:
            raise UnsupportedDTypeError(f"quantize: {e}") from None
        if not tensor.dtype.is_float:
            raise UnsupportedDTypeError(f"quantize: expected a float tensor, got {tensor.dtype}")
        shape = tensor.shape
        if not shape:
            raise ShapeMismatchError(f"quantize: cannot quantize a scalar to {t.name}")
        if shape[-1] % t.block_size:
            raise ShapeMismatchError(
                f"quantize: the last dimension of shape {shape} is not a multiple of the "
                f"{t.name} block size {t.block_size}")
        raw = t.quantize(tensor.to_dtype(dt.f32).numpy()).reshape(-1)
        return QTensor(raw, shape, t, tensor.device)

    @staticmethod
    def from_bytes(data, shape, ggml_dtype, device=cpu) -> "QTensor":
        """A QTensor over raw GGML blocks (``bytes``, a buffer or a uint8 array, as ``to_bytes`` gives)."""
        return QTensor(data, shape, ggml_dtype, device)

    # -- inspection -----------------------------------------------------------------------
    @property
    def ggml_dtype(self) -> str:
        """The GGML type's name in upper case, as candle spells it ("Q4_0", "Q4K", "F32")."""
        return self._type.name

    @property
    def ggml_type(self) -> GgmlType:
        return self._type

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dims(self) -> tuple:
        return self._shape

    @property
    def rank(self) -> int:
        return len(self._shape)

    @property
    def elem_count(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    nelement = elem_count

    @property
    def device(self) -> Device:
        return self._device

    @property
    def nbytes(self) -> int:
        """Bytes of the GGML blocks."""
        return self._type.nbytes(self.elem_count)

    @property
    def raw(self):
        """The blocks: a uint8 NumPy array on the CPU, a 1-D u8 tensor on a GPU (no copy)."""
        return self.numpy_bytes() if self._device.is_cpu else self._blocks

    @property
    def blocks(self) -> Tensor:
        """The blocks as a 1-D u8 tensor on this QTensor's device (no copy)."""
        return self._blocks

    def __repr__(self) -> str:
        return (f"QTensor(shape={list(self._shape)}, ggml_dtype={self.ggml_dtype}, "
                f"device={self._device}, {self.nbytes} bytes)")

    # -- conversions ------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The raw GGML blocks, exactly as a GGUF file stores them."""
        return self.numpy_bytes().tobytes()

    def numpy_bytes(self) -> np.ndarray:
        """The raw blocks as a uint8 NumPy array (a view on the CPU)."""
        return np.ascontiguousarray(self._blocks.numpy())

    def dequantize(self) -> Tensor:
        """The values as an f32 tensor of this shape, on this QTensor's device."""
        if qops.qmatmul_path(self._device, self._type) is not None:
            return qops.dequantize(self._blocks, self._type, self._shape)
        values = self._type.dequantize(self.numpy_bytes(), self.elem_count)
        return _f32_tensor(values, self._shape, self._device)

    def to_device(self, device) -> "QTensor":
        device = Device.parse(device)
        if device.same_device(self._device):
            return self
        return QTensor(self._blocks.to_device(device), self._shape, self._type)

    def cpu(self) -> "QTensor":
        return self.to_device(Device.cpu())

    def gpu(self, ordinal: int = 0) -> "QTensor":
        return self.to_device(Device.gpu(ordinal))

    # -- products -----------------------------------------------------------------------------
    def matmul_t(self, lhs: Tensor) -> Tensor:
        """``lhs @ self.T`` for ``lhs`` of shape ``(..., k)`` and this QTensor ``(n, k)`` (QMatMul)."""
        return self._qmatmul().forward(lhs)

    def _qmatmul(self) -> "QMatMul":
        key = ("qmatmul", dequantize_all())
        qm = self._cache.get(key)
        if qm is None:
            qm = QMatMul(self)
            self._cache[key] = qm
        return qm

    def _cached(self, key, build):
        """A derived form of the weight (prepared layout, f32 matrix), built once."""
        v = self._cache.get(key)
        if v is None:
            with self._lock:
                v = self._cache.get(key)
                if v is None:
                    v = build()
                    self._cache[key] = v
        return v


class QMatMul:
    """``forward(x) = x @ W.T`` for a quantized ``(n, k)`` weight (candle's ``QMatMul``).

    ``dequantize``: None follows ``TALLOW_DEQUANTIZE_ALL``; True multiplies by the
    dequantized f32 weight; False always uses the quantized product.
    """

    def __init__(self, qtensor: QTensor, dequantize: bool | None = None):
        if not isinstance(qtensor, QTensor):
            raise TypeError(f"QMatMul: expected a QTensor, got {type(qtensor).__name__}")
        if qtensor.rank != 2:
            raise ShapeMismatchError(f"QMatMul: the weight must be (n, k), got shape {qtensor.shape}")
        self.qtensor = qtensor
        self.n, self.k = qtensor.shape
        t = qtensor.ggml_type
        if dequantize is None:
            dequantize = dequantize_all()
        kernels = qops.qmatmul_path(qtensor.device, t)
        if t.is_float or dequantize:
            self.path = "dequantized"
        elif kernels is None:
            self.path = f"{qtensor.device.kind}-dequantized"
        else:
            self.path = kernels

    @staticmethod
    def from_qtensor(qtensor: QTensor, dequantize: bool | None = None) -> "QMatMul":
        return QMatMul(qtensor, dequantize)

    @property
    def device(self) -> Device:
        return self.qtensor.device

    @property
    def shape(self) -> tuple:
        """The weight's ``(n, k)``."""
        return (self.n, self.k)

    def __repr__(self) -> str:
        return f"QMatMul({self.qtensor.ggml_dtype}, ({self.n}, {self.k}), {self.path}, {self.device})"

    # -- the prepared weight (kept by the QTensor, so every QMatMul over it shares it) --
    def weight(self) -> Tensor:
        """The dequantized f32 ``(n, k)`` weight (built once) used by the dequantized paths."""
        return self.qtensor._cached("dequantized", self.qtensor.dequantize)

    def _dequantized(self) -> bool:
        return self.path == "dequantized" or self.path.endswith("-dequantized")

    def prepared(self):
        """The backend's form of the weight for this QMatMul's kernels (built once), or
        None (dequantized paths, and backends that read the blocks as they are)."""
        if self._dequantized():
            return None
        return qops.prepare_qweight(self.qtensor.blocks, self.qtensor.ggml_type, self.n, self.k)

    @property
    def nbytes(self) -> int:
        """Memory of what the products read: the prepared layout, or the f32 matrix, or the blocks."""
        if self._dequantized():
            return self.n * self.k * 4
        p = self.prepared()
        return self.qtensor.nbytes if p is None else p.nbytes

    # -- forward ---------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"QMatMul.forward: expected a Tensor, got {type(x).__name__}")
        shape = x.shape
        if not shape or shape[-1] != self.k:
            raise ShapeMismatchError(
                f"QMatMul: input of shape {shape} does not end in {self.k} (weight {self.qtensor.ggml_dtype} "
                f"({self.n}, {self.k}))")
        if not x.dtype.is_float:
            raise UnsupportedDTypeError(f"QMatMul: expected a float input, got {x.dtype}")
        if not x.device.same_device(self.device):
            raise DeviceMismatchError(
                f"QMatMul: input on {x.device}, weight {self.qtensor.ggml_dtype} ({self.n}, {self.k}) on {self.device}")
        in_dtype = x.dtype
        x = x.to_dtype(dt.f32)
        if self._dequantized():
            # x @ W^T on the rows of x (the weight is an (n, k) f32 tensor)
            lead = shape[:-1]
            rows = 1
            for d in lead:
                rows *= d
            y = x.reshape((rows, self.k)).matmul(self.weight().t()).reshape(lead + (self.n,))
        else:
            y = qops.qmatmul_t(x, self.qtensor.blocks, self.qtensor.ggml_type, self.n, self.k)
        return y if in_dtype is dt.f32 else y.to_dtype(in_dtype)

    __call__ = forward


def quantize(tensor: Tensor, ggml_dtype) -> QTensor:
    """``tensor.quantize(ggml_dtype)``."""
    return QTensor.quantize(tensor, ggml_dtype)


def _tensor_quantize(self, ggml_dtype) -> QTensor:
    """A ``tallow.QTensor`` of this tensor in a GGML format ("q4_0", "q4k", "f16", ...)."""
    return QTensor.quantize(self, ggml_dtype)


# Tensor's quantize method, defined here on top of Tensor (tensor_class.py says why).
_tensor_quantize.__name__ = _tensor_quantize.__qualname__ = "quantize"
Tensor.quantize = _tensor_quantize
