"""Quantized Llama from a GGUF file (candle-transformers' ``quantized_llama.rs``).

``ModelWeights.from_gguf(path, device)`` reads a file with llama.cpp's tensor
names and metadata keys (what llama.cpp's ``convert_hf_to_gguf.py`` writes):

    token_embd.weight                       (vocab, hidden)
    blk.N.attn_norm.weight  blk.N.ffn_norm.weight
    blk.N.attn_q.weight  blk.N.attn_k.weight  blk.N.attn_v.weight  blk.N.attn_output.weight
    blk.N.ffn_gate.weight  blk.N.ffn_up.weight  blk.N.ffn_down.weight
    output_norm.weight  output.weight       (output.weight absent: tied to token_embd)

    general.architecture = "llama", llama.context_length, llama.embedding_length,
    llama.block_count, llama.feed_forward_length, llama.attention.head_count,
    llama.attention.head_count_kv, llama.attention.layer_norm_rms_epsilon,
    llama.rope.freq_base, llama.rope.dimension_count

The projections stay quantized (each ``Linear`` holds its ``QTensor`` and
multiplies with ggml's quantized matmul); the token embedding and the norms
are dequantized to f32, as in candle.  The output layer multiplies by
``output.weight``, or by the quantized ``token_embd.weight`` when the file
has no output tensor (llama.cpp's rule for tied embeddings).

Rotary embeddings: the converter permutes the rows of ``attn_q``/``attn_k``
within each head so that ggml's rope, which rotates adjacent pairs
``(x[2i], x[2i+1])``, reproduces Hugging Face's rotation of the two halves.
As candle (and llama.cpp) does, the permuted weights are used as they are
with the interleaved rotation (``rope_i``): the attention scores, and so the
model, are those of the original Hugging Face weights.

Qwen2, Qwen3, Phi-3 and Gemma 3 files (``LLAMA_LIKE``: a Llama with q/k/v biases,
q/k norms, Phi-3's fused projections and LongRoPE, Gemma 3's sandwich norms, GELU
and sliding layers; all with the half-split rotation) load here too, so they decode
on the same fast path (``llama_decode``, ``neox=True``; ``fused=True`` for Phi-3);
their Tensor modules, where the fast path does not apply, are those of
``gguf_decoder.load_gguf_decoder``.

``forward(input_ids, index_pos, cache=None)`` returns the logits of the last
position; without a ``cache`` it keeps its own (reset when ``index_pos`` is 0),
as candle's ``ModelWeights::forward``.  ``new_cache()`` / ``config`` make it
usable by ``TextGenerator`` like ``Llama``.
"""

from __future__ import annotations

import math
import os

from .. import dtype as dt
from ..constructors import adopt_array
from ..errors import IndexOutOfRangeError, ShapeMismatchError
from ..layout import Layout
from ..device import Device, cpu
from ..nn import ops
from ..nn.container import ModuleList
from ..nn.embedding import Embedding
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.norm import RmsNorm
from ..nn.rotary import rope_i
from ..quantized.gguf_file import qtensor_of
from ..ggml.gguf_io import GgufFile, read_gguf
from ..quantized.qtensor import dequantize_all
from ..tensor_class import Tensor
from .config import ModelFormatError
from .gguf_decoder import config_from_gguf as family_config, decoder_of_file
from . import llama_decode
from .llama import Cache, ContextLengthError, LlamaConfig, decoder_hidden, soft_cap
from .sequences import SequenceBatching, SequenceRows


def _linear(qt) -> Linear:
    """A Linear over a GGUF weight: quantized blocks stay a QTensor, float blocks become f32."""
    return Linear.from_weights(qt.dequantize() if qt.ggml_type.is_float else qt)


