"""The Llama family (Llama 2/3, SmolLM2, TinyLlama...): candle-transformers' ``llama.rs``
on Hugging Face's ``LlamaForCausalLM`` weights, and the decoders that differ from it
only by a flag: Mistral (sliding-window attention), Qwen2/2.5 (biases on q/k/v) and
Qwen3 (an RMSNorm per head on queries and keys), Phi-3/3.5 (fused qkv_proj and
gate_up_proj, LongRoPE). Gemma 3's differences are options
of the same decoder too (see ``gemma3.py``). ``DECODER_TYPES`` lists them.

Grouped-query attention, rotary embeddings (Hugging Face's half-split layout, base
``rope_theta``, optional Llama-3 frequency scaling), RMSNorm, a SiLU-gated MLP and,
when the config says so (or the file has no ``lm_head.weight``), the output layer
tied to the token embeddings. ``Cache`` holds the rotary tables and the per-layer
keys and values, grown by doubling and written in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import dtype as dt
from ..device import Device
from ..errors import ShapeMismatchError
from ..nn import ops
from ..nn.container import ModuleList
from ..nn.embedding import Embedding
from ..nn.kv_cache import KvCache
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.norm import RmsNorm
from ..nn.rotary import rope
from ..tensor_class import Tensor
from .config import ContextLengthError, ModelFormatError, check_architecture, positive_int, read_json, require
from .decoder_input import embed_tokens
from .rope_table import LongRopeTable, RopeTable
from .sequences import SequenceBatching, SequenceRows

LLAMA_TYPES = ("llama", "smollm", "smollm2", "mistral", "qwen2", "qwen3", "phi3")
DECODER_TYPES = LLAMA_TYPES
SLIDING, FULL = "sliding_attention", "full_attention"
GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu")


@dataclass
class LlamaConfig:
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int | None = 1
    eos_token_id: object = 2
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    model_type: str = "llama"
    # Qwen2: biases on q/k/v only (``attention_bias`` puts one on o_proj too, as Llama)
    qkv_bias: bool = False
    # Qwen3: RMSNorm over each head's queries and keys before the rotation
    qk_norm: bool = False
    # Mistral, Qwen2/3 with use_sliding_window: a query sees the last ``sliding_window``
    # keys (itself included) in the layers ``layer_types`` marks "sliding_attention"
    sliding_window: int | None = None
    layer_types: list | None = None
    # Gemma 3 (set by gemma3.py): token embeddings times ``embed_scale``; norms after
    # attention and after the MLP too ("sandwich"); scores scaled by
    # ``query_pre_attn_scalar ** -0.5``; sliding layers rotated with their own base;
    # logits soft-capped as ``cap * tanh(logits / cap)``
    embed_scale: float | None = None
    sandwich_norms: bool = False
    query_pre_attn_scalar: float | None = None
    rope_local_theta: float | None = None
    final_logit_softcapping: float | None = None
    # Gemma's RMSNorm scales by 1 + weight: Hugging Face files store the weight, so the
    # loader adds the one (llama.cpp's converter has already added it)
    norm_adds_one: bool = False
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.sliding_window is None:
            self.layer_types = None
        elif self.layer_types is None:
            self.layer_types = [SLIDING] * self.num_hidden_layers

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer``, or None where it attends to every key."""
        if self.layer_types is None or self.layer_types[layer] != SLIDING:
            return None
        return self.sliding_window

    @property
    def eos_token_ids(self) -> list:
        e = self.eos_token_id
        if e is None:
            return []
        return list(e) if isinstance(e, (list, tuple)) else [e]

    @staticmethod
    def from_dict(data: dict, path="config") -> "LlamaConfig":
        check_architecture(data, path, LLAMA_TYPES, "Llama")
        require(data, path, "vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads")
        data = dict(data)
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads"):
            positive_int(data, path, key)
        for key in ("num_key_value_heads", "head_dim", "max_position_embeddings"):
            if data.get(key) is not None:
                positive_int(data, path, key)
        params = data.get("rope_parameters") or {}
        if "rope_theta" not in data and "rope_theta" in params:
            data["rope_theta"] = params["rope_theta"]
        if data.get("rope_scaling") is None and params.get("rope_type", "default") != "default":
            data["rope_scaling"] = params
        _family_options(data, path)
        names = set(LlamaConfig.__dataclass_fields__) - {"extra"}
        cfg = LlamaConfig(**{k: data[k] for k in names if k in data and data[k] is not None
                             or k in ("bos_token_id", "eos_token_id", "rope_scaling") and k in data})
        cfg.extra = {k: v for k, v in data.items() if k not in names}
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise ModelFormatError(
                f"{path}: num_attention_heads {cfg.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {cfg.num_key_value_heads}")
        if cfg.hidden_act not in ("silu", "swish") + GELU_TANH:
            raise ModelFormatError(f"{path}: hidden_act {cfg.hidden_act!r} is not supported "
                                   "(silu, gelu_pytorch_tanh)")
        partial = (data.get("partial_rotary_factor")
                   or (data.get("rope_parameters") or {}).get("partial_rotary_factor") or 1.0)
        if partial != 1.0:
            raise ModelFormatError(f"{path}: partial_rotary_factor {partial} is not supported "
                                   "(rotary embeddings over the whole head)")
        if cfg.head_dim % 2:
            raise ModelFormatError(f"{path}: head_dim {cfg.head_dim} must be even for RoPE")
        scaling = cfg.rope_scaling
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type", "default"))
            if kind not in ("default", "llama3", "linear", "longrope"):
                raise ModelFormatError(f"{path}: rope scaling {kind!r} is not supported "
                                       "(default, linear, llama3, longrope)")
            if kind == "longrope":
                cfg.rope_scaling = _longrope_scaling(dict(scaling), data, cfg, path)
            if kind == "llama3":
                _check_llama3_scaling(scaling, path)
        return cfg

    @staticmethod
    def from_json(path) -> "LlamaConfig":
        """A Hugging Face ``config.json`` (a file or the directory holding it)."""
        return LlamaConfig.from_dict(read_json(path), path)


