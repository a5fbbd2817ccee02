"""How each tallow dtype lives in a WGSL storage buffer and in registers.

u8, bool, i8, f16, bf16 and the small floats are packed into u32 words (4, 4, 4, 2,
2 and 4 per word: one byte per small float, as on the host) and converted in-shader
with bit-exact codecs (common.wgsl: round to nearest even, and the small floats'
overflow rules as ml_dtypes'), so they run on every adapter. Registers: u32 for u8,
u32 and bool (0 or 1); i32 for i8, i16 and i32 (sign-extended on load, wrapped on
store); f32 for every float but f64. f64 and i64 are native WGSL types that need
the adapter features ``shader-f64`` and ``shader-int64``.
"""

from __future__ import annotations

from ... import dtype as dt


class WgslType:
    __slots__ = ("dtype", "name", "store", "compute", "epw", "bits", "decode", "encode",
                 "feature", "is_float")

    def __init__(self, dtype, store, compute, epw=1, decode="{w}", encode=None, feature=None):
        self.dtype = dtype
        self.name = dtype.name
        self.store = store
        self.compute = compute
        self.epw = epw
        self.bits = 32 // epw if epw > 1 else dtype.size_in_bytes * 8
        self.decode = decode
        self.encode = encode
        self.feature = feature
        self.is_float = dtype.is_float

    @property
    def packed(self) -> bool:
        return self.epw > 1


def _small_float(dtype, codec):
    return WgslType(dtype, "u32", "f32", 4, f"{codec}_to_f32({{w}})", f"f32_to_{codec}({{v}})")


TYPES = {
    "bool": WgslType(dt.bool_, "u32", "u32", 4, "{w}", "select(0u, 1u, {v} != 0u)"),
    "u8": WgslType(dt.u8, "u32", "u32", 4, "{w}", "({v} & 0xffu)"),
    "u32": WgslType(dt.u32, "u32", "u32"),
    "i8": WgslType(dt.i8, "u32", "i32", 4, "(bitcast<i32>({w} << 24u) >> 24u)",
                   "(bitcast<u32>({v}) & 0xffu)"),
    "i16": WgslType(dt.i16, "u32", "i32", 2, "(bitcast<i32>({w} << 16u) >> 16u)",
                    "(bitcast<u32>({v}) & 0xffffu)"),
    "i32": WgslType(dt.i32, "i32", "i32"),
    "i64": WgslType(dt.i64, "i64", "i64", feature="shader-int64"),
    "f16": WgslType(dt.f16, "u32", "f32", 2, "f16_to_f32({w})", "f32_to_f16({v})"),
    "bf16": WgslType(dt.bf16, "u32", "f32", 2, "bf16_to_f32({w})", "f32_to_bf16({v})"),
    "f32": WgslType(dt.f32, "f32", "f32"),
    "f64": WgslType(dt.f64, "f64", "f64", feature="shader-f64"),
    "f8e4m3": _small_float(dt.f8e4m3, "f8e4m3"),
    "f6e2m3": _small_float(dt.f6e2m3, "f6e2m3"),
    "f6e3m2": _small_float(dt.f6e3m2, "f6e3m2"),
    "f4": _small_float(dt.f4, "f4"),
    "f8e8m0": _small_float(dt.f8e8m0, "f8e8m0"),
}
