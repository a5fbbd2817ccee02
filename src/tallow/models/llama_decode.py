"""The CPU fast path of a GGUF Llama: NumPy arrays and compiled kernels, no Tensor ops.

A decoding step of a small model is a few hundred small operations; through
the Tensor layer each costs microseconds of Python (checks, layouts, graph
bookkeeping), more than the arithmetic.  ``LlamaDecoder`` runs the same
computation on plain arrays, one compiled call per step of a layer:

    rms_norm (the residual add fused)  ->  one product for q|k|v  ->
    rope of q and k fused with the key/value cache write  ->  attention over
    the cache  ->  output projection  ->  rms_norm  ->  one product for
    gate|up  ->  silu(gate) * up  ->  down projection (added by the next norm)

Weights are used where the file's memory map holds them: F32 and F16 matrices
as views of the map (f16 converted inside the product), quantized ones
repacked once for the C kernels (their mapped pages are then released) or, for
the formats those do not cover, in the numba layout.  The token embedding
stays in its GGUF format and rows are dequantized on lookup; a tied output
layer multiplies by it in that format too.  The key/value cache is
preallocated per generation and grows by doubling; each step writes its
position in place.  Matrix-vector products (one token) and the attention's
heads split across the compiled pool (``native/_workers.c``: each thread
streams its own contiguous region of a weight) when the machine has a CPU to
spare; prompt-sized products split by pieces across the same threads (see
:func:`tallow.backends.cpu.native.plan_threads`), the same pieces at every
thread count.

Llama-like families run here too: Qwen2's q/k/v biases are added after the q|k|v
product and Qwen3's per-head RMSNorm of queries and keys applied before the
rotation. Their files keep Hugging Face's half-split rotation (llama.cpp's
"NeoX" rope), so ``neox=True`` permutes their q/k rows (and biases and norm
weights) at load into the order the interleaved kernel rotates, the
permutation llama.cpp's converter applies to Llama's: the attention scores are
unchanged.

Phi-3 (``fused=True``): its ``attn_qkv`` is cut into q, k and v row ranges at load
(quantized rows are whole blocks, so the parts stay in their format) and its
``ffn_up`` already holds gate then up; LongRoPE's tables pick the short or the long
factors by position (``rope_table.LongRopeTable``, as the Tensor path's cache).
Gemma 3, from its config's options: embeddings times sqrt(hidden), norms after the
attention and after the MLP too, tanh-GELU(gate) * up, per-head q/k norms, scores
scaled by ``query_pre_attn_scalar ** -0.5``, the sliding layers rotated with their
own base, the logits soft-capped where the config says so.

Sliding windows (Phi-3's, Gemma 3's five layers in six): a step's query reads the
cache from its window's first position, its layer's cache having spare rows after
it so that the kernel's (heads, positions, d) buffer may start there; a prompt's
scores before the window are -inf before the softmax.

Results: the quantized products are bit for bit those of the Tensor path
(the same kernels' arithmetic); norms, rope, softmax and float products
differ from it only in summation order (f32 rounding).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from ..backends.cpu import gemm, native
from ..backends.cpu.elementwise import gelu_tanh
from ..ggml.gguf_io import GgufTensor
from .rope_table import RopeTable

_ops = native.decode_ops  # the compiled float kernels, or None when not built

F32 = np.float32
# A prompt's float product is cut by weight rows into about _PIECES pieces of at most
# _PIECE_BYTES of f32 each, whatever the thread count (so that the sums are the same
# at every count).
_PIECES = 4
_PIECE_BYTES = 2 << 20
_ATTENTION_ROWS = 128  # queries per block of a prompt's attention


def available() -> bool:
    """True when the compiled kernels this path needs are built and enabled."""
    return _ops is not None and native.available()


# ------------------------------------------------------------------- projections
class _NativeProj:
    """Quantized rows (one or several same-typed tensors stacked) in the C kernels' layout."""

    def __init__(self, tensors: list[GgufTensor]):
        t = tensors[0].ggml_type
        self.k = tensors[0].shape[1]
        self.n = sum(x.shape[0] for x in tensors)
        raw = tensors[0].data if len(tensors) == 1 else np.concatenate([x.data for x in tensors])
        self.w = native.NativeWeight(raw, t, self.n, self.k, source=[x.data for x in tensors])
        del raw
        for x in tensors:
            release_pages(x.data)

    def matvec(self, x, out):
        self.w.matvec(x, out)

    def matmul(self, x):
        return self.w.matmul_t(x)