def _family_options(data: dict, path) -> None:
    """Set, in ``data``, the flags that make a Mistral or Qwen config a Llama one."""
    mtype = data.get("model_type") or ""
    archs = " ".join(data.get("architectures") or []).lower()
    if mtype == "qwen2" or not mtype and "qwen2" in archs:
        data["qkv_bias"] = True
    if mtype == "qwen3" or not mtype and "qwen3" in archs:
        data["qk_norm"] = True
    if mtype in ("qwen2", "qwen3") and not data.get("use_sliding_window", False):
        data["sliding_window"] = None  # Qwen files state a window they do not use
    window = data.get("sliding_window")
    if window is not None:
        positive_int(data, path, "sliding_window")
        types = data.get("layer_types")
        if types is None and mtype in ("qwen2", "qwen3"):
            first = data.get("max_window_layers", data["num_hidden_layers"])
            types = [SLIDING if i >= first else FULL for i in range(data["num_hidden_layers"])]
        if types is not None and (len(types) != data["num_hidden_layers"]
                                  or set(types) - {SLIDING, FULL}):
            raise ModelFormatError(
                f"{path}: layer_types must list {data['num_hidden_layers']} entries of "
                f"{SLIDING!r} or {FULL!r}, got {types!r}")
        data["layer_types"] = types
    else:
        data["layer_types"] = None


def _longrope_scaling(scaling: dict, data: dict, cfg, path) -> dict:
    """Phi-3's LongRoPE parameters, completed as Hugging Face completes them."""
    half = cfg.head_dim // 2
    for key in ("short_factor", "long_factor"):
        v = scaling.get(key)
        if not isinstance(v, list) or len(v) != half:
            raise ModelFormatError(f"{path}: rope_scaling (longrope) {key} must list {half} "
                                   f"numbers (head_dim / 2), got {v!r}")
    original = scaling.get("original_max_position_embeddings",
                           data.get("original_max_position_embeddings"))
    if not isinstance(original, int) or original < 1:
        raise ModelFormatError(f"{path}: longrope needs original_max_position_embeddings")
    scaling["original_max_position_embeddings"] = original
    factor = scaling.get("factor") or cfg.max_position_embeddings / original
    if scaling.get("attention_factor") is None:
        scaling["attention_factor"] = 1.0 if factor <= 1.0 else math.sqrt(
            1 + math.log(factor) / math.log(original))
    return scaling


