"""How each tallow dtype lives in a WGSL storage buffer and in registers.

u8, f16 and bf16 are packed into u32 words (4, 2 and 2 per word) and converted
in-shader with bit-exact round-to-nearest-even codecs (common.wgsl), so they run
on every adapter; f64 and i64 are native WGSL types that need the adapter
features ``shader-f64`` and ``shader-int64``.
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


TYPES = {
    "u8": WgslType(dt.u8, "u32", "u32", 4, "{w}", "({v} & 0xffu)"),
    "u32": WgslType(dt.u32, "u32", "u32"),
    "i64": WgslType(dt.i64, "i64", "i64", feature="shader-int64"),
    "f16": WgslType(dt.f16, "u32", "f32", 2, "f16_to_f32({w})", "f32_to_f16({v})"),
    "bf16": WgslType(dt.bf16, "u32", "f32", 2, "bf16_to_f32({w})", "f32_to_bf16({v})"),
    "f32": WgslType(dt.f32, "f32", "f32"),
    "f64": WgslType(dt.f64, "f64", "f64", feature="shader-f64"),
}

