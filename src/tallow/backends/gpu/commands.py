"""The command stream: one encoder, one open compute pass, a uniform ring for op
parameters, submission every N ops, and readbacks that wait for their own
submission only.

This follows candle's Metal ``Commands``: every op takes the lock, encodes one
dispatch into the shared encoder and returns; after ``ops_per_submit`` ops the
batch is submitted (the GPU starts on it) and a new encoder begins. WebGPU
orders the dispatches of a queue and inserts the barriers between dependent
ones, so a buffer freed by one op and reused as the output of the next is safe.
The one hazard WebGPU leaves to us is ``queue.write_buffer``: it runs before the
*current* batch when that batch is submitted, so uploads never go into a buffer
the current batch still references (see ``BufferPool.alloc(avoid_batch=)``).

Op parameters go into a host-side ring (one slot per dispatch, aligned to the
adapter's uniform offset alignment) written to the GPU with one queue write just
before the batch is submitted, and bound with a dynamic offset, so the bind group
of a set of buffers is created once and reused by every op over those buffers.
The hot path calls wgpu-native's C functions directly (set pipeline, set bind
group, dispatch: about 2 us) instead of the Python wrappers (about 15 us).
"""

from __future__ import annotations

import collections
import struct
import threading

import numpy as np
from wgpu import BufferUsage, ShaderStage
from wgpu.backends.wgpu_native import _api
from wgpu.backends.wgpu_native._ffi import ffi, lib

from ... import config
from ...errors import TallowError
from .kernels import IN_BASE, OUT_BASE
from .lost import raise_if_lost
from .pool import PoolBuffer

libf = _api.libf
# Compute-pass commands go straight to the C library: wgpu records a bad command
# as an error of the encoder, which ``finish()`` (through the checked wrapper)
# raises, so nothing is lost by skipping the per-call error capture.
_set_pipeline = lib.wgpuComputePassEncoderSetPipeline
_set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
_dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
_poll = libf.wgpuDevicePoll
_submit = libf.wgpuQueueSubmitForIndex
_write_buffer = libf.wgpuQueueWriteBuffer