def _check_llama3_scaling(scaling: dict, path) -> None:
    """The numbers Llama-3 frequency scaling needs, present and usable."""
    def number(key, default=None):
        v = scaling.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            shown = "missing" if v is None else repr(v)
            raise ModelFormatError(
                f"{path}: rope_scaling (llama3) key {key!r} is {shown}; it must be a positive "
                f"number (Llama 3.1 files have factor 8.0, low_freq_factor 1.0, "
                f"high_freq_factor 4.0, original_max_position_embeddings 8192)")
        return float(v)

    number("factor")
    number("original_max_position_embeddings", 8192)
    low, high = number("low_freq_factor", 1.0), number("high_freq_factor", 4.0)
    if high <= low:
        raise ModelFormatError(f"{path}: rope_scaling (llama3) high_freq_factor {high} must be "
                               f"above low_freq_factor {low}")


def context_limit(config: LlamaConfig, max_context: int | None) -> int:
    """The positions a generation may use: the model's context, capped by ``max_context``."""
    limit = int(config.max_position_embeddings)
    if max_context is not None:
        if int(max_context) < 1:
            raise ValueError(f"max_context must be at least 1, got {max_context}")
        limit = min(limit, int(max_context))
    return limit


def rope_frequencies(cfg: LlamaConfig, theta: float | None = None,
                     scaling: dict | None | bool = True) -> np.ndarray:
    """Inverse frequencies (head_dim / 2,), in f32 as Hugging Face computes them, for
    base ``theta`` (the config's ``rope_theta`` by default) and the config's scaling
    (``scaling=None``: none)."""
    d = cfg.head_dim
    theta = cfg.rope_theta if theta is None else theta
    exps = np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / np.float32(d)
    inv = (np.float32(1.0) / (np.float32(theta) ** exps)).astype(np.float32)
    s = cfg.rope_scaling if scaling is True else scaling
    if s and s.get("rope_type", s.get("type")) == "linear":
        inv = (inv / np.float32(s["factor"])).astype(np.float32)
    if s and s.get("rope_type", s.get("type")) == "llama3":
        factor = float(s["factor"])
        low, high = float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
        old = float(s.get("original_max_position_embeddings", 8192))
        low_wl, high_wl = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def _rope_table(config: LlamaConfig, limit: int):
    s = config.rope_scaling
    if not s or s.get("rope_type", s.get("type")) != "longrope":
        return RopeTable(rope_frequencies(config), limit)
    base = rope_frequencies(config, scaling=None)
    short = (base / np.asarray(s["short_factor"], np.float32)).astype(np.float32)
    long = (base / np.asarray(s["long_factor"], np.float32)).astype(np.float32)
    return LongRopeTable(short, long, s["original_max_position_embeddings"],
                         s["attention_factor"], limit)


