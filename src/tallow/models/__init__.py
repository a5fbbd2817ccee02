"""Models (candle-transformers): BERT sentence embeddings and the Llama family of
decoders (Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma 3).

The submodules load on first use: ``tl.models.bert``, ``tl.models.llama``,
``tl.models.generate``, ``tl.models.sentence``, ``tl.models.decoders`` (which family
a config.json holds), ``tl.models.gguf_models`` (the model of a GGUF file of any supported family);
``tl.models.SentenceEmbedder``.
"""

import importlib

_SUBMODULES = ("bert", "llama", "generate", "sentence", "config", "quantized_llama",
               "decoders", "gemma3", "gguf_decoder", "gguf_models")
_NAMES = {"SentenceEmbedder": "sentence", "BertModel": "bert", "BertConfig": "bert",
          "Llama": "llama", "LlamaConfig": "llama", "Cache": "llama",
          "TextGenerator": "generate", "ModelFormatError": "config",
          "ContextLengthError": "config"}


def __getattr__(name):
    if name in _SUBMODULES:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["bert", "llama", "generate", "sentence", "SentenceEmbedder", "BertModel",
           "BertConfig", "Llama", "LlamaConfig", "Cache", "TextGenerator", "ModelFormatError",
           "ContextLengthError"]