DEFAULT_OPS_PER_SUBMIT = config.default("gpu_ops_per_submit")
SLOT = 256  # bytes of parameters one dispatch may read (64 u32 words)
RING_BYTES = 256 * 1024
BIND_GROUP_CACHE = 8192
STAGING_CACHE_BYTES = 256 << 20
READ_CHUNK = 64 << 20
_STRUCTS = [struct.Struct(f"<{n}I") for n in range(SLOT // 4 + 1)]


def parse_ops_per_submit(value=config.FROM_ENV) -> int:
    """Ops per submission from a ``TALLOW_GPU_OPS_PER_SUBMIT`` value: unset -> 50;
    0 or 1 -> every op; an integer n -> n; anything else -> 50 with a warning (candle
    falls back silently)."""
    return max(config.count("TALLOW_GPU_OPS_PER_SUBMIT", DEFAULT_OPS_PER_SUBMIT, value), 1)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Commands:
    def __init__(self, state):
        self._state = state
        dev = self.device = state.device
        self.queue = dev.queue
        self._dev_raw = dev._internal
        self._queue_raw = dev.queue._internal
        self.lock = threading.Lock()
        self.per_submit = parse_ops_per_submit()
        lim = state.limits
        self.align = max(16, lim["min-uniform-buffer-offset-alignment"])
        self.max_binding = lim["max-storage-buffer-binding-size"]
        self.storage_align = lim["min-storage-buffer-offset-alignment"]
        self.max_groups = lim["max-compute-workgroups-per-dimension"]
        # The ring: host bytes plus the uniform buffer they are copied into.
        self.ring = bytearray(RING_BYTES + SLOT)
        self._ring_ptr = ffi.from_buffer(self.ring)
        self.ring_buf = dev.create_buffer(size=RING_BYTES + SLOT,
                                          usage=BufferUsage.UNIFORM | BufferUsage.COPY_DST)
        self.ring_pos = 0
        self._c_off = ffi.new("uint32_t[1]")
        # Encoding state.
        self.encoder = None
        self._pass = None
        self._pass_raw = None
        self._last_pipe = None
        self.batch = 1  # number of the batch being encoded
        self.in_batch = 0
        self._last_index = None
        self._graveyard = []  # objects dropped while the current batch may use them
        # Layouts and bind groups.
        self._bgls: dict = {}
        self._layouts: dict = {}
        self._bgs: dict = {}
        self._buf_keys = collections.defaultdict(list)
        self._staging = collections.defaultdict(list)
        self._staging_bytes = 0
        # Counters.
        self.ops = 0
        self.dispatches = 0
        self.submits = 0
        self.readbacks = 0
        self.bytes_uploaded = 0
        self.bytes_read_back = 0
        self.bind_groups_created = 0

    # -- layouts ----------------------------------------------------------------------
    def bind_group_layout(self, sig):
        bgl = self._bgls.get(sig)
        if bgl is None:
            n_in, n_out = sig
            entries = [{"binding": 0, "visibility": ShaderStage.COMPUTE,
                        "buffer": {"type": "uniform", "has_dynamic_offset": True,
                                   "min_binding_size": SLOT}}]
            for i in range(n_in):
                entries.append({"binding": IN_BASE + i, "visibility": ShaderStage.COMPUTE,
                                "buffer": {"type": "read-only-storage"}})
            for i in range(n_out):
                entries.append({"binding": OUT_BASE + i, "visibility": ShaderStage.COMPUTE,
                                "buffer": {"type": "storage"}})
            bgl = self._bgls[sig] = self.device.create_bind_group_layout(entries=entries)
        return bgl

    def pipeline_layout(self, sig):
        pl = self._layouts.get(sig)
        if pl is None:
            pl = self._layouts[sig] = self.device.create_pipeline_layout(
                bind_group_layouts=[self.bind_group_layout(sig)])
        return pl

    def _bind_group(self, key, sig, bufs):
        entries = [{"binding": 0, "resource": {"buffer": self.ring_buf, "offset": 0, "size": SLOT}}]
        n_in = sig[0]
        for i, b in enumerate(bufs):
            if type(b) is PoolBuffer:
                buf, off, size = b, 0, b.size
            else:
                buf, off, size = b
            if size > self.max_binding:
                raise TallowError(
                    f"a {size}-byte buffer exceeds the adapter's max storage binding size "
                    f"({self.max_binding} bytes) and this op cannot split its work")
            binding = IN_BASE + i if i < n_in else OUT_BASE + (i - n_in)
            entries.append({"binding": binding,
                            "resource": {"buffer": buf.gpu, "offset": off, "size": size}})
        bg = self.device.create_bind_group(layout=self.bind_group_layout(sig), entries=entries)
        self.bind_groups_created += 1
        if len(self._bgs) >= BIND_GROUP_CACHE:
            old = next(iter(self._bgs))
            self._graveyard.append(self._bgs.pop(old))
        entry = (bg, bg._internal)
        self._bgs[key] = entry
        for b in bufs:
            self._buf_keys[b.id if type(b) is PoolBuffer else b[0].id].append(key)
        return entry

    def forget(self, buffers) -> None:
        """Drop the cached bind groups that reference ``buffers`` (being released)."""
        for b in buffers:
            for key in self._buf_keys.pop(b.id, ()):
                entry = self._bgs.pop(key, None)
                if entry is not None:
                    self._graveyard.append(entry)

    # -- encoding (the caller holds self.lock) -------------------------------------------
    def _open_pass(self):
        if self.encoder is None:
            self.encoder = self.device.create_command_encoder()
        self._pass = self.encoder.begin_compute_pass()
        self._pass_raw = self._pass._internal
        self._last_pipe = None
        return self._pass_raw

    def _close_pass(self):
        if self._pass is not None:
            self._pass.end()
            self._graveyard.append(self._pass)
            self._pass = None
            self._pass_raw = None

    def dispatch(self, pipe, bufs, words, gx, gy=1, gz=1) -> None:
        """Encode one dispatch of ``pipe`` over ``bufs`` (inputs then outputs, each a
        PoolBuffer or a ``(PoolBuffer, offset, size)`` window) with parameter words."""
        mg = self.max_groups
        if gx > mg or gy > mg or gz > mg:
            # WebGPU would record this as an error of the encoder and reject the whole
            # batch at submit, losing every op queued with it: refuse it here instead.
            raise TallowError(
                f"a dispatch of ({gx}, {gy}, {gz}) workgroups exceeds the adapter's limit of "
                f"{mg} workgroups per dimension")
        pos = self.ring_pos
        if pos + SLOT > RING_BYTES:
            self.flush_locked()
            pos = 0
        nw = len(words)
        try:
            _STRUCTS[nw].pack_into(self.ring, pos, *words)
        except struct.error:
            from ...errors import ShapeTooLargeError

            big = next((w for w in words if not 0 <= w <= 0xFFFFFFFF), None)
            raise ShapeTooLargeError(
                f"a GPU kernel parameter ({big}) does not fit the kernels' 32-bit sizes and "
                "strides (limit 4294967295): the tensor or view is too large for the GPU"
            ) from None
        self.ring_pos = pos + ((nw * 4 + self.align - 1) & -self.align)
        batch = self.batch
        if len(bufs) == 2 and type(bufs[0]) is PoolBuffer and type(bufs[1]) is PoolBuffer:
            a, b = bufs
            key = (pipe.sig, a.id, b.id)
            a.batch = b.batch = batch
        else:
            ids = []
            for b in bufs:
                if type(b) is PoolBuffer:
                    ids.append(b.id)
                    b.batch = batch
                else:
                    ids.append((b[0].id, b[1], b[2]))
                    b[0].batch = batch
            key = (pipe.sig, *ids)
        entry = self._bgs.get(key)
        if entry is None:
            entry = self._bind_group(key, pipe.sig, bufs)
        p = self._pass_raw
        if p is None:
            p = self._open_pass()
        if pipe is not self._last_pipe:
            _set_pipeline(p, pipe.raw)
            self._last_pipe = pipe
        self._c_off[0] = pos
        _set_bind_group(p, 0, entry[1], 1, self._c_off)
        _dispatch(p, gx, gy, gz)
        self.dispatches += 1
        self.ops += 1
        self.in_batch += 1
        if self.in_batch >= self.per_submit:
            self.flush_locked()

    def copy(self, src, src_off, dst, dst_off, size) -> None:
        """Encode a buffer-to-buffer copy (offsets and size multiples of 4)."""
        self._close_pass()
        if self.encoder is None:
            self.encoder = self.device.create_command_encoder()
        gsrc = src.gpu if type(src) is PoolBuffer else src
        gdst = dst.gpu if type(dst) is PoolBuffer else dst
        self.encoder.copy_buffer_to_buffer(gsrc, src_off, gdst, dst_off, size)
        if type(src) is PoolBuffer:
            src.batch = self.batch
        if type(dst) is PoolBuffer:
            dst.batch = self.batch
        self.ops += 1
        self.in_batch += 1

    def flush_locked(self):
        """Submit the current batch; returns its submission index (or the last one)."""
        if self.encoder is None:
            return self._last_index
        try:
            self._close_pass()
            cb = self.encoder.finish()
        except Exception as e:
            # A bad command invalidated the batch: drop it (its ops are lost and the
            # error says why) so the device keeps working for what comes next.
            self._pass = self._pass_raw = self.encoder = self._last_pipe = None
            self.batch += 1
            self.ring_pos = 0
            self.in_batch = 0
            raise_if_lost(self._state, "submitting the queued work", e)
            raise
        try:
            if self.ring_pos:
                _write_buffer(self._queue_raw, self.ring_buf._internal, 0, self._ring_ptr, self.ring_pos)
            arr = ffi.new("WGPUCommandBuffer[1]", [cb._internal])
            idx = int(_submit(self._queue_raw, 1, arr))
        except Exception as e:
            raise_if_lost(self._state, "submitting the queued work", e)
            raise
        self.encoder = None
        self._last_pipe = None
        self.batch += 1
        self.ring_pos = 0
        self.in_batch = 0
        self.submits += 1
        self._last_index = idx
        self._graveyard.clear()
        return idx

    def wait(self, idx) -> None:
        if idx is None:
            return
        _poll(self._dev_raw, True, ffi.new("WGPUSubmissionIndex *", idx))

    # -- public operations (take the lock themselves) -----------------------------------
    def flush(self):
        with self.lock:
            return self.flush_locked()

    def synchronize(self) -> None:
        with self.lock:
            idx = self.flush_locked()
            self._release_unused()
        self.wait(idx)

    def _release_unused(self):
        dropped = self._state.pool.trim()
        if dropped:
            self.forget(dropped)

    def set_ops_per_submit(self, value) -> int:
        n = max(config.parse_count("ops_per_submit", value, DEFAULT_OPS_PER_SUBMIT), 1)
        with self.lock:
            self.per_submit = n
        return n

    def upload(self, array: np.ndarray) -> PoolBuffer:
        """A pool buffer holding the bytes of a C-contiguous array."""
        nbytes = array.nbytes
        with self.lock:
            buf = self._state.pool.alloc(nbytes, avoid_batch=self.batch)
            if nbytes:
                if nbytes % 4:
                    padded = bytearray((nbytes + 3) & ~3)
                    padded[:nbytes] = array.reshape(-1).view(np.uint8).data
                    ptr, n = ffi.from_buffer(padded), len(padded)
                else:
                    ptr, n = ffi.from_buffer(array), nbytes
                try:  # (a buffer the pool reuses meets a lost device here first)
                    _write_buffer(self._queue_raw, buf.gpu._internal, 0, ptr, n)
                except Exception as e:
                    raise_if_lost(self._state, f"uploading {nbytes} bytes", e)
                    raise
                self.bytes_uploaded += nbytes
        return buf

    def read(self, buf: PoolBuffer, offset: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes of ``buf`` from ``offset``, as a fresh uint8 array: waits
        for the submission that carries the copy, and only for that one. Reads of
        more than READ_CHUNK bytes go in chunks (bounded staging memory)."""
        out = np.empty(nbytes, np.uint8)
        pos = 0
        while pos < nbytes:
            n = min(READ_CHUNK, nbytes - pos)
            self._read_into(buf, offset + pos, n, out[pos:pos + n])
            pos += n
        return out

    def _read_into(self, buf, offset, nbytes, out):
        a0 = offset & ~3
        size = ((offset + nbytes + 3) & ~3) - a0
        with self.lock:
            staging = self._staging_get(size)
            self.copy(buf, a0, staging, 0, size)
            idx = self.flush_locked()
            self.readbacks += 1
            self.bytes_read_back += nbytes
            self._release_unused()
        try:
            promise = staging.map_async("READ_NOSYNC", 0, size)
            self.wait(idx)
            promise.sync_wait()
            mv = staging.read_mapped(0, size, copy=False)
            out[:] = np.frombuffer(mv, np.uint8, nbytes, offset - a0)
            staging.unmap()
        except BaseException as e:
            staging.destroy()
            raise_if_lost(self._state, "reading a result back", e)
            raise
        with self.lock:
            self._staging_put(staging)

    def _staging_get(self, size):
        s = max(256, _next_pow2(size))
        lst = self._staging.get(s)
        if lst:
            self._staging_bytes -= s
            return lst.pop()
        try:
            return self.device.create_buffer(size=s, usage=BufferUsage.MAP_READ | BufferUsage.COPY_DST)
        except Exception as e:
            raise_if_lost(self._state, "reading a result back", e)
            raise

    def _staging_put(self, staging):
        s = staging.size
        if s <= (64 << 20) and self._staging_bytes + s <= STAGING_CACHE_BYTES:
            self._staging[s].append(staging)
            self._staging_bytes += s
        else:
            staging.destroy()

    def counters(self) -> dict:
        return {
            "ops_per_submit": self.per_submit,
            "ops_encoded": self.ops,
            "dispatches": self.dispatches,
            "submits": self.submits,
            "readbacks": self.readbacks,
            "bytes_uploaded": self.bytes_uploaded,
            "bytes_read_back": self.bytes_read_back,
            "bind_groups_created": self.bind_groups_created,
            "bind_groups_cached": len(self._bgs),
        }