class Cache:
    """Rotary tables, causal masks and the key/value cache of one generation.

    ``max_positions`` is the model's context, or ``max_context`` if smaller. The
    rotary tables and the key/value buffers grow with the positions used (see
    ``reserve``), so a context the file claims costs nothing until it is filled."""

    def __init__(self, config: LlamaConfig, dtype=dt.f32, device=None, use_kv_cache: bool = True,
                 max_context: int | None = None):
        self.config = config
        self.dtype = dt.DType.parse(dtype)
        self.device = Device.parse(device) if device is not None else Device.cpu()
        self.use_kv_cache = use_kv_cache
        self.max_positions = context_limit(config, max_context)
        self._rope = _rope_table(config, self.max_positions)
        self.cos = self.sin = None
        # Gemma 3's sliding layers rotate with their own base and no scaling
        self._rope_local = None if config.rope_local_theta is None else RopeTable(
            rope_frequencies(config, config.rope_local_theta, None), self.max_positions)
        self.cos_local = self.sin_local = None
        self._kv = [None] * config.num_hidden_layers
        self.seq_len = 0

    def reserve(self, positions: int) -> None:
        """Rotary tables for positions ``0..positions - 1``."""
        if self._rope.reserve(positions) or self.cos is None:
            self.cos = Tensor(self._rope.cos).to_dtype(self.dtype).to_device(self.device)
            self.sin = Tensor(self._rope.sin).to_dtype(self.dtype).to_device(self.device)
        if self._rope_local is not None and (self._rope_local.reserve(positions)
                                             or self.cos_local is None):
            self.cos_local = Tensor(self._rope_local.cos).to_dtype(self.dtype).to_device(self.device)
            self.sin_local = Tensor(self._rope_local.sin).to_dtype(self.dtype).to_device(self.device)

    def rotary(self, layer: int, index_pos: int, seq: int):
        """``cos, sin`` (seq, head_dim / 2) of ``layer`` for positions ``index_pos..``."""
        local = self._rope_local is not None and self.config.window(layer) is not None
        cos, sin = (self.cos_local, self.sin_local) if local else (self.cos, self.sin)
        return cos.narrow(0, index_pos, seq), sin.narrow(0, index_pos, seq)

    def reset(self) -> None:
        self._kv = [None] * self.config.num_hidden_layers
        self.seq_len = 0

    def mask(self, seq: int, index_pos: int, window: int | None = None):
        """Additive causal mask (seq, index_pos + seq), or None where it hides nothing
        (one new token that sees every key). With ``window``, a query at position
        ``i`` sees the keys ``i - window + 1 .. i`` only (sliding-window attention).
        Built from each query's position, so rows at different positions fit it."""
        total = index_pos + seq
        if seq == 1 and (window is None or total <= window):
            return None
        i = np.arange(seq)[:, None] + index_pos
        j = np.arange(total)[None, :]
        hidden = j > i
        if window is not None:
            hidden |= j <= i - window
        m = np.where(hidden, np.float32(np.finfo(np.float32).min), np.float32(0.0))
        return Tensor(m).to_dtype(self.dtype).to_device(self.device)

    def update(self, layer: int, k: Tensor, v: Tensor, index_pos: int):
        """Store ``k, v`` (b, hk, seq, d) at ``index_pos``; return all keys/values so far.

        Each layer's ``KvCache`` grows its buffers by doubling (from 256 positions,
        capped at the context), so a long context costs memory only when it is used,
        and each step writes in place. Writing at an earlier position than the cached
        ones generates again from there."""
        if not self.use_kv_cache:
            return k, v
        kv = self._kv[layer]
        if kv is None:
            kv = self._kv[layer] = KvCache(2, self.max_positions)
        cached = kv.k()
        if cached is None or cached.shape[0] != k.shape[0]:
            if index_pos != 0:
                raise ShapeMismatchError(
                    f"Cache: index_pos {index_pos} with an empty cache (start at 0 or reset)")
            kv.truncate(0)
        elif index_pos != kv.current_seq_len:
            kv.truncate(index_pos)
        return kv.append(k, v)


class LlamaAttention(Module):
    def __init__(self, vb, cfg: LlamaConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads, cfg.num_key_value_heads, d)
        bias = cfg.attention_bias
        qkv_bias = bias or cfg.qkv_bias
        if vb.contains_tensor("qkv_proj.weight"):  # Phi-3: one fused projection
            self.q_proj, self.k_proj, self.v_proj = split_linear(
                vb.pp("qkv_proj"), h, (self.num_heads * d, self.num_kv_heads * d,
                                       self.num_kv_heads * d), qkv_bias)
        else:
            self.q_proj = Linear.load(vb.pp("q_proj"), h, self.num_heads * d, qkv_bias)
            self.k_proj = Linear.load(vb.pp("k_proj"), h, self.num_kv_heads * d, qkv_bias)
            self.v_proj = Linear.load(vb.pp("v_proj"), h, self.num_kv_heads * d, qkv_bias)
        self.o_proj = Linear.load(vb.pp("o_proj"), self.num_heads * d, h, bias)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm:
            self.q_norm = load_rms_norm(vb.pp("q_norm"), d, cfg)
            self.k_norm = load_rms_norm(vb.pp("k_norm"), d, cfg)
        scalar = cfg.query_pre_attn_scalar
        self.scale = 1.0 / math.sqrt(d if scalar is None else scalar)

    def forward(self, x: Tensor, index_pos: int, layer: int, cache: Cache, mask) -> Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        q = self.q_proj(x).reshape((b, s, self.num_heads, d))
        k = self.k_proj(x).reshape((b, s, self.num_kv_heads, d))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).reshape((b, s, self.num_kv_heads, d)).transpose(1, 2)
        if isinstance(cache, SequenceRows):  # one token of each of b sequences
            y = cache.attend(layer, q, k, v, self.scale, rope)
        else:
            cos, sin = cache.rotary(layer, index_pos, s)
            q = rope(q, cos, sin)
            k = rope(k, cos, sin)
            k, v = cache.update(layer, k, v, index_pos)
            y = ops.scaled_dot_product_attention(q, k, v, mask, scale=self.scale)
        y = y.transpose(1, 2).reshape((b, s, self.num_heads * d))
        return self.o_proj(y)


