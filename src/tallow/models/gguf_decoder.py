"""Qwen2/2.5, Qwen3, Gemma 3 and Phi-3 from llama.cpp GGUF files, on the Llama decoder.

llama.cpp stores these families' q/k rows as Hugging Face does (their rotation is
the "NeoX" half-split one, so its converter does not permute them as it does
Llama's), so the Tensor-path ``Llama`` runs them unchanged: ``GgufBackend`` serves
its ``VarBuilder`` names from the file's tensors under llama.cpp's names. The
projections stay quantized (each ``Linear`` holds a ``QTensor``); embeddings,
norms and biases are dequantized to f32. ``gguf_models.load_gguf_model`` gives these
families the quantized Llama (``quantized_llama.ModelWeights``) instead, whose
compiled decode reads the same options from the config made here; this module's
``Llama`` is its Tensor path (GPU, no compiled kernels).

What llama.cpp does not store and fixes in code is fixed the same way here:
Gemma 3's sliding window covers five layers in six, its sliding layers rotate with
base 10000, and its scores are scaled by ``head_dim ** -0.5``; the converter has
already added Gemma's one to its norm weights.

Phi-3 keeps Hugging Face's fused projections (``attn_qkv``; ``ffn_up`` holds the
gate rows, then the up rows), which the decoder splits by rows, still quantized;
its LongRoPE factors are the tensors ``rope_factors_short`` / ``rope_factors_long``
and the attention factor the key ``phi3.rope.scaling.attn_factor``.
"""

from __future__ import annotations

import math
import os
import re

from ..device import Device, cpu
from ..errors import ShapeMismatchError
from ..ggml.gguf_io import GgufFile, read_gguf
from ..nn.linear import Linear
from ..nn.var_builder import MissingTensorError, VarBuilder
from ..quantized.gguf_file import qtensor_of
from .config import ModelFormatError
from .llama import FULL, SLIDING, Llama, LlamaConfig

GGUF_FAMILIES = ("qwen2", "qwen3", "gemma3", "phi3")

_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
          "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
          "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
          "pre_feedforward_layernorm": "ffn_norm",
          "post_feedforward_layernorm": "post_ffw_norm"}
