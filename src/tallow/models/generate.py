"""Text generation: sampling (candle's ``LogitsProcessor``) and a streaming loop.

``TextGenerator(model, tokenizer, temperature=..., top_k=..., top_p=..., seed=...,
repeat_penalty=...)``; ``generate(prompt, max_tokens)`` returns the text and
``stream(prompt, max_tokens)`` yields it piece by piece as tokens decode into
whole characters (candle's ``TokenOutputStream``). Sampling runs on the CPU on
the last position's logits, whatever device the model runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tensor_class import Tensor
from .config import ContextLengthError, ModelFormatError

DEFAULT_SEED = 299792458


class LogitsProcessor:
    """Greedy (``temperature`` None or <= 0) or sampling with top-k and/or top-p
    (``top_k`` None or 0 and ``top_p`` None or 1.0 keep every token)."""

    def __init__(self, seed: int = DEFAULT_SEED, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None):
        if top_k is not None and top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or more, got {top_k}")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.temperature = temperature if temperature and temperature > 0 else None
        self.top_k = top_k or None  # 0 turns it off, as in transformers
        self.top_p = top_p
        self.rng = np.random.default_rng(seed)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution sampled from (after temperature, top-k, top-p)."""
        z = logits.astype(np.float64) / self.temperature
        z -= z.max()
        p = np.exp(z)
        p /= p.sum()
        if self.top_k is not None and self.top_k < p.size:
            cut = np.partition(p, -self.top_k)[-self.top_k]
            p = np.where(p >= cut, p, 0.0)
            p /= p.sum()
        if self.top_p is not None and self.top_p < 1.0:
            order = np.argsort(-p, kind="stable")
            cum = np.cumsum(p[order])
            # Keep the smallest prefix whose mass reaches top_p (at least one token).
            keep = np.searchsorted(cum, self.top_p) + 1
            mask = np.zeros_like(p, dtype=bool)
            mask[order[:keep]] = True
            p = np.where(mask, p, 0.0)
            p /= p.sum()
        return p

    def sample(self, logits) -> int:
        if isinstance(logits, Tensor):
            logits = logits.to_dtype("f32").numpy()
        logits = np.asarray(logits).reshape(-1)
        if self.temperature is None:
            return int(np.argmax(logits))
        p = self.probabilities(logits)
        return int(self.rng.choice(p.size, p=p))


def apply_repeat_penalty(logits: np.ndarray, penalty: float, context) -> np.ndarray:
    """Divide positive (multiply negative) logits of tokens seen in ``context`` by ``penalty``."""
    if penalty == 1.0 or not len(context):
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    ids = np.unique(np.asarray(context, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < out.size)]
    v = out[ids]
    out[ids] = np.where(v >= 0, v / penalty, v * penalty)
    return out