class LlamaMlp(Module):
    def __init__(self, vb, cfg: LlamaConfig):
        super().__init__()
        h, i, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        if vb.contains_tensor("gate_up_proj.weight"):  # Phi-3: gate and up fused
            self.gate_proj, self.up_proj = split_linear(vb.pp("gate_up_proj"), h, (i, i), bias)
        else:
            self.gate_proj = Linear.load(vb.pp("gate_proj"), h, i, bias)
            self.up_proj = Linear.load(vb.pp("up_proj"), h, i, bias)
        self.down_proj = Linear.load(vb.pp("down_proj"), i, h, bias)
        self.gelu = cfg.hidden_act in GELU_TANH

    def forward(self, x: Tensor) -> Tensor:
        g = self.gate_proj(x)
        g = g.gelu() if self.gelu else g.silu()
        return self.down_proj(g * self.up_proj(x))


def split_linear(vb, in_features: int, outs: tuple, bias: bool) -> list:
    """Linears over consecutive row blocks of one fused weight (and bias)."""
    fused = Linear.load(vb, in_features, sum(outs), bias)
    parts, start = [], 0
    for n in outs:
        w = weight_rows(fused.weight, start, n)
        b = None if fused.bias is None else fused.bias.narrow(0, start, n).contiguous()
        parts.append(Linear.from_weights(w, b))
        start += n
    return parts


def weight_rows(weight, start: int, n: int):
    """Rows ``start .. start + n`` of a weight, a Tensor or a quantized ``QTensor``
    (a GGUF file's fused projection): a quantized row is a whole number of blocks,
    so its rows are a byte range and stay quantized."""
    if isinstance(weight, Tensor):
        return weight.narrow(0, start, n).contiguous()
    from ..quantized.qtensor import QTensor

    cols = weight.shape[1]
    row_bytes = weight.ggml_type.nbytes(cols)
    if weight.device.is_cpu:  # a view of the file's map
        raw = weight.raw[start * row_bytes:(start + n) * row_bytes]
    else:
        raw = weight.blocks.narrow(0, start * row_bytes, n * row_bytes)
    return QTensor(raw, (n, cols), weight.ggml_type, weight.device)


def load_rms_norm(vb, size: int, cfg: LlamaConfig) -> RmsNorm:
    """An RMSNorm; Gemma's store ``weight - 1`` (they scale by ``1 + weight``)."""
    norm = RmsNorm.load(vb, size, cfg.rms_norm_eps)
    if cfg.norm_adds_one:
        norm.weight = norm.weight + 1.0
    return norm


class LlamaBlock(Module):
    def __init__(self, vb, cfg: LlamaConfig):
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = load_rms_norm(vb.pp("input_layernorm"), h, cfg)
        self.self_attn = LlamaAttention(vb.pp("self_attn"), cfg)
        self.post_attention_layernorm = load_rms_norm(vb.pp("post_attention_layernorm"), h, cfg)
        self.sandwich = cfg.sandwich_norms
        if self.sandwich:
            # Gemma: post_attention_layernorm normalises the attention's output, and the
            # MLP has a norm before and after it
            self.pre_feedforward_layernorm = load_rms_norm(vb.pp("pre_feedforward_layernorm"), h, cfg)
            self.post_feedforward_layernorm = load_rms_norm(vb.pp("post_feedforward_layernorm"), h,
                                                            cfg)
        self.mlp = LlamaMlp(vb.pp("mlp"), cfg)

    def forward(self, x, index_pos, layer, cache, mask):
        a = self.self_attn(self.input_layernorm(x), index_pos, layer, cache, mask)
        if not self.sandwich:
            h = x + a
            return h + self.mlp(self.post_attention_layernorm(h))
        h = x + self.post_attention_layernorm(a)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class _Inner(Module):
    def __init__(self, vb, cfg):
        super().__init__()
        self.embed_tokens = Embedding.load(vb.pp("embed_tokens"), cfg.vocab_size, cfg.hidden_size)
        self.layers = ModuleList(LlamaBlock(vb.pp(f"layers.{i}"), cfg)
                                 for i in range(cfg.num_hidden_layers))
        self.norm = load_rms_norm(vb.pp("norm"), cfg.hidden_size, cfg)
        self.embed_scale = cfg.embed_scale


