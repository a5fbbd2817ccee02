"""Element-wise ops: unary, affine/powf/elu/clamp, binary (tensor and scalar),
comparisons, where_cond and casts. Each is one dispatch of a map kernel.

f16 and bf16 compute in f32 and round once; scalars are rounded to the tensor's
dtype first where the CPU backend (NumPy) does that. bool, i8 and i16 compute in 32-bit
registers (u32, i32) and are stored packed; comparisons give bool. The 8-, 6- and
4-bit floats compute in f32 as f16 does, rounded once per op (as on the CPU).
"""

from __future__ import annotations

from ... import dtype as dt
from ...errors import UnsupportedDTypeError
from ...op import INT_UNARY_OPS, OPS, UNARY_OPS, gpu_codes
from .checks import first_zero
from .kernels import family
from .launch import map_new
from .kernel_args import ZERO_SCALARS, pad_scalars, scalar_words


_MAP = ("map.wgsl",)
UNARY = family("unary", [("a", "in", 0), ("y", "out", 0)], math=True, includes=_MAP)
BINARY = family("binary", [("a", "in", 0), ("b", "in", 0), ("y", "out", 0)], math=True, includes=_MAP)
BINARY_SCALAR = family("binary_scalar", [("a", "in", 0), ("y", "out", 0)], math=True,
                       file="binary.wgsl", flags=("SCALAR",), includes=_MAP)
CMP = family("cmp", [("a", "in", 0), ("b", "in", 0), ("y", "out", "bool")], includes=_MAP)
CMP_SCALAR = family("cmp_scalar", [("a", "in", 0), ("y", "out", "bool")], file="cmp.wgsl",
                    flags=("SCALAR",), includes=_MAP)
WHERE = family("where", [("c", "in", 0), ("a", "in", 1), ("b", "in", 1), ("y", "out", 1)],
               main=1, includes=_MAP)
CAST = family("cast", [("a", "in", 0), ("y", "out", 1)], includes=_MAP)

# The kernels' op codes, from the op table (tallow/op.py; WGSL constants OP_<NAME>).
UNARY_CODES = gpu_codes("unary")  # with the parameterised ones: affine, powf, elu, clamp
AFFINE, POWF, ELU, CLAMP = (UNARY_CODES[name] for name in ("affine", "powf", "elu", "clamp"))
BINARY_CODES = gpu_codes("binary")
CMP_CODES = gpu_codes("cmp")
# Per-op pipeline-key caches: op -> constants tuple.
_UNARY_CONSTS = {name: (("OP", UNARY_CODES[name]),) for name in UNARY_OPS}
_BINARY_CONSTS = {name: (("OP", code),) for name, code in BINARY_CODES.items()}
_CMP_CONSTS = {name: (("OP", code),) for name, code in CMP_CODES.items()}


def _unsupported(s, op):
    st = s.bdev
    return UnsupportedDTypeError(
        f"{op}: not supported for dtype {s.dtype} on gpu:{st.ordinal} ({st.adapter_name})")


def _map1(s, layout, fam, constants, scalars=ZERO_SCALARS, out_dtype=None):
    state = s.bdev
    pipe = state.kernels.ref(fam, (s.dtype.name,), "main", constants)
    out_dtype = out_dtype or s.dtype
    n = layout.count
    return s._wrap(map_new(state, pipe, ((s, layout),), out_dtype, n, scalars), out_dtype, n)


_BITWISE = ("bit_and", "bit_or", "bit_xor")
_INT_DIVISIONS = ("div", "rem", "floor_div")


# Binary ops that two bool operands refuse, as in PyTorch (and on the CPU).
_BOOL_REFUSED = frozenset(("sub", "div", "rem", "floor_div", "pow"))


def _check_kernel_exists(storage, op):
    """The binary kernels have no integer pow and no float bitwise ops; bool refuses
    what PyTorch refuses."""
    dtype = storage.dtype
    is_int = dtype.is_int
    if (is_int and op == "pow") or (not is_int and op in _BITWISE):
        raise _unsupported(storage, op)
    if dtype.is_bool and op in _BOOL_REFUSED:
        raise UnsupportedDTypeError(f"{op}: not supported on two bool operands"
                                    + (" (use ^ or logical_xor, or ~ to invert a mask)" if op == "sub" else ""))



def _check_div(s, layout, op="div"):
    """Integer division refuses a zero divisor, as on the CPU: one small readback."""
    if first_zero(s, layout) is not None:
        raise ZeroDivisionError(f"{op}: integer division by zero")