class TokenOutputStream:
    """Decodes a growing token list into text, releasing only complete characters."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens = []
        self.prev_index = 0
        self.current_index = 0

    def _decode(self, tokens) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def next_token(self, token: int) -> str | None:
        prev_text = self._decode(self.tokens[self.prev_index:self.current_index]) \
            if self.tokens else ""
        self.tokens.append(token)
        text = self._decode(self.tokens[self.prev_index:])
        if len(text) > len(prev_text) and not text.endswith("\ufffd"):
            piece = text[len(prev_text):]
            self.prev_index = self.current_index
            self.current_index = len(self.tokens)
            return piece
        return None

    def decode_rest(self) -> str | None:
        prev_text = self._decode(self.tokens[self.prev_index:self.current_index]) \
            if self.tokens else ""
        text = self._decode(self.tokens[self.prev_index:])
        if len(text) > len(prev_text):
            return text[len(prev_text):]
        return None

    def clear(self):
        self.tokens, self.prev_index, self.current_index = [], 0, 0


@dataclass
class Generation:
    text: str
    token_ids: list
    prompt_tokens: int
    finish_reason: str  # "eos", "length" (max_tokens) or "context" (the context is full)
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        n = len(self.token_ids)
        return n / self.seconds if self.seconds > 0 else float("inf")


class TextGenerator:
    """Prompt in, tokens out, with a KV cache (one sequence at a time).

    ``max_context``: the most positions (prompt and generated tokens) a generation
    may use, below the model's own context; the cache grows with the tokens used
    either way, up to that bound."""

    def __init__(self, model, tokenizer, temperature: float | None = 0.8,
                 top_p: float | None = None, top_k: int | None = None, seed: int = DEFAULT_SEED,
                 repeat_penalty: float = 1.0, repeat_last_n: int = 64, eos_token_ids=None,
                 max_context: int | None = None):
        if max_context is not None and int(max_context) < 1:
            raise ValueError(f"max_context must be at least 1, got {max_context}")
        self.max_context = None if max_context is None else int(max_context)
        self.model = model
        self.tokenizer = tokenizer
        self.processor = LogitsProcessor(seed, temperature, top_k, top_p)
        if repeat_penalty <= 0:
            raise ValueError(f"repeat_penalty must be positive, got {repeat_penalty}")
        self.repeat_penalty = float(repeat_penalty)
        self.repeat_last_n = int(repeat_last_n)
        if self.repeat_last_n < 0:
            raise ValueError(f"repeat_last_n must be at least 0, got {repeat_last_n}")
        cfg = model.config
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab > cfg.vocab_size:
            raise ModelFormatError(
                f"TextGenerator: the tokenizer has {vocab} tokens but the model's vocab_size is "
                f"{cfg.vocab_size}: the tokenizer does not belong to this model")
        if eos_token_ids is None:
            eos_token_ids = list(cfg.eos_token_ids)
            for name in ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<eos>"):
                tid = tokenizer.token_to_id(name)
                if tid is not None and tid not in eos_token_ids:
                    eos_token_ids.append(tid)
        self.eos_token_ids = set(int(t) for t in eos_token_ids)

    def encode(self, prompt: str) -> list:
        ids = self.tokenizer.encode(prompt).ids
        if not ids:
            raise ValueError("TextGenerator: the prompt encodes to no tokens")
        return list(ids)

    def stream(self, prompt, max_tokens: int = 100, result: list | None = None):
        """Yield text pieces as they are generated. ``prompt`` is a string or token ids.

        If ``result`` is a list, the final ``Generation`` is appended to it.
        """
        import time

        ids = self.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        cache = self.model.new_cache() if self.max_context is None else \
            self.model.new_cache(max_context=self.max_context)
        limit = cache.max_positions
        # A prompt may fill the context: its last position still predicts one token.
        if len(ids) > limit:
            raise ContextLengthError(
                f"TextGenerator: the prompt has {len(ids)} tokens, the context is {limit} "
                "(the model's max_position_embeddings, or max_context / --max-context if "
                "smaller)")
        # the cache's device is the model's; asking the model's embedding for it would
        # build a GGUF model's Tensor modules that its array fast path never needs
        device = cache.device
        out = TokenOutputStream(self.tokenizer)
        generated, tokens = [], list(ids)
        finish = "length"
        start = time.perf_counter()
        index_pos, feed = 0, ids
        for _ in range(max(0, int(max_tokens))):
            x = Tensor(np.asarray([feed], dtype=np.uint32), device=device)
            logits = self.model.forward(x, index_pos, cache).to_dtype("f32").numpy()[0]
            index_pos += len(feed)
            if self.repeat_penalty != 1.0:
                # The last repeat_last_n tokens (candle's window; 0 is an empty one:
                # tokens[-0:] would be all of them).
                window = tokens[max(0, len(tokens) - self.repeat_last_n):]
                logits = apply_repeat_penalty(logits, self.repeat_penalty, window)
            nxt = self.processor.sample(logits)
            tokens.append(nxt)
            generated.append(nxt)
            if nxt in self.eos_token_ids:
                finish = "eos"
                break
            piece = out.next_token(nxt)
            if piece:
                yield piece
            if index_pos >= limit:
                finish = "context"
                break
            feed = [nxt]
        rest = out.decode_rest()
        if rest:
            yield rest
        if result is not None:
            text = self.tokenizer.decode([t for t in generated if t not in self.eos_token_ids],
                                         skip_special_tokens=True)
            result.append(Generation(text, generated, len(ids), finish,
                                     time.perf_counter() - start))

    def generate(self, prompt, max_tokens: int = 100) -> Generation:
        """Run to the end; returns a ``Generation`` (text, token ids, finish reason, timing)."""
        result = []
        for _ in self.stream(prompt, max_tokens, result):
            pass
        return result[0]