class Llama(SequenceBatching, Module):
    """``LlamaForCausalLM``: ``forward(input_ids, index_pos, cache)`` -> last-position logits;
    several sequences at once with ``new_sequence`` / ``prefill`` / ``step_batch``
    (see ``sequences.py``)."""

    def __init__(self, vb, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        if not vb.contains_tensor("model.embed_tokens.weight"):
            raise ModelFormatError(
                f"no Llama weights in {vb.describe()} (no tensor 'model.embed_tokens.weight')")
        self.model = _Inner(vb.pp("model"), cfg)
        if cfg.tie_word_embeddings or not vb.contains_tensor("lm_head.weight"):
            self.lm_head = Linear.from_weights(self.model.embed_tokens.weight)
        else:
            self.lm_head = Linear.load(vb.pp("lm_head"), cfg.hidden_size, cfg.vocab_size, False)

    @classmethod
    def load(cls, vb, config: LlamaConfig) -> "Llama":
        return cls(vb, config)

    @property
    def dtype(self):
        return self.model.embed_tokens.weight.dtype

    def _hidden(self, input_ids: Tensor, index_pos: int, cache: Cache) -> Tensor:
        return decoder_hidden(self.model, input_ids, index_pos, cache, "Llama",
                              "max_position_embeddings")

    def forward(self, input_ids: Tensor, index_pos: int, cache: Cache) -> Tensor:
        """Logits ``(batch, vocab)`` (f32) for the position after the last input token."""
        h = self._hidden(input_ids, index_pos, cache)
        return self._head(h.narrow(1, h.shape[1] - 1, 1).squeeze(1))

    def _head(self, h: Tensor) -> Tensor:
        """Final hidden states -> f32 logits."""
        return soft_cap(self.lm_head(h).to_dtype(dt.f32), self.config)

    def logits(self, input_ids: Tensor, index_pos: int, cache: Cache) -> Tensor:
        """Logits ``(batch, seq, vocab)`` (f32) for every input position."""
        h = self._hidden(input_ids, index_pos, cache)
        return soft_cap(self.lm_head(h).to_dtype(dt.f32), self.config)

    def new_cache(self, use_kv_cache: bool = True, max_context: int | None = None) -> Cache:
        return Cache(self.config, self.dtype, self.model.embed_tokens.weight.device, use_kv_cache,
                     max_context)


def soft_cap(logits: Tensor, cfg) -> Tensor:
    """``cap * tanh(logits / cap)`` where the config has a final soft cap (Gemma)."""
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap is None:
        return logits
    return (logits / float(cap)).tanh() * float(cap)


def decoder_hidden(model, input_ids: Tensor, index_pos: int, cache: Cache, who: str,
                   context_from: str) -> Tensor:
    """The decoder stack's final hidden states for ``input_ids`` at ``index_pos``,
    after checking the positions against the context and the cache (shared by the
    safetensors and the GGUF Llama; ``who``/``context_from`` name them in errors)."""
    if input_ids.rank != 2:
        raise ShapeMismatchError(f"{who}: input_ids must be (batch, seq), got {input_ids.shape}")
    _, s = input_ids.shape
    if s == 0:
        raise ShapeMismatchError(f"{who}: input_ids is empty")
    index_pos = int(index_pos)
    if index_pos < 0 or index_pos + s > cache.max_positions:
        raise ContextLengthError(
            f"{who}: positions {index_pos}..{index_pos + s - 1} do not fit in the context of "
            f"{cache.max_positions} tokens ({context_from})")
    if cache.use_kv_cache and index_pos > cache.seq_len:
        raise ShapeMismatchError(
            f"{who}: index_pos {index_pos} is past the {cache.seq_len} cached positions")
    cache.reserve(index_pos + s)
    x = embed_tokens(model, input_ids)
    start = index_pos if cache.use_kv_cache else 0
    masks = {}
    config = cache.config
    for i, layer in enumerate(model.layers):
        window = config.window(i) if hasattr(config, "window") else None
        if window not in masks:
            masks[window] = cache.mask(s, start, window)
        x = layer(x, index_pos, i, cache, masks[window])
    cache.seq_len = index_pos + s
    return model.norm(x)