class GpuElementwise:
    """Element-wise methods of ``GpuStorage``: unary, affine/powf/elu/clamp, binary, comparisons, where, casts."""

    __slots__ = ()

    def unary(self, op, layout):
        consts = _UNARY_CONSTS.get(op)
        if consts is None:
            raise ValueError(f"unknown unary op {op!r}")
        dtype = self.dtype
        if dtype.is_int and (dtype.is_bool or op not in INT_UNARY_OPS
                             or (OPS[op].dtypes == "signed" and not dtype.is_signed)):
            raise _unsupported(self, op)
        return _map1(self, layout, UNARY, consts)

    def affine(self, layout, mul, add):
        dtype = self.dtype
        if dtype.is_int:
            words = scalar_words(dtype, int(mul)) + scalar_words(dtype, int(add))
        else:
            words = scalar_words(dtype, mul, False) + scalar_words(dtype, add, False)
        return _map1(self, layout, UNARY, (("OP", AFFINE),), pad_scalars(words))

    def powf(self, layout, exponent):
        if not self.dtype.is_float:
            raise _unsupported(self, "powf")
        return _map1(self, layout, UNARY, (("OP", POWF),), pad_scalars(scalar_words(self.dtype, exponent, False)))

    def elu(self, layout, alpha):
        if not self.dtype.is_float:
            raise _unsupported(self, "elu")
        return _map1(self, layout, UNARY, (("OP", ELU),), pad_scalars(scalar_words(self.dtype, alpha, False)))

    def clamp(self, layout, low, high):
        dtype = self.dtype
        flags = (1 if low is not None else 0) | (2 if high is not None else 0)
        words = (scalar_words(dtype, low if low is not None else 0)
                 + scalar_words(dtype, high if high is not None else 0) + (flags, 0))
        return _map1(self, layout, UNARY, (("OP", CLAMP),), pad_scalars(words))

    def binary(self, op, lhs_layout, rhs, rhs_layout):
        consts = _BINARY_CONSTS.get(op)
        if consts is None:
            raise ValueError(f"unknown binary op {op!r}")
        dtype = self.dtype
        _check_kernel_exists(self, op)
        if dtype.is_int and op in _INT_DIVISIONS:
            _check_div(rhs, rhs_layout, op)
        state = self.bdev
        pipe = state.kernels.ref(BINARY, (dtype.name,), "main", consts)
        n = lhs_layout.count
        buf = map_new(state, pipe, ((self, lhs_layout), (rhs, rhs_layout)), dtype, n)
        return self._wrap(buf, dtype, n)

    def binary_scalar(self, op, layout, scalar, scalar_on_left):
        code = BINARY_CODES.get(op)
        if code is None:
            raise ValueError(f"unknown binary op {op!r}")
        dtype = self.dtype
        _check_kernel_exists(self, op)
        if dtype.is_int and op in _INT_DIVISIONS:
            if scalar_on_left:
                _check_div(self, layout, op)
            elif scalar == 0:
                raise ZeroDivisionError(f"{op}: integer division by zero")
        # NumPy rounds the scalar to a half dtype, except for pow (computed in f32).
        words = pad_scalars(scalar_words(dtype, scalar, op != "pow"))
        consts = (("OP", code), ("SCALAR_LEFT", bool(scalar_on_left)))
        return _map1(self, layout, BINARY_SCALAR, consts, words)

    def cmp(self, op, lhs_layout, rhs, rhs_layout):
        state = self.bdev
        pipe = state.kernels.ref(CMP, (self.dtype.name,), "main", _CMP_CONSTS[op])
        n = lhs_layout.count
        buf = map_new(state, pipe, ((self, lhs_layout), (rhs, rhs_layout)), dt.bool_, n)
        return self._wrap(buf, dt.bool_, n)

    def cmp_scalar(self, op, layout, scalar):
        words = pad_scalars(scalar_words(self.dtype, scalar))
        return _map1(self, layout, CMP_SCALAR, _CMP_CONSTS[op], words, out_dtype=dt.bool_)

    def where_cond(self, layout, on_true, true_layout, on_false, false_layout):
        state = self.bdev
        dtype = on_true.dtype
        pipe = state.kernels.ref(WHERE, (self.dtype.name, dtype.name))
        n = layout.count
        ops = ((self, layout), (on_true, true_layout), (on_false, false_layout))
        return self._wrap(map_new(state, pipe, ops, dtype, n), dtype, n)

    def to_dtype(self, layout, dtype):
        state = self.bdev
        state.check_dtype(dtype, "to_dtype")
        n = layout.count
        if dtype is self.dtype:
            return self.copy_strided(layout)
        pipe = state.kernels.ref(CAST, (self.dtype.name, dtype.name))
        return self._wrap(map_new(state, pipe, ((self, layout),), dtype, n), dtype, n)
