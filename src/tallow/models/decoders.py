"""Which decoder a model file holds, read from its metadata.

A Hugging Face directory says it in ``config.json`` (``model_type``, else
``architectures``); a GGUF file in ``general.architecture``. ``decoder_config``
gives the ``LlamaConfig`` (with the family's options) for a config.json, and an
unsupported architecture is refused with the list of those supported.
"""

from __future__ import annotations

from .config import ModelFormatError, read_json
from .gemma3 import GEMMA3_TYPES, gemma3_config
from .llama import LLAMA_TYPES, LlamaConfig

# model_type -> the family's config reader
_HF_FAMILIES = {**{t: LlamaConfig.from_dict for t in LLAMA_TYPES},
                **{t: gemma3_config for t in GEMMA3_TYPES}}
# architectures entries (transformers' class names) of files without a model_type
_HF_CLASSES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
               "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
               "Gemma3ForCausalLM": "gemma3_text"}

SUPPORTED_HF = tuple(_HF_FAMILIES)


def hf_model_type(data: dict) -> str | None:
    mtype = data.get("model_type")
    if mtype is not None:
        return mtype
    for arch in data.get("architectures") or []:
        if arch in _HF_CLASSES:
            return _HF_CLASSES[arch]
    return None


def decoder_config_from_dict(data: dict, path="config") -> LlamaConfig:
    mtype = hf_model_type(data)
    reader = _HF_FAMILIES.get(mtype)
    if reader is None:
        archs = data.get("architectures") or []
        shown = repr(mtype) if mtype is not None else f"architectures {archs}"
        raise ModelFormatError(
            f"{path}: this is a {shown} model, not a Llama model or one of the decoders "
            f"run as one (supported model_type: {', '.join(SUPPORTED_HF)})")
    return reader(data, path)


def decoder_config(path) -> LlamaConfig:
    """The config of the decoder in a ``config.json`` (a file or its directory)."""
    return decoder_config_from_dict(read_json(path), path)