# Phi-3's fused projections (its ffn_up is gate_up_proj, not up_proj)
_FUSED = {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up", "mlp.up_proj": None}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def gguf_name(hf_name: str, sandwich: bool, fused: bool = False) -> str:
    """llama.cpp's name of a Hugging Face tensor name (``fused``: Phi-3's layout)."""
    m = _LAYER_NAME.match(hf_name)
    if m:
        i, module, kind = m.groups()
        if module == "post_attention_layernorm":
            # Gemma normalises the attention's output with it; Llama-likes the MLP's input
            part = "post_attention_norm" if sandwich else "ffn_norm"
        elif fused and module in _FUSED:
            part = _FUSED[module]
        else:
            part = _LAYER.get(module)
        if part is not None:
            return f"blk.{i}.{part}.{kind}"
    else:
        module, _, kind = hf_name.rpartition(".")
        if module in _TOP:
            return f"{_TOP[module]}.{kind}"
    raise MissingTensorError(f"no llama.cpp name for tensor {hf_name!r}")


class GgufBackend:
    """A VarBuilder backend over a GGUF file's tensors, asked for by Hugging Face names."""

    def __init__(self, f: GgufFile, sandwich: bool, fused: bool = False):
        self.f = f
        self.sandwich = sandwich
        self.fused = fused

    def _name(self, name):
        return gguf_name(name, self.sandwich, self.fused)

    def describe(self):
        return self.f.path

    def keys(self):
        return list(self.f.tensors)

    def _tensor(self, name):
        try:
            return self.f.tensors.get(self._name(name))
        except MissingTensorError:
            return None

    def contains(self, name):
        return self._tensor(name) is not None

    def get(self, shape, name, init, dtype, device):
        t = self._tensor(name)
        if t is None:
            raise MissingTensorError(f"{self.f.path}: missing tensor "
                                     f"{self._name(name)!r} ({name})")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise ShapeMismatchError(f"{self.f.path}: tensor {self._name(name)!r} "
                                     f"has shape {tuple(t.shape)}, expected {tuple(shape)}")
        q = qtensor_of(t, device)
        if len(t.shape) == 2 and not t.ggml_type.is_float and "embed_tokens" not in name:
            return q  # a projection: multiplied in its quantized form
        return q.dequantize().to_dtype(dtype)


def config_from_gguf(f: GgufFile) -> LlamaConfig:
    """The decoder's config from llama.cpp's metadata keys."""
    path = f.path
    arch = f.value("general.architecture")
    if arch not in GGUF_FAMILIES:
        raise ModelFormatError(f"{path}: general.architecture is {arch!r}; supported: "
                               f"llama, {', '.join(GGUF_FAMILIES)}")

    def value(key, default=None):
        v = f.value(f"{arch}.{key}", default)
        if v is None:
            raise ModelFormatError(f"{path}: missing metadata key {arch}.{key}")
        return v

    emb = f.tensors.get("token_embd.weight")
    if emb is None:
        raise ModelFormatError(f"{path}: no tensor 'token_embd.weight'")
    hidden = int(value("embedding_length"))
    heads = int(value("attention.head_count"))
    head_dim = int(value("attention.key_length", hidden // heads))
    blocks = int(value("block_count"))
    data = {
        "model_type": "llama",
        "vocab_size": int(emb.shape[0]),
        "hidden_size": hidden,
        "intermediate_size": int(value("feed_forward_length")),
        "num_hidden_layers": blocks,
        "num_attention_heads": heads,
        "num_key_value_heads": int(value("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(value("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(value("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(value("context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in f.tensors,
        "bos_token_id": f.value("tokenizer.ggml.bos_token_id"),
        "eos_token_id": f.value("tokenizer.ggml.eos_token_id"),
        "qkv_bias": arch == "qwen2",
        "qk_norm": arch in ("qwen3", "gemma3"),
    }
    scaling = f.value(f"{arch}.rope.scaling.type")
    factor = float(f.value(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    if scaling == "linear" and factor != 1.0:
        data["rope_scaling"] = {"rope_type": "linear", "factor": factor}
    elif scaling not in (None, "none") and factor != 1.0:
        raise ModelFormatError(f"{path}: rope scaling {scaling!r} is not supported")
    if arch == "phi3":
        _phi3_options(f, data, value)
    if arch == "gemma3":
        window = f.value("gemma3.attention.sliding_window")
        data.update({
            "hidden_act": "gelu_pytorch_tanh",
            "sliding_window": int(window) if window else None,
            # llama.cpp's Gemma 3: every sixth layer global, the others sliding
            "layer_types": [SLIDING if (i + 1) % 6 else FULL for i in range(blocks)],
            "embed_scale": math.sqrt(hidden),
            "sandwich_norms": True,
            "query_pre_attn_scalar": head_dim,
            "rope_local_theta": 10000.0,
            "norm_adds_one": False,  # the converter added it to the stored weights
        })
        if not window:
            data["layer_types"] = None
        # llama.cpp ends a Gemma generation at <end_of_turn> too (the chat's end)
        tokens = f.value("tokenizer.ggml.tokens") or []
        if "<end_of_turn>" in tokens and data["eos_token_id"] is not None:
            data["eos_token_id"] = [int(data["eos_token_id"]), tokens.index("<end_of_turn>")]
    return LlamaConfig.from_dict(data, path)


def _phi3_options(f: GgufFile, data: dict, value) -> None:
    """Phi-3's sliding window and LongRoPE factors, from llama.cpp's keys and tensors."""
    path = f.path
    rope_dims = int(value("rope.dimension_count", data["head_dim"]))
    if rope_dims != data["head_dim"]:
        raise ModelFormatError(f"{path}: phi3.rope.dimension_count {rope_dims} is not the head "
                               f"size {data['head_dim']} (partial rotary is not supported)")
    window = int(f.value("phi3.attention.sliding_window", 0) or 0)
    # 0 marks a file without a window; Hugging Face's Phi-3 slides every layer
    data["sliding_window"] = window or None
    long, short = f.tensors.get("rope_factors_long.weight"), f.tensors.get("rope_factors_short.weight")
    if long is None and short is None:
        return
    if long is None or short is None:
        raise ModelFormatError(f"{path}: LongRoPE needs both rope_factors_long and "
                               "rope_factors_short tensors, the file has one")
    data["rope_scaling"] = {
        "rope_type": "longrope",
        "short_factor": [float(x) for x in short.dequantize().reshape(-1)],
        "long_factor": [float(x) for x in long.dequantize().reshape(-1)],
        "original_max_position_embeddings": int(value("rope.scaling.original_context_length")),
        "attention_factor": f.value("phi3.rope.scaling.attn_factor"),
    }


def load_gguf_decoder(path, device=cpu) -> Llama:
    """A Qwen2/2.5, Qwen3, Gemma 3 or Phi-3 GGUF file as a ``Llama`` (quantized projections)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such GGUF file: {path}")
    f = read_gguf(path)
    return decoder_of_file(f, config_from_gguf(f), device)


def decoder_of_file(f: GgufFile, cfg: LlamaConfig, device=cpu) -> Llama:
    """The Tensor-path ``Llama`` of a parsed GGUF file and its config."""
    device = Device.parse(device)
    fused = f.value("general.architecture") == "phi3"
    vb = VarBuilder(GgufBackend(f, cfg.sandwich_norms, fused), "f32", device)
    model = Llama.load(vb, cfg)
    if cfg.tie_word_embeddings:
        # llama.cpp's rule: the output multiplies by the token embedding as stored
        model.lm_head = Linear.from_weights(qtensor_of(f.tensors["token_embd.weight"], device))
    return model


# Gemma's chat format, which llama.cpp applies to Gemma files that carry no template
GEMMA_CHAT = "<start_of_turn>{role}\n{content}<end_of_turn>\n"


def gemma_chat_prompt(messages) -> str:
    """Gemma's standard chat prompt (``assistant`` is its ``model`` role; a system
    message is put before the first user message, as Gemma's own template does)."""
    system = "".join(m["content"] + "\n\n" for m in messages if m["role"] == "system")
    out = []
    for m in messages:
        if m["role"] == "system":
            continue
        role = "model" if m["role"] == "assistant" else m["role"]
        content = m["content"]
        if system and role == "user":
            content, system = system + content, ""
        out.append(GEMMA_CHAT.format(role=role, content=content))
    return "".join(out) + "<start_of_turn>model\n"

