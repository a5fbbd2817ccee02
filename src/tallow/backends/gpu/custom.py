"""User WGSL kernels, for custom ops' ``gpu_fwd`` (candle's ``metal_fwd``).

``run_wgsl`` compiles a user's WGSL compute shader once per (source, entry point,
inputs, outputs) on the device, and encodes one dispatch of it into the device's
queue like any built-in op: asynchronous, ordered with the other ops, its buffers
taken from the pool.

The shader's bindings follow tallow's convention (group 0):

* binding 0: ``var<uniform> P: Params`` with ``struct Params { w: array<vec4<u32>, 16> }``
  — up to 64 parameter words (``params``: ints as u32, floats bit-cast);
* bindings 1, 2, 3, 4: the input storages, ``var<storage, read>`` arrays;
* bindings 5, 6, 7: the outputs, ``var<storage, read_write>`` arrays, either new
  buffers (``outputs``: ``(dtype, count)`` pairs) or existing storages written in
  place (``inplace``: storages, for InplaceOp ``gpu_fwd``).

f32, u32 and i32 data can be declared as such; other dtypes are stored packed (f16
and bf16 two per u32, u8 four per u32) and the shader handles the packing.
"""

from __future__ import annotations

import struct

from ...errors import TallowError
from .commands import SLOT
from .kernels import MAX_INPUTS, MAX_OUTPUTS
from .storage import GpuStorage


class _CustomPipeline:
    __slots__ = ("raw", "obj", "sig")

    def __init__(self, obj, sig):
        self.obj = obj
        self.raw = obj._internal
        self.sig = sig


def _pipeline(state, code, entry, sig):
    cache = state.__dict__.setdefault("_custom_pipelines", {})
    key = (code, entry, sig)
    pipe = cache.get(key)
    if pipe is None:
        try:
            module = state.device.create_shader_module(label="custom", code=code)
            obj = state.device.create_compute_pipeline(
                label=f"custom:{entry}", layout=state.commands.pipeline_layout(sig),
                compute={"module": module, "entry_point": entry})
        except Exception as e:
            raise TallowError(f"custom WGSL kernel '{entry}' failed to compile: {e}") from None
        pipe = cache[key] = _CustomPipeline(obj, sig)
    return pipe


def _words(params):
    out = []
    for p in params:
        if isinstance(p, float):
            out.append(struct.unpack("<I", struct.pack("<f", p))[0])
        else:
            out.append(int(p) & 0xFFFFFFFF)
    if len(out) > SLOT // 4:
        raise TallowError(f"run_wgsl: at most {SLOT // 4} parameter words, got {len(out)}")
    return tuple(out)


def run_wgsl(code: str, *, inputs=(), outputs=(), inplace=(), params=(), workgroups=(1, 1, 1),
             entry: str = "main"):
    """Dispatch a WGSL kernel; returns the new output storages (a list).

    ``inputs``/``inplace`` are GpuStorages of one device; ``outputs`` are
    ``(DType, element_count)`` pairs for fresh buffers.
    """
    storages = list(inputs) + list(inplace)
    if not storages:
        raise TallowError("run_wgsl: needs at least one input or in-place storage (it names the device)")
    for s in storages:
        if not isinstance(s, GpuStorage):
            raise TallowError(f"run_wgsl: expected GPU storages, got {type(s).__name__}")
    state = storages[0].bdev
    if any(s.bdev is not state for s in storages):
        raise TallowError("run_wgsl: storages on different devices")
    n_out = len(outputs) + len(inplace)
    if len(inputs) > MAX_INPUTS or n_out > MAX_OUTPUTS:
        raise TallowError(f"run_wgsl: at most {MAX_INPUTS} inputs and {MAX_OUTPUTS} outputs")
    written = {s.buf.id for s in inplace}
    if any(s.buf.id in written for s in inputs):
        # WebGPU rejects a buffer bound both read-only and writable in one dispatch
        # (and would reject the whole batch with it, at submit).
        raise TallowError("run_wgsl: a buffer is bound both as an input and in place; "
                          "copy one of them first")
    sig = (len(inputs), n_out)
    pipe = _pipeline(state, code, entry, sig)
    words = _words(params)
    gx, gy, gz = (tuple(workgroups) + (1, 1))[:3]
    cmd = state.commands
    for dtype, _ in outputs:
        state.check_dtype(dtype, "run_wgsl")
    with cmd.lock:
        # Storages own the new buffers at once, so a dispatch that raises returns them.
        fresh = [state.storage(state.pool.alloc(max(1, int(count)) * dtype.size_in_bytes), dtype,
                      int(count)) for dtype, count in outputs]
        bufs = [s.buf for s in inputs] + [f.buf for f in fresh] + [s.buf for s in inplace]
        cmd.dispatch(pipe, bufs, words, int(gx), int(gy), int(gz))
    return fresh
