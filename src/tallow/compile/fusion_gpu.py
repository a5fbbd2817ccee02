"""Fusing runs of element-wise calls of a trace into one generated WGSL kernel.

The run (see ``elementwise.py``; f32 on the GPU) becomes one compute shader: one
invocation per element computes the whole chain in registers, reading each input
through its layout (offset, shape and strides are baked into the source as
constants, so a contiguous input is a plain index and a broadcast one a few integer
divisions) and writing only the values used later. Each op is written as the eager
kernels write it (NaN-propagating max/min, ``1.0 / x``, ``x * x``...). Scalar
operands come in the uniform parameters, as the eager kernels take them, not as
literals: the shader compiler would fold ``x * 0.0`` to 0 and ``0.0 / x`` to 0,
where eager gives NaN for an infinite or zero ``x``. The shader is
dispatched with ``run_wgsl``, which compiles a source once and caches the pipeline,
and takes up to 4 input and 3 output buffers: a longer run is not fused.
"""

from __future__ import annotations

import struct

from .. import dtype as dt
from . import elementwise

BACKEND, DTYPES = "GpuStorage", (dt.f32,)
MAX_INPUTS, MAX_OUTPUTS = 4, 3
PARAM_WORDS = 64  # the uniform's 16 vec4<u32>: the element count, then the constants
WORKGROUP = 64
MAX_GROUPS_X = 65535

_UNARY = {10: "-{a}", 11: "abs({a})", 12: "{a} * {a}", 13: "m_sqrt({a})", 14: "1.0 / {a}",
          15: "m_max({a}, 0.0)"}
_BINARY = {20: "{a} + {b}", 21: "{a} - {b}", 22: "{a} * {b}", 23: "{a} / {b}",
           24: "m_max({a}, {b})", 25: "m_min({a}, {b})"}

_HEADER = """struct Params { w: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;
fn isnan32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn m_max(a: f32, b: f32) -> f32 {
    if (isnan32(a)) { return a; }
    if (isnan32(b)) { return b; }
    return select(a, b, b > a);
}
fn m_min(a: f32, b: f32) -> f32 {
    if (isnan32(a)) { return a; }
    if (isnan32(b)) { return b; }
    return select(a, b, b < a);
}
fn m_sqrt(x: f32) -> f32 {
    if (x < 0.0) { return bitcast<f32>(0x7fc00000u); }
    return sqrt(x);
}
"""


def find_groups(calls, slots, live):
    """The GPU's fusable runs (see ``elementwise.find_groups``)."""
    return elementwise.find_groups(calls, slots, live, BACKEND, DTYPES)


def _f32_bits(value) -> int:
    return struct.unpack("<I", struct.pack("<f", float(value)))[0]


def _index(layout) -> str:
    """WGSL expression of the storage offset of element ``i`` of ``layout``."""
    if layout.contiguous:
        return f"{layout.start_offset}u + i" if layout.start_offset else "i"
    terms, inner = [], 1
    for n, s in reversed(list(zip(layout.shape, layout.stride))):
        if s and n > 1:
            coord = "i" if inner == 1 else f"(i / {inner}u)"
            if inner * n < layout.count:
                coord = f"({coord} % {n}u)"
            terms.append(f"{coord} * {s}u")
        inner *= n
    return " + ".join([f"{layout.start_offset}u"] + terms)


class GpuFusedGroup:
    """One fused run as a WGSL kernel: ``group(*input_storages)`` returns the output
    storages (``self.outputs`` order). ``ok`` is False when the run needs more
    buffers than one dispatch binds (then it is not used)."""

    def __init__(self, calls, slots, members, shape, dtype, live_after):
        from ..backends.gpu.custom import run_wgsl

        self._run = run_wgsl
        self.count = 1
        for n in shape:
            self.count *= n
        self.n_ops = 0
        self.inputs, value, body, stores = [], {}, [], []
        loads = {}
        self.constants = []  # f32 bit patterns, parameter words 1, 2, ...

        def operand(o, prev):
            if o == "prev":
                return prev
            if o[0] == "const":
                bits = _f32_bits(o[1])
                if bits not in self.constants:
                    self.constants.append(bits)
                word = 1 + self.constants.index(bits)
                return f"bitcast<f32>(P.w[{word // 4}][{word % 4}])"
            slot, lay = o
            if slot in value:
                return value[slot]
            name = loads.get((slot, lay))
            if name is None:
                if slot not in self.inputs:
                    self.inputs.append(slot)
                name = loads[(slot, lay)] = f"l{len(loads)}"
                body.append(f"    let {name} = in{self.inputs.index(slot)}[{_index(lay)}];")
            return name

        k = 0
        for i in members:
            call = calls[i]
            prev = None
            for code, operands in elementwise.element_op(call, slots, BACKEND, DTYPES)[2]:
                args = [operand(o, prev) for o in operands]
                text = _UNARY[code].format(a=args[0]) if code < 20 else _BINARY[code].format(a=args[0], b=args[1])
                prev = f"v{k}"
                k += 1
                body.append(f"    let {prev} = {text};")
                self.n_ops += 1
            value[call.out] = prev
            if call.out in live_after:
                body.append(f"    out{len(stores)}[i] = {prev};")
                stores.append(call.out)
        self.outputs = stores
        self.ok = (0 < len(self.inputs) <= MAX_INPUTS and 0 < len(stores) <= MAX_OUTPUTS
                   and 1 + len(self.constants) <= PARAM_WORDS)
        decls = [f"@group(0) @binding({1 + j}) var<storage, read> in{j}: array<f32>;"
                 for j in range(len(self.inputs))]
        decls += [f"@group(0) @binding({5 + j}) var<storage, read_write> out{j}: array<f32>;"
                  for j in range(len(stores))]
        groups = -(-self.count // WORKGROUP)
        self.workgroups = (min(groups, MAX_GROUPS_X), -(-groups // MAX_GROUPS_X))
        self.source = "\n".join([_HEADER, *decls, "",
            f"@compute @workgroup_size({WORKGROUP})",
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {",
            f"    let i = gid.x + gid.y * {self.workgroups[0] * WORKGROUP}u;",
            "    if (i >= P.w[0][0]) { return; }",
            *body, "}", ""])
        self._outputs = [(dtype, self.count)] * len(stores)

    def __call__(self, *inputs):
        return self._run(self.source, inputs=inputs, outputs=self._outputs,
                         params=(self.count, *self.constants), workgroups=self.workgroups)