class _Attention(Module):
    def __init__(self, get, prefix, cfg: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.attn_q = _linear(get(f"{prefix}.attn_q.weight", (self.n_head * self.head_dim, cfg.hidden_size)))
        self.attn_k = _linear(get(f"{prefix}.attn_k.weight", (self.n_kv_head * self.head_dim, cfg.hidden_size)))
        self.attn_v = _linear(get(f"{prefix}.attn_v.weight", (self.n_kv_head * self.head_dim, cfg.hidden_size)))
        self.attn_output = _linear(get(f"{prefix}.attn_output.weight",
                                       (cfg.hidden_size, self.n_head * self.head_dim)))

    def forward(self, x: Tensor, index_pos: int, layer: int, cache: Cache, mask) -> Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        q = self.attn_q(x).reshape((b, s, self.n_head, d)).transpose(1, 2)
        k = self.attn_k(x).reshape((b, s, self.n_kv_head, d)).transpose(1, 2)
        v = self.attn_v(x).reshape((b, s, self.n_kv_head, d)).transpose(1, 2)
        if isinstance(cache, SequenceRows):  # one token of each of b sequences
            y = cache.attend(layer, q, k, v, 1.0 / math.sqrt(d), rope_i)
            return self.attn_output(y.transpose(1, 2).reshape((b, s, self.n_head * d)))
        cos = cache.cos.narrow(0, index_pos, s)
        sin = cache.sin.narrow(0, index_pos, s)
        q = rope_i(q.contiguous(), cos, sin)
        k = rope_i(k.contiguous(), cos, sin)
        k, v = cache.update(layer, k, v, index_pos)
        y = ops.scaled_dot_product_attention(q, k, v, mask, scale=1.0 / math.sqrt(d))
        return self.attn_output(y.transpose(1, 2).reshape((b, s, self.n_head * d)))


class _Block(Module):
    def __init__(self, get, i: int, cfg: LlamaConfig):
        super().__init__()
        p = f"blk.{i}"
        h, f, eps = cfg.hidden_size, cfg.intermediate_size, cfg.rms_norm_eps
        self.attn_norm = RmsNorm.from_weights(get(f"{p}.attn_norm.weight", (h,)).dequantize(), eps)
        self.attn = _Attention(get, p, cfg)
        self.ffn_norm = RmsNorm.from_weights(get(f"{p}.ffn_norm.weight", (h,)).dequantize(), eps)
        self.ffn_gate = _linear(get(f"{p}.ffn_gate.weight", (f, h)))
        self.ffn_up = _linear(get(f"{p}.ffn_up.weight", (f, h)))
        self.ffn_down = _linear(get(f"{p}.ffn_down.weight", (h, f)))

    def forward(self, x, index_pos, layer, cache, mask):
        h = x + self.attn(self.attn_norm(x), index_pos, layer, cache, mask)
        y = self.ffn_norm(h)
        return h + self.ffn_down(ops.silu(self.ffn_gate(y)) * self.ffn_up(y))


def config_from_gguf(f: GgufFile) -> LlamaConfig:
    """A ``LlamaConfig`` from llama.cpp's metadata keys (and the token embedding's shape)."""
    path = f.path
    arch = f.value("general.architecture")
    if arch != "llama":
        raise ModelFormatError(f"{path}: general.architecture is {arch!r}, expected 'llama'")

    def need(key, default=None):
        v = f.value(f"llama.{key}", default)
        if v is None:
            raise ModelFormatError(f"{path}: missing metadata key llama.{key}")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelFormatError(f"{path}: metadata key llama.{key} is {v!r}; it must be an "
                                   "integer >= 1 (the file is damaged or was not written for "
                                   "llama.cpp's Llama)")
        return v

    emb = f.tensors.get("token_embd.weight")
    if emb is None:
        raise ModelFormatError(f"{path}: no tensor 'token_embd.weight' (not a llama.cpp Llama file)")
    hidden = need("embedding_length")
    heads = need("attention.head_count")
    kv_heads = need("attention.head_count_kv", heads)
    head_dim = need("attention.key_length", hidden // heads or None)
    rope_dim = need("rope.dimension_count", head_dim)
    blocks = need("block_count")
    present = sum(1 for name in f.tensors if name.startswith("blk.") and
                  name.endswith(".attn_norm.weight"))
    if blocks != present:
        raise ModelFormatError(f"{path}: metadata key llama.block_count is {blocks} but the file "
                               f"holds the tensors of {present} blocks (blk.N.*); the file is "
                               "damaged or its metadata wrong")
    if rope_dim != head_dim:
        raise ModelFormatError(f"{path}: llama.rope.dimension_count {rope_dim} differs from the head size "
                               f"{head_dim} (partial rotary embeddings are not supported)")
    scaling = f.value("llama.rope.scaling.type")
    factor = float(f.value("llama.rope.scaling.factor", 1.0) or 1.0)
    if "rope_freqs.weight" in f.tensors or (scaling not in (None, "none") and factor != 1.0):
        raise ModelFormatError(f"{path}: rope scaling ({scaling or 'rope_freqs.weight'}) is not supported")
    cfg = LlamaConfig(
        vocab_size=int(f.value("llama.vocab_size", emb.shape[0])),
        hidden_size=hidden,
        intermediate_size=need("feed_forward_length"),
        num_hidden_layers=blocks,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(f.value("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(f.value("llama.rope.freq_base", 10000.0)),
        max_position_embeddings=need("context_length", 4096),
        tie_word_embeddings="output.weight" not in f.tensors,
        bos_token_id=f.value("tokenizer.ggml.bos_token_id"),
        eos_token_id=f.value("tokenizer.ggml.eos_token_id"),
    )
    if heads % kv_heads:
        raise ModelFormatError(f"{path}: head_count {heads} is not a multiple of head_count_kv {kv_heads}")
    return cfg


class _Inner(Module):
    """Token embedding, blocks and final norm (``model.embed_tokens`` as in ``Llama``)."""

    def __init__(self, embed, blocks, norm):
        super().__init__()
        self.embed_tokens = embed
        self.layers = blocks
        self.norm = norm


# GGUF architectures that run on this class (and its fast path) besides "llama"
LLAMA_LIKE = ("qwen2", "qwen3", "phi3", "gemma3")


class ModelWeights(SequenceBatching, Module):
    """A Llama with GGUF (llama.cpp) weights; see the module doc. Several sequences at
    once: ``new_sequence`` / ``prefill`` / ``step_batch`` (see ``sequences.py``)."""

    def __init__(self, f: GgufFile, device=None):
        super().__init__()
        device = Device.cpu() if device is None else Device.parse(device)
        self.arch = f.value("general.architecture")
        if self.arch in LLAMA_LIKE:
            cfg = family_config(f)
        else:
            cfg = config_from_gguf(f)
        self.config = cfg
        self.path = f.path
        self._file = f

        def tensor(name, shape):
            t = f.tensors.get(name)
            if t is None:
                raise ModelFormatError(f"{f.path}: missing tensor {name!r}")
            if tuple(t.shape) != tuple(shape):
                raise ModelFormatError(f"{f.path}: tensor {name!r} has shape {t.shape}, expected {tuple(shape)}")
            return t

        shapes = _expected_shapes(cfg, fused=self.arch == "phi3")
        checked = {name: tensor(name, shape) for name, shape in shapes.items()}
        self._decoder = None
        self._tree_args = None
        self._cache = None
        if device.kind == "cpu" and not dequantize_all() and llama_decode.available():
            # The array fast path; the Tensor modules are built only if something asks for them.
            output = "token_embd.weight" if cfg.tie_word_embeddings else "output.weight"
            self._decoder = llama_decode.LlamaDecoder(checked.__getitem__, cfg, output,
                                                      neox=self.arch in LLAMA_LIKE, fused=self.arch == "phi3")
            self._tree_args = (checked, device)
        else:
            self._build_tree(checked, device)

    def _build_tree(self, checked, device) -> None:
        cfg = self.config
        if self.arch in LLAMA_LIKE:  # the family's own layers (biases, norms, NeoX rope)
            family = decoder_of_file(self._file, cfg, device)
            self.model, self.output = family.model, family.lm_head
            return

        def get(name, shape):
            return qtensor_of(checked[name], device)

        emb_q = get("token_embd.weight", None)
        blocks = ModuleList(_Block(get, i, cfg) for i in range(cfg.num_hidden_layers))
        norm = RmsNorm.from_weights(get("output_norm.weight", None).dequantize(), cfg.rms_norm_eps)
        self.model = _Inner(Embedding.from_weights(emb_q.dequantize()), blocks, norm)
        out_q = emb_q if cfg.tie_word_embeddings else get("output.weight", None)
        self.output = _linear(out_q)

    def __getattr__(self, name):
        # `model` and `output` (the Tensor modules) are built on first use when the
        # fast path serves the forward passes.
        if name in ("model", "output"):
            args = self.__dict__.get("_tree_args")
            if args is not None:
                self.__dict__["_tree_args"] = None
                self._build_tree(*args)
        return super().__getattr__(name)

    def requires_grad_(self, requires_grad: bool = True) -> "ModelWeights":
        """As ``Module.requires_grad_``. The array fast path records no graph, so making
        the model trainable builds its Tensor modules and runs them from then on."""
        if requires_grad and self._decoder is not None:
            self.model  # noqa: B018 -- builds the Tensor modules (see __getattr__)
            self._decoder = None
        return super().requires_grad_(requires_grad)

    @classmethod
    def from_gguf(cls, path, device=cpu) -> "ModelWeights":
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such GGUF file: {path}")
        return cls(read_gguf(path), device)

    @property
    def dtype(self):
        return dt.f32

    def new_cache(self, use_kv_cache: bool = True, max_context: int | None = None) -> Cache:
        device = Device.cpu() if self._decoder is not None else self.model.embed_tokens.weight.device
        return Cache(self.config, dt.f32, device, use_kv_cache, max_context)

    def _hidden(self, input_ids: Tensor, index_pos: int, cache: Cache) -> Tensor:
        return decoder_hidden(self.model, input_ids, index_pos, cache, "ModelWeights",
                              "llama.context_length")

    def forward(self, input_ids: Tensor, index_pos: int, cache: Cache | None = None) -> Tensor:
        """Logits ``(batch, vocab)`` of the position after the last input token."""
        if cache is None:
            if self._cache is None or int(index_pos) == 0:
                self._cache = self.new_cache()
            cache = self._cache
        if self._fast_ok(input_ids, cache):
            return self._fast(input_ids, index_pos, cache, True)
        h = self._hidden(input_ids, index_pos, cache)
        return self._head(h.narrow(1, h.shape[1] - 1, 1).squeeze(1))

    def _head(self, h: Tensor) -> Tensor:
        return soft_cap(self.output(h), self.config)

    def logits(self, input_ids: Tensor, index_pos: int, cache: Cache) -> Tensor:
        """Logits ``(batch, seq, vocab)`` for every input position."""
        if self._fast_ok(input_ids, cache):
            return self._fast(input_ids, index_pos, cache, False)
        return self._head(self._hidden(input_ids, index_pos, cache))

    # -- the array fast path (CPU, one sequence, with a key/value cache) --------------
    def _fast_ok(self, input_ids, cache) -> bool:
        return (self._decoder is not None and cache.use_kv_cache and isinstance(input_ids, Tensor)
                and input_ids.rank == 2 and input_ids.shape[0] == 1 and input_ids.device.kind == "cpu"
                and not input_ids.dtype.is_float)

    def _fast(self, input_ids: Tensor, index_pos: int, cache: Cache, last_only: bool) -> Tensor:
        s = input_ids.shape[1]
        index_pos = int(index_pos)
        if s == 0:
            raise ShapeMismatchError("ModelWeights: input_ids is empty")
        if index_pos < 0 or index_pos + s > cache.max_positions:
            raise ContextLengthError(
                f"ModelWeights: positions {index_pos}..{index_pos + s - 1} do not fit in the context of "
                f"{cache.max_positions} tokens (llama.context_length)")
        if index_pos > cache.seq_len:
            raise ShapeMismatchError(f"ModelWeights: index_pos {index_pos} is past the {cache.seq_len} cached positions")
        ids = input_ids.numpy().reshape(-1)
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise IndexOutOfRangeError(f"ModelWeights: token id outside the vocabulary of {self.config.vocab_size}")
        out = self._decoder.forward(ids, index_pos, self._state_of(cache), last_only)
        cache.seq_len = index_pos + s
        shape = (1, self.config.vocab_size) if last_only else (1, s, self.config.vocab_size)
        return Tensor._wrap(adopt_array(out.reshape(-1), dt.f32, Device.cpu()), Layout.contiguous_of(shape))


    def _state_of(self, cache: Cache):
        """The fast path's decoding state kept on ``cache``."""
        state = getattr(cache, "_decode_state", None)
        if state is None or state.decoder is not self._decoder:
            state = cache._decode_state = self._decoder.new_state()
        return state

    def _rows_logits(self, ids, caches, positions):
        # the fast path's rows whenever its single-sequence forward would take it
        if self._decoder is not None and all(c.use_kv_cache for c in caches):
            return self._decoder.step_rows(ids, positions, [self._state_of(c) for c in caches])
        return super()._rows_logits(ids, caches, positions)


def _expected_shapes(cfg: LlamaConfig, fused: bool = False) -> dict:
    """Every tensor the model reads, with its (rows, columns) shape (``fused``: Phi-3's
    attn_qkv and gate|up ffn_up)."""
    h, f, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    shapes = {"token_embd.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_hidden_layers):
        p = f"blk.{i}"
        shapes.update({f"{p}.attn_norm.weight": (h,), f"{p}.attn_output.weight": (h, q),
                       f"{p}.ffn_norm.weight": (h,), f"{p}.ffn_down.weight": (h, f)})
        if fused:
            shapes.update({f"{p}.attn_qkv.weight": (q + 2 * kv, h), f"{p}.ffn_up.weight": (2 * f, h)})
        else:
            shapes.update({f"{p}.attn_q.weight": (q, h), f"{p}.attn_k.weight": (kv, h),
                           f"{p}.attn_v.weight": (kv, h), f"{p}.ffn_gate.weight": (f, h),
                           f"{p}.ffn_up.weight": (f, h)})
        if cfg.qkv_bias:
            shapes.update({f"{p}.attn_q.bias": (q,), f"{p}.attn_k.bias": (kv,), f"{p}.attn_v.bias": (kv,)})
        if cfg.qk_norm:
            shapes.update({f"{p}.attn_q_norm.weight": (d,), f"{p}.attn_k_norm.weight": (d,)})
        if cfg.sandwich_norms:
            shapes.update({f"{p}.post_attention_norm.weight": (h,), f"{p}.post_ffw_norm.weight": (h,)})
    shapes["output_norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        shapes["output.weight"] = (cfg.vocab_size, h)
    return shapes
