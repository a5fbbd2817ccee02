"""Gemma 3 (text): Hugging Face's ``Gemma3ForCausalLM`` on the Llama decoder.

What Gemma 3 changes, each an option of ``LlamaConfig`` read here from its
``config.json`` (``model_type`` "gemma3_text"):

- token embeddings scaled by ``sqrt(hidden_size)``;
- RMSNorm scaling by ``1 + weight`` (the loader adds the one to the stored weights);
- norms before and after both attention and the MLP;
- a GeGLU MLP (GELU with the tanh approximation);
- RMSNorm over each head's queries and keys;
- attention scores scaled by ``query_pre_attn_scalar ** -0.5``;
- sliding-window layers (``layer_types``, or every ``sliding_window_pattern``-th layer
  global) rotated with base ``rope_local_base_freq``, global ones with ``rope_theta``
  and its scaling;
- logits soft-capped where ``final_logit_softcapping`` is set.
"""

from __future__ import annotations

import math

from .config import ModelFormatError, positive_int, read_json, require
from .llama import FULL, SLIDING, LlamaConfig

GEMMA3_TYPES = ("gemma3_text",)


def gemma3_config(data: dict, path="config") -> LlamaConfig:
    """A ``LlamaConfig`` with Gemma 3's options from its ``config.json`` contents."""
    if data.get("model_type") == "gemma3" and "text_config" in data:
        raise ModelFormatError(
            f"{path}: this is Gemma 3's multimodal model (Gemma3ForConditionalGeneration); "
            "only the text models (model_type 'gemma3_text', as gemma-3-270m and "
            "gemma-3-1b) are supported")
    require(data, path, "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads")
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads"):
        positive_int(data, path, key)
    if data.get("attn_logit_softcapping") is not None:
        raise ModelFormatError(f"{path}: attn_logit_softcapping is not supported "
                               "(Gemma 2's soft-capped attention scores)")
    n = data["num_hidden_layers"]
    params = data.get("rope_parameters") or {}
    full = dict(params.get(FULL) or {})
    local = dict(params.get(SLIDING) or {})
    scaling = data.get("rope_scaling") or (full if full.get("rope_type", "default") != "default"
                                           else None)
    types = data.get("layer_types")
    if types is None:
        pattern = int(data.get("sliding_window_pattern", 6))
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(n)]
    if len(types) != n or set(types) - {SLIDING, FULL}:
        raise ModelFormatError(f"{path}: layer_types must list {n} entries of {SLIDING!r} or "
                               f"{FULL!r}, got {types!r}")
    hidden = data["hidden_size"]
    heads = data["num_attention_heads"]
    return LlamaConfig.from_dict({
        "model_type": "llama",
        "vocab_size": data["vocab_size"],
        "hidden_size": hidden,
        "intermediate_size": data["intermediate_size"],
        "num_hidden_layers": n,
        "num_attention_heads": heads,
        "num_key_value_heads": data.get("num_key_value_heads", heads),
        "head_dim": data.get("head_dim", 256),
        "rms_norm_eps": data.get("rms_norm_eps", 1e-6),
        "rope_theta": data.get("rope_theta", full.get("rope_theta", 1_000_000.0)),
        "rope_scaling": scaling,
        "max_position_embeddings": data.get("max_position_embeddings", 131_072),
        "tie_word_embeddings": data.get("tie_word_embeddings", True),
        "bos_token_id": data.get("bos_token_id", 2),
        "eos_token_id": data.get("eos_token_id", 1),
        "attention_bias": data.get("attention_bias", False),
        "hidden_act": data.get("hidden_activation", data.get("hidden_act", "gelu_pytorch_tanh")),
        "qk_norm": True,
        "sliding_window": data.get("sliding_window", 4096),
        "layer_types": types,
        "embed_scale": math.sqrt(hidden),
        "sandwich_norms": True,
        "norm_adds_one": True,
        "query_pre_attn_scalar": data.get("query_pre_attn_scalar", 256),
        "rope_local_theta": data.get("rope_local_base_freq", local.get("rope_theta", 10_000.0)),
        "final_logit_softcapping": data.get("final_logit_softcapping"),
    }, path)


def load_gemma3_config(path) -> LlamaConfig:
    return gemma3_config(read_json(path), path)