class _FloatProj:
    """An F32 or F16 matrix read in place from the file's map."""

    def __init__(self, t: GgufTensor):
        self.n, self.k = t.shape
        self.half = t.ggml_type.name == "F16"
        self.w = t.data.view(np.uint16 if self.half else F32).reshape(self.n, self.k)

    def matvec(self, x, out):
        # One call on this thread, except a weight worth a second thread (a
        # vocabulary-sized output layer): rows split in pieces across the pool.
        if self.n * self.k >= 2 * native.MIN_WORK_PER_THREAD and not native.pool_available():
            groups = -(-self.n // 64)
            threads = native.plan_threads(1, self.n, self.k, groups, None)
            if threads > 1:
                w, half, n, k = self.w, self.half, self.n, self.k
                native.pool.run_ranges(
                    lambda a, b: _ops.matvec_float(w, half, x, out, 1, n, k, a * 64, min(n, b * 64)), groups, threads)
                return
        _ops.matvec_float(self.w, self.half, x, out, 1, self.n, self.k, 0, self.n)

    def matmul(self, x):
        m = x.shape[0]
        out = np.empty((m, self.n), F32)
        if m <= 4:  # a few rows: the row-streaming kernel, f16 converted in registers
            _ops.matvec_float(self.w, self.half, x, out, m, self.n, self.k, 0, self.n)
            return out
        # Prompt-sized: the f32 product over pieces of the weight's rows, each with
        # every activation row (the weight piece is read once, f16 converted once by
        # F16C into an f32 piece that stays in cache); threads take whole pieces.
        # Splitting the activation rows instead made every thread read every weight row.
        rows = -(-self.n // _PIECES)
        rows = max(16, min(-(-rows // 16) * 16, _PIECE_BYTES // (4 * self.k) // 16 * 16))
        pieces = [(r0, min(self.n, r0 + rows)) for r0 in range(0, self.n, rows)]
        w, half, k = self.w, self.half, self.k

        def piece(r0, r1):
            if half:
                t = np.empty((r1 - r0, k), F32)
                _ops.f16_to_f32(w[r0:r1], t, t.size)
            else:
                t = w[r0:r1]
            out[:, r0:r1] = gemm.matmul(x, t.T)  # (the kernel writes a contiguous block)

        threads = native.plan_threads(m, self.n, self.k, len(pieces), None)
        if threads > 1:
            native.pool.run_pieces(piece, pieces, threads)
        else:
            for p in pieces:
                piece(*p)
        return out


class _TiledProj:
    """Other quantized formats: the numba path's layout (or the NumPy path's without numba)."""

    def __init__(self, t: GgufTensor):
        from ..backends.cpu.quantized import fast, vec_dot

        self.n, self.k = t.shape
        if fast.available():
            self.w = fast.TiledWeight(t.data, t.ggml_type, self.n, self.k)
        else:
            self.w = vec_dot.PreparedWeight(t.data, t.ggml_type, self.n, self.k)
        release_pages(t.data)

    def matvec(self, x, out):
        from ..utils import get_num_threads

        # that path's own rule keeps small products on one thread
        out[:] = self.w.matmul_t(x.reshape(1, -1), num_threads=get_num_threads()).reshape(-1)

    def matmul(self, x):
        from ..utils import get_num_threads

        return self.w.matmul_t(x, num_threads=get_num_threads())


class _DequantizedProj(_FloatProj):
    """A float format other than F32/F16 (BF16): converted to f32 once."""

    def __init__(self, t: GgufTensor):
        self.n, self.k = t.shape
        self.half = False
        self.w = np.ascontiguousarray(t.dequantize(), dtype=F32)


class _StackedProj:
    """Several tensors of different formats whose outputs are concatenated."""

    def __init__(self, parts):
        self.parts = parts
        self.k = parts[0].k
        self.n = sum(p.n for p in parts)
        self.edges = np.cumsum([0] + [p.n for p in parts]).tolist()

    def matvec(self, x, out):
        for p, a, b in zip(self.parts, self.edges[:-1], self.edges[1:]):
            p.matvec(x, out[a:b])

    def matmul(self, x):
        return np.concatenate([p.matmul(x) for p in self.parts], axis=1)


def projection(tensors: list[GgufTensor]):
    """The fastest product over these (n_i, k) tensors' rows stacked in order."""
    names = {t.ggml_type.name for t in tensors}
    if len(names) == 1 and native.supports(next(iter(names))):
        return _NativeProj(tensors)
    if len(tensors) > 1:
        return _StackedProj([projection([t]) for t in tensors])
    t = tensors[0]
    if t.ggml_type.name in ("F32", "F16"):
        return _FloatProj(t)
    if t.ggml_type.is_float:
        return _DequantizedProj(t)
    return _TiledProj(t)


def _map_of(data: np.ndarray):
    """(mmap object, offset of ``data`` in it, file name, offset in the file) for a view of
    a file's map (``np.memmap``), else None."""
    import mmap

    root = data  # the array whose base is the mmap object itself
    while isinstance(getattr(root, "base", None), np.ndarray):
        root = root.base
    mm = getattr(root, "base", None)
    if not isinstance(mm, mmap.mmap):
        return None
    # np.memmap maps from the allocation-aligned offset at or below its own offset
    offset = int(getattr(root, "offset", 0) or 0)
    lead = offset % mmap.ALLOCATIONGRANULARITY
    in_map = data.__array_interface__["data"][0] - root.__array_interface__["data"][0] + lead
    return mm, in_map, getattr(root, "filename", None), offset - lead + in_map


class EmbeddingRows:
    """Rows of a (vocab, row width) table in a file's map, read with ``pread``.

    Indexing the map would fault each row's page in together with its
    neighbours (the kernel maps up to 64 KiB around a fault), so a prompt's few
    hundred lookups would make most of the table resident; reading the rows
    into a small array keeps it out of this process's memory (it stays in the
    page cache).  Tables that are not file maps are indexed directly.
    """

    def __init__(self, table: np.ndarray):
        self.table = table
        self.row_bytes = table.shape[1] * table.itemsize
        self.fd = None
        where = _map_of(table) if table.flags.c_contiguous and hasattr(os, "preadv") else None
        if where is not None and where[2]:
            try:
                self.fd = os.open(where[2], os.O_RDONLY)
            except OSError:
                self.fd = None
            self.file_start = where[3]

    def take(self, ids: np.ndarray) -> np.ndarray:
        """(len(ids), row width) copies of those rows (ids already validated)."""
        if self.fd is None:
            return self.table[ids]
        out = np.empty((len(ids), self.table.shape[1]), self.table.dtype)
        raw = out.view(np.uint8).reshape(len(ids), self.row_bytes)
        for i, t in enumerate(ids.tolist()):
            if os.preadv(self.fd, [raw[i]], self.file_start + t * self.row_bytes) != self.row_bytes:
                return self.table[ids]  # a short read (the file changed): the map's own bytes
        return out

    def __del__(self):
        if getattr(self, "fd", None) is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass


def release_pages(data: np.ndarray) -> None:
    """Drop a memory-mapped array's pages from this process's resident set.

    After a weight has been repacked its bytes in the map are not read again;
    the kernel keeps them in the page cache, but they stop counting towards
    this process's memory.  A no-op for arrays that are not file maps.
    """
    import mmap

    where = _map_of(data)
    if where is None or not hasattr(where[0], "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    mm, start = where[0], where[1]
    page = mmap.PAGESIZE
    lo = -(-start // page) * page
    hi = (start + data.nbytes) // page * page
    if hi > lo:
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):
            pass


# ------------------------------------------------------------------- the decoder
def interleaved_order(heads: int, d: int) -> np.ndarray:
    """Row order taking each head's half-split rotation pairs ``(i, i + d/2)`` to
    adjacent rows ``(2i, 2i + 1)`` (llama.cpp's converter's q/k permutation)."""
    j = np.arange(d // 2)
    head = np.stack([j, j + d // 2], axis=1).reshape(-1)
    return (np.arange(heads)[:, None] * d + head[None, :]).reshape(-1)


def _rows_in_order(t: GgufTensor, order: np.ndarray) -> GgufTensor:
    """``t`` with its rows reordered (each row a whole number of blocks: byte rows)."""
    rows = t.shape[0]
    data = np.ascontiguousarray(t.data.reshape(rows, -1)[order]).reshape(-1)
    return dataclasses.replace(t, data=data)


def _vector(t: GgufTensor) -> np.ndarray:
    return np.ascontiguousarray(t.dequantize().reshape(-1), dtype=F32)


def _row_range(t: GgufTensor, start: int, n: int) -> GgufTensor:
    """Rows ``start .. start + n`` of ``t`` (a fused projection's part), still in its format."""
    data = t.data.reshape(t.shape[0], -1)[start:start + n].reshape(-1)
    return dataclasses.replace(t, name=f"{t.name}[{start}:{start + n}]", shape=(n,) + tuple(t.shape[1:]),
                               data=data)


def _norm(get, name: str) -> np.ndarray:
    return np.ascontiguousarray(get(name).dequantize(), dtype=F32)


class _Layer:
    __slots__ = ("attn_norm", "ffn_norm", "qkv", "o", "gate_up", "down", "qkv_bias",
                 "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm", "window", "local_rope")

    def __init__(self, get, i: int, cfg=None, neox: bool = False, fused: bool = False):
        p = f"blk.{i}"
        self.attn_norm = _norm(get, f"{p}.attn_norm.weight")
        self.ffn_norm = _norm(get, f"{p}.ffn_norm.weight")
        # Gemma 3: norms of the attention's and of the MLP's outputs too
        sandwich = cfg is not None and cfg.sandwich_norms
        self.post_attn_norm = _norm(get, f"{p}.post_attention_norm.weight") if sandwich else None
        self.post_ffn_norm = _norm(get, f"{p}.post_ffw_norm.weight") if sandwich else None
        self.window = cfg.window(i) if cfg is not None and hasattr(cfg, "window") else None
        # Gemma 3's sliding layers rotate with their own base
        self.local_rope = self.window is not None and getattr(cfg, "rope_local_theta", None) is not None
        if fused:  # Phi-3: one attn_qkv, rows q then k then v
            d = cfg.head_dim
            t = get(f"{p}.attn_qkv.weight")
            q_rows, kv_rows = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
            qkv = [_row_range(t, 0, q_rows), _row_range(t, q_rows, kv_rows),
                   _row_range(t, q_rows + kv_rows, kv_rows)]
        else:
            qkv = [get(f"{p}.attn_{x}.weight") for x in ("q", "k", "v")]
        self.qkv_bias = self.q_norm = self.k_norm = None
        if cfg is not None and cfg.qkv_bias:
            self.qkv_bias = [_vector(get(f"{p}.attn_{x}.bias")) for x in ("q", "k", "v")]
        if cfg is not None and cfg.qk_norm:
            self.q_norm = _vector(get(f"{p}.attn_q_norm.weight"))
            self.k_norm = _vector(get(f"{p}.attn_k_norm.weight"))
        if neox:
            d = cfg.head_dim
            orders = (interleaved_order(cfg.num_attention_heads, d),
                      interleaved_order(cfg.num_key_value_heads, d))
            qkv[:2] = [_rows_in_order(t, o) for t, o in zip(qkv[:2], orders)]
            if self.qkv_bias is not None:
                self.qkv_bias[:2] = [b[o] for b, o in zip(self.qkv_bias[:2], orders)]
            if self.q_norm is not None:
                head = interleaved_order(1, d)
                self.q_norm, self.k_norm = self.q_norm[head], self.k_norm[head]
        if self.qkv_bias is not None:
            self.qkv_bias = np.ascontiguousarray(np.concatenate(self.qkv_bias), dtype=F32)
        self.qkv = projection(qkv)
        self.o = projection([get(f"{p}.attn_output.weight")])
        if fused:  # Phi-3's ffn_up holds the gate rows, then the up rows: already gate|up
            self.gate_up = projection([get(f"{p}.ffn_up.weight")])
        else:
            self.gate_up = projection([get(f"{p}.ffn_gate.weight"), get(f"{p}.ffn_up.weight")])
        self.down = projection([get(f"{p}.ffn_down.weight")])


class DecodeState:
    """One generation's key/value cache (grown by doubling) and single-token buffers."""

    def __init__(self, dec: "LlamaDecoder"):
        self.decoder = dec
        self.cap = 0
        self.kv: list = []
        c = dec
        width = (c.nh + 2 * c.nkv) * c.d
        self.bufs = dict(xn=np.empty(c.h, F32), qkv=np.empty(width, F32), q=np.empty(c.nh * c.d, F32),
                         att=np.empty(c.nh * c.d, F32), o=np.empty(c.h, F32), gu=np.empty(2 * c.f, F32),
                         act=np.empty(c.f, F32), down=np.empty(c.h, F32), logits=None)

    def reserve(self, total: int, keep: int) -> None:
        """Room for ``total`` positions, the first ``keep`` kept."""
        if total <= self.cap:
            return
        c = self.decoder
        cap = max(256, self.cap)
        while cap < total:
            cap *= 2
        cap = min(cap, c.ctx)
        kv = []
        for layer in range(c.n_layers):
            k, v = (_cache_array(c.nkv, cap, c.d, c.layers[layer].window is not None) for _ in range(2))
            if keep and self.kv:
                k[:, :keep] = self.kv[layer][0][:, :keep]
                v[:, :keep] = self.kv[layer][1][:, :keep]
            kv.append((k, v))
        self.kv, self.cap = kv, cap


def _cache_array(heads: int, cap: int, d: int, windowed: bool) -> np.ndarray:
    """A zeroed (heads, cap, d) key or value cache.  A sliding-window layer's has ``cap``
    spare rows after it, so that :func:`_from_position` can offer the attention kernel
    a (heads, cap, d) window starting at any cached position."""
    if not windowed:
        return np.zeros((heads, cap, d), F32)
    return np.zeros((heads + 1) * cap * d, F32)[:heads * cap * d].reshape(heads, cap, d)


def _from_position(cache: np.ndarray, start: int) -> np.ndarray:
    """The flat (heads, cap, d) buffer whose position 0 is ``cache``'s position ``start``
    (a window's first key); each head keeps its stride, so the kernel reads head h's
    positions ``start ..`` in place."""
    heads, cap, d = cache.shape
    if start == 0:
        return cache
    flat = cache.base
    return flat[start * d:start * d + heads * cap * d]


class LlamaDecoder:
    """A GGUF Llama's forward pass on arrays (see the module doc).

    ``get(name)`` returns the file's checked ``GgufTensor`` of that name;
    ``cfg`` is the model's ``LlamaConfig``.  ``neox``: the file keeps the half-split
    rotation's q/k rows (reordered here at load); ``fused``: Phi-3's ``attn_qkv`` and
    gate|up ``ffn_up``.  The rest comes from ``cfg`` as the Tensor path reads it: sliding
    windows, Gemma 3's sandwich norms, GELU, embedding scale, local rotary base, score
    scale and logit soft cap, Phi-3's LongRoPE.
    """

    def __init__(self, get, cfg, output_name: str, neox: bool = False, fused: bool = False):
        from .llama import GELU_TANH, _rope_table, rope_frequencies

        self.cfg = cfg
        self.h, self.f = cfg.hidden_size, cfg.intermediate_size
        self.nh, self.nkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.n_layers, self.ctx, self.eps = cfg.num_hidden_layers, cfg.max_position_embeddings, float(cfg.rms_norm_eps)
        self.vocab = cfg.vocab_size
        scalar = getattr(cfg, "query_pre_attn_scalar", None)
        self.scale = 1.0 / math.sqrt(self.d if scalar is None else scalar)
        self.layers = [_Layer(get, i, cfg, neox, fused) for i in range(self.n_layers)]
        emb = get("token_embd.weight")
        self.emb_type = emb.ggml_type
        self.emb_rows = EmbeddingRows(emb.data.reshape(self.vocab, -1))
        # Gemma 3 scales the embeddings by sqrt(hidden), rounded to the weights' dtype (f32)
        scale = getattr(cfg, "embed_scale", None)
        self.embed_scale = None if scale is None else F32(scale)
        self.output = projection([get(output_name)])
        self.norm = np.ascontiguousarray(get("output_norm.weight").dequantize(), dtype=F32)
        self.gelu = getattr(cfg, "hidden_act", "silu") in GELU_TANH
        cap = getattr(cfg, "final_logit_softcapping", None)
        self.soft_cap = None if cap is None else F32(cap)
        # Grown with the positions used (see rope_table), not for the whole context;
        # Phi-3's LongRoPE picks its factors by position, as the Tensor path's cache does.
        self.rope = _rope_table(cfg, self.ctx)
        local = getattr(cfg, "rope_local_theta", None)
        self.rope_local = None if local is None else RopeTable(rope_frequencies(cfg, local, None), self.ctx)

    def new_state(self) -> DecodeState:
        return DecodeState(self)

    def embed(self, ids) -> np.ndarray:
        """(s,) token ids -> (s, hidden) f32, dequantizing only those rows."""
        rows = self.emb_rows.take(np.asarray(ids, dtype=np.int64))
        x = self.emb_type.dequantize(rows.reshape(-1), rows.shape[0] * self.h).reshape(rows.shape[0], self.h)
        if self.embed_scale is not None:
            x = np.asarray(x, dtype=F32) * self.embed_scale
        return x

    def _reserve_rope(self, positions: int) -> None:
        self.rope.reserve(positions)
        if self.rope_local is not None:
            self.rope_local.reserve(positions)

    def _rotary(self, layer):
        t = self.rope_local if layer.local_rope else self.rope
        return t.cos, t.sin

    def _capped(self, logits: np.ndarray) -> np.ndarray:
        """Gemma's final soft cap ``cap * tanh(logits / cap)``, where the config has one."""
        if self.soft_cap is None:
            return logits
        return (np.tanh(logits / self.soft_cap) * self.soft_cap).astype(F32, copy=False)

    def forward(self, ids, pos0: int, state: DecodeState, last_only: bool = True) -> np.ndarray:
        """Logits (vocab,) of the last position, or (s, vocab) for every position."""
        s = len(ids)
        native.sync_threads()  # the compiled pool follows set_num_threads from the next token on
        state.reserve(pos0 + s, pos0)
        self._reserve_rope(pos0 + s)
        x = np.ascontiguousarray(self.embed(ids), dtype=F32)
        if s == 1:
            y = self._step(x.reshape(-1), pos0, state)
        else:
            from ..backends.cpu.quantized.vec_dot import single_threaded_blas

            # BLAS's own threads spin after each product and would take the core the
            # next step needs; the prompt's products are split by tallow's pool instead.
            with single_threaded_blas():
                y = self._prompt(x, pos0, state)
        if last_only or s == 1:
            out = np.empty(self.vocab, F32)
            self.output.matvec(np.ascontiguousarray(y[-1] if s > 1 else y), out)
            return self._capped(out)
        return self._capped(self.output.matmul(y))

    def step_rows(self, ids, positions, states) -> np.ndarray:
        """One token of each of B sequences, row i at ``positions[i]`` in ``states[i]``'s
        cache: norms and products over the B rows at once (each row quantized on its
        own), rope and attention per row. Returns the logits (B, vocab)."""
        native.sync_threads()
        for st, p in zip(states, positions):
            st.reserve(p + 1, p)
        self._reserve_rope(max(positions) + 1)
        x = np.ascontiguousarray(self.embed(ids), dtype=F32)
        from ..backends.cpu.quantized.vec_dot import single_threaded_blas

        with single_threaded_blas():  # as for a prompt: tallow's pool splits the products
            y = self._rows(x, positions, states)
            return self._capped(np.ascontiguousarray(self.output.matmul(y), dtype=F32))

    def _attend(self, layer, q, kc, vc, att, pos, cap):
        """One query row at ``pos`` over the cache (its layer's window only, if it has one)."""
        start = 0 if layer.window is None else max(0, pos - layer.window + 1)
        _ops.attention(q, _from_position(kc, start), _from_position(vc, start), att, 1, self.nh, self.nkv,
                       self.d, cap, pos - start, self.scale, 0, self.nh)

    def _act(self, gu, rows, act):
        """act = silu(gate) * up, or Gemma's tanh-GELU(gate) * up, of (rows, gate|up)."""
        if not self.gelu:
            _ops.silu_mul(gu, rows, self.f, act)
            return
        g = gu.reshape(rows, 2 * self.f)
        act.reshape(rows, self.f)[:] = gelu_tanh(g[:, :self.f]) * g[:, self.f:]

    def _post(self, norm, y, rows):
        """Gemma 3's norm of a sub-layer's output (y itself where there is none)."""
        if norm is None:
            return y
        out = np.empty_like(y)
        _ops.rms_norm(y, norm, out, rows, self.h, self.eps, None)
        return out

    def _rows(self, x, positions, states):
        """x (B, hidden) updated in place through the layers; returns the normed state."""
        ops = _ops
        b = x.shape[0]
        h, f, nh, nkv, d, eps = self.h, self.f, self.nh, self.nkv, self.d, self.eps
        xn = np.empty((b, h), F32)
        q = np.empty((b, nh * d), F32)
        att = np.empty((b, nh * d), F32)
        act = np.empty((b, f), F32)
        rows = list(zip(range(b), positions, states))
        pending = None
        for i, layer in enumerate(self.layers):
            cos, sin = self._rotary(layer)
            qkv = self._rows_qkv(layer, x, xn, b, pending)
            for r, pos, st in rows:  # each row at its own position in its own cache
                kc, vc = st.kv[i]
                ops.rope_store(qkv[r], 1, nh, nkv, d, cos, sin, pos, q[r], kc, vc, st.cap)
                self._attend(layer, q[r], kc, vc, att[r], pos, st.cap)
            pending = self._rows_mlp(layer, x, xn, att, act, b)
        out = np.empty((b, h), F32)
        ops.rms_norm(x, self.norm, out, b, h, eps, pending)
        return out

    def _step(self, x, pos, st):
        """One token: x (hidden,) updated in place through the layers; returns the normed state."""
        ops = _ops
        b = st.bufs
        xn, qkv, q, att, o, gu, act, down = (b["xn"], b["qkv"], b["q"], b["att"], b["o"], b["gu"], b["act"],
                                             b["down"])
        h, f, nh, nkv, d, eps, cap = self.h, self.f, self.nh, self.nkv, self.d, self.eps, st.cap
        pending = None
        for layer, (kc, vc) in zip(self.layers, st.kv):
            cos, sin = self._rotary(layer)
            ops.rms_norm(x, layer.attn_norm, xn, 1, h, eps, pending)
            layer.qkv.matvec(xn, qkv)
            self._qkv_extras(layer, qkv, 1)
            ops.rope_store(qkv, 1, nh, nkv, d, cos, sin, pos, q, kc, vc, cap)
            self._attend(layer, q, kc, vc, att, pos, cap)
            layer.o.matvec(att, o)
            ops.rms_norm(x, layer.ffn_norm, xn, 1, h, eps, self._post(layer.post_attn_norm, o, 1))
            layer.gate_up.matvec(xn, gu)
            self._act(gu, 1, act)
            layer.down.matvec(act, down)
            pending = self._post(layer.post_ffn_norm, down, 1)
        out = np.empty(h, F32)
        ops.rms_norm(x, self.norm, out, 1, h, eps, pending)
        return out

    def _rows_qkv(self, layer, x, xn, rows, pending):
        """A layer's q|k|v of ``rows`` rows at once: x gets the previous layer's pending
        residual, xn its norm; returns the (rows, q|k|v) product."""
        _ops.rms_norm(x, layer.attn_norm, xn, rows, self.h, self.eps, pending)
        qkv = np.ascontiguousarray(layer.qkv.matmul(xn), dtype=F32)
        self._qkv_extras(layer, qkv, rows)
        return qkv

    def _rows_mlp(self, layer, x, xn, att, act, rows):
        """The rest of a layer for ``rows`` rows after attention (the output projection,
        its residual, the MLP); returns the MLP's output, the residual still to add."""
        o = self._post(layer.post_attn_norm, np.ascontiguousarray(layer.o.matmul(att), dtype=F32), rows)
        _ops.rms_norm(x, layer.ffn_norm, xn, rows, self.h, self.eps, o)
        gu = np.ascontiguousarray(layer.gate_up.matmul(xn), dtype=F32)
        self._act(gu, rows, act)
        return self._post(layer.post_ffn_norm, np.ascontiguousarray(layer.down.matmul(act), dtype=F32), rows)

    def _qkv_extras(self, layer, qkv, rows):
        """Qwen2's biases and Qwen3's per-head q/k norms on a (rows, q|k|v) product, in place."""
        if layer.qkv_bias is not None:
            qkv += layer.qkv_bias
        if layer.q_norm is not None:
            nh, nkv, d, eps = self.nh, self.nkv, self.d, self.eps
            heads = qkv.reshape(rows, -1)
            q = np.ascontiguousarray(heads[:, :nh * d])
            k = np.ascontiguousarray(heads[:, nh * d:(nh + nkv) * d])
            _ops.rms_norm(q, layer.q_norm, q, rows * nh, d, eps, None)
            _ops.rms_norm(k, layer.k_norm, k, rows * nkv, d, eps, None)
            heads[:, :nh * d] = q
            heads[:, nh * d:(nh + nkv) * d] = k

    def _prompt(self, x, pos0, st):
        """s tokens at once: x (s, hidden); products over all rows, attention causal."""
        ops = _ops
        s = x.shape[0]
        h, f, nh, nkv, d, eps, cap = self.h, self.f, self.nh, self.nkv, self.d, self.eps, st.cap
        xn = np.empty((s, h), F32)
        q = np.empty((s, nh * d), F32)
        att = np.empty((s, nh * d), F32)
        act = np.empty((s, f), F32)
        threads = native.plan_threads(s * nh, pos0 + s, 2 * d, nkv * -(-s // _ATTENTION_ROWS), None)
        pending = None
        for layer, (kc, vc) in zip(self.layers, st.kv):
            cos, sin = self._rotary(layer)
            qkv = self._rows_qkv(layer, x, xn, s, pending)
            ops.rope_store(qkv, s, nh, nkv, d, cos, sin, pos0, q, kc, vc, cap)
            self._prompt_attention(q, kc, vc, att, s, pos0, threads, layer.window)
            pending = self._rows_mlp(layer, x, xn, att, act, s)
        out = np.empty((s, h), F32)
        ops.rms_norm(x, self.norm, out, s, h, eps, pending)
        return out

    def _prompt_attention(self, q, kc, vc, att, s, pos0, threads, window=None):
        """Causal attention of s queries as matrix products, per key head and block of
        _ATTENTION_ROWS queries: (rows group, d) x (d, keys up to the block's last
        position), so no block multiplies the keys after it.  The blocks are the same
        whatever the thread count, and threads take whole blocks.  With a ``window``, a
        query at position i sees the keys ``i - window + 1 .. i`` only: the scores of
        earlier keys are -inf before the softmax."""
        nh, nkv, d = self.nh, self.nkv, self.d
        group = nh // nkv
        qh = q.reshape(s, nkv, group, d).transpose(1, 0, 2, 3).reshape(nkv, s * group, d)
        out = np.empty((nkv, s * group, d), F32)

        def block(h, a, b):  # key head h, queries [a, b)
            total = pos0 + b
            scores = np.matmul(qh[h, a * group:b * group], kc[h, :total].T)  # ((b - a) group, total)
            if window is not None and pos0 + b - window > 0:
                hidden = np.arange(total)[None, :] <= np.arange(pos0 + a, pos0 + b)[:, None] - window
                scores.reshape(b - a, group, total)[np.broadcast_to(hidden[:, None, :], (b - a, group, total))] = \
                    -np.inf
            _ops.causal_softmax(scores, b - a, group, total, pos0 + a, self.scale, 0, 1)
            np.matmul(scores, vc[h, :total], out=out[h, a * group:b * group])

        blocks = [(h, a, min(s, a + _ATTENTION_ROWS)) for h in range(nkv) for a in range(0, s, _ATTENTION_ROWS)]
        if threads > 1:
            native.pool.run_pieces(block, blocks, threads)
        else:
            for piece in blocks:
                block(*piece)
        att[:] = out.reshape(nkv, s, group, d).transpose(1, 0, 2, 3).reshape(s, nh * d)
