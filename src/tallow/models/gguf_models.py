"""Which model reads a GGUF file: by its ``general.architecture``, a Llama, Qwen2 or
Qwen3 on the quantized Llama path (``ModelWeights``, with its fast decode), the
other families on the Tensor path (``gguf_decoder.load_gguf_decoder``)."""

from __future__ import annotations

import os

from ..device import cpu
from ..ggml.gguf_io import read_gguf
from .gguf_decoder import load_gguf_decoder
from .quantized_llama import LLAMA_LIKE, ModelWeights


def gguf_architecture(path) -> str | None:
    """The file's ``general.architecture`` (``llama``, ``qwen3``, ``gemma3``...)."""
    return read_gguf(path).value("general.architecture")


def load_gguf_model(path, device=cpu):
    """The model of the GGUF file at ``path``, on ``device``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such GGUF file: {path}")
    if gguf_architecture(path) in ("llama",) + LLAMA_LIKE:
        return ModelWeights.from_gguf(path, device)
    return load_gguf_decoder(path, device)
