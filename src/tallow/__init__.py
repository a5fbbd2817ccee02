"""tallow: a small, transparent tensor library on candle-core's design.

Tensors are a shared storage plus a layout; views are free and copies explicit;
ops are recorded only when a Var is involved. Backends: CPU (NumPy and its
BLAS) and GPU (WebGPU through wgpu).
"""

import importlib

from . import float_warnings
from .backprop import GradStore
from .creation import (
    arange, cat, eye, from_dlpack, from_numpy, full, full_like, linspace, meshgrid, multinomial,
    ones, ones_like, rand, rand_like, randint, randn, randn_like, randperm, stack, tensor, tril2,
    triu2, where, zeros, zeros_like,
)
from .custom_op import CustomOp1, CustomOp2, CustomOp3, InplaceOp1, InplaceOp2
from .device import Device, cpu, manual_seed
from .dtype import (
    DType, bf16, f4, f6e2m3, f6e3m2, f8e4m3, f8e8m0, f16, f32, f64, i8, i16, i32, i64, u8, u32,
)
from .dtype import bool_ as bool  # noqa: A001  (PyTorch's ``torch.bool``; builtins.bool stays)
from .dtype import (  # PyTorch's names for the same dtypes
    bfloat16, float8_e4m3fn, float8_e8m0fnu, float16, float32, float64, int8, int16, int32, int64,
    uint8, uint32,
)
from .dtype import i64 as long  # noqa: E402  (PyTorch's torch.long)
from .dtype import promote_types, result_type
from .errors import (
    CaptureError, DeviceLostError, DeviceMismatchError, DimOutOfRangeError, DistributedError,
    DTypeMismatchError, EmbeddingIndexError, FileFormatError, FileWriteError, IndexOutOfRangeError,
    InplaceOnTrackedError, InvalidArgumentError, NarrowOutOfBoundsError, NoGradientError,
    NotContiguousError, NotDifferentiableError, OverlappingWriteError, ShapeMismatchError,
    ShapeTooLargeError, StaleGraphError, TallowError, UnsupportedDTypeError,
    ValueNotRepresentableError,
)
from .grad_mode import enable_grad, is_grad_enabled, no_grad
from .layout import Layout
from .serialization import load, save
from .shape import D
from .tensor_class import Tensor
from .var import Var
# PyTorch's module-level functions (tl.exp, tl.sum, tl.einsum, ...); tl.meshgrid also
# takes PyTorch's (*tensors, indexing=) form.
from .functions import *  # noqa: E402,F401,F403,A001
from . import functions as _functions  # noqa: E402
from . import testing, utils  # noqa: E402  (they import the names above)
# Defines Tensor.quantize on top of Tensor (tensor_class.py says why).
from . import quantized  # noqa: E402
from .quantized import QMatMul, QTensor  # noqa: E402
# The function, not the package of the same name: importing the package set the
# attribute first, this binds the name over it (later submodule imports leave it).
from .compile import CompiledFunction, compile  # noqa: E402,A004

__version__ = "0.1.0"

float_warnings.install()

_LAZY = ("nn", "models", "functional", "optim", "cuda")
_LAZY_NAMES = {}


def __getattr__(name):
    # tl.nn, tl.models, tl.functional, tl.optim and tl.cuda load on first use, so ``import tallow`` stays fast.
    if name in _LAZY or name in _LAZY_NAMES:
        module = importlib.import_module(f"{__name__}.{_LAZY_NAMES.get(name, name)}")
        return getattr(module, name) if name in _LAZY_NAMES else module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "Tensor", "Var", "Device", "DType", "Layout", "GradStore", "D", "cpu",
    "bool", "u8", "u32", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
    "f8e4m3", "f6e2m3", "f6e3m2", "f4", "f8e8m0", "promote_types", "result_type",
    "tensor", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "eye",
    "arange", "linspace", "rand", "randn", "rand_like", "randn_like", "cat", "stack",
    "from_numpy", "from_dlpack", "tril2", "triu2", "meshgrid",
    "CustomOp1", "CustomOp2", "CustomOp3", "InplaceOp1", "InplaceOp2",
    "TallowError", "ShapeMismatchError", "DTypeMismatchError", "DeviceMismatchError", "DeviceLostError",
    "UnsupportedDTypeError", "DimOutOfRangeError", "NarrowOutOfBoundsError",
    "IndexOutOfRangeError", "NotDifferentiableError", "FileFormatError",
    "InplaceOnTrackedError", "OverlappingWriteError", "NotContiguousError",
    "FileWriteError", "StaleGraphError", "NoGradientError", "ValueNotRepresentableError",
    "InvalidArgumentError", "ShapeTooLargeError", "DistributedError", "EmbeddingIndexError",
    "CaptureError",
    "float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8",
    "uint32", "long", "float8_e4m3fn", "float8_e8m0fnu",
    "manual_seed", "where", "randint", "randperm", "multinomial",
    "testing", "utils", "nn", "models", "quantized", "functional", "optim", "cuda", "QTensor",
    "compile", "CompiledFunction", "save", "load", "no_grad", "enable_grad", "is_grad_enabled",
]
__all__ += [n for n in _functions.__all__ if n not in __all__]
