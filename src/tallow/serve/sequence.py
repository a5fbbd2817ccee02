"""One generation request as the engine runs it: its sampler, its KV cache, its stop
strings, and the events it sends back to the request that waits for it."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from ..models.generate import LogitsProcessor, TokenOutputStream

_IDS = itertools.count(1)


@dataclass
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple = ()
    logprobs: bool = False
    top_logprobs: int = 0


class StopText:
    """Cuts generated text at the first stop string, as OpenAI does (the stop string
    itself is not returned). Text that may be the start of a stop string is held back
    until the next piece shows it is not, so a streamed answer never shows one."""

    def __init__(self, stops):
        self.stops = tuple(s for s in stops if s)
        self.held = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """The text safe to release after ``piece``, and whether a stop string ended it."""
        text = self.held + piece
        if not self.stops:
            self.held = ""
            return text, False
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return text[:min(hits)], True
        keep = 0  # the longest tail of text that begins some stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self.held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], False

    def flush(self) -> str:
        text, self.held = self.held, ""
        return text


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list  # [(token_id, logprob)], likeliest first


@dataclass
class Event:
    """What a sequence sends to its request: a piece of text (with its tokens'
    logprobs), or the end (``finish_reason`` set), or an error."""

    text: str = ""
    logprobs: list = field(default_factory=list)
    finish_reason: str | None = None
    error: BaseException | None = None


class Sequence:
    """A prompt's generation; ``deliver(event)`` is called on the engine's thread."""

    def __init__(self, prompt_ids, params: SamplingParams, tokenizer, eos_token_ids, deliver,
                 model_name: str = ""):
        self.id = next(_IDS)
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.params = params
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.deliver = deliver
        # OpenAI's seed is any int64; NumPy's generators take non-negative seeds only, so a
        # negative one is read as its unsigned 64-bit pattern (distinct seeds stay distinct)
        seed = params.seed % (1 << 64) if params.seed is not None \
            else int(np.random.SeedSequence().entropy % (1 << 63))
        # temperature 0 is greedy decoding, exactly as `tallow generate --temperature 0`
        top_p = params.top_p if params.top_p < 1.0 else None
        self.processor = LogitsProcessor(seed, params.temperature, None, top_p)
        self.stream = TokenOutputStream(tokenizer)
        self.stop = StopText(params.stop)
        self.generated = []
        self.cache = None
        self.position = 0  # positions already in the cache
        self.logits = None  # the next token's logits, once the prompt or a step ran
        self.cancelled = False
        self.finish_reason = None
        self.arrived = time.perf_counter()
        self.first_token_at = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.cancelled

    def cancel(self) -> None:
        """The client went away: the engine drops the sequence at its next step."""
        self.cancelled = True

    def take_logits(self, limit: int) -> None:
        """Sample the next token from ``self.logits`` and send what it completes."""
        logits, self.logits = np.asarray(self.logits, dtype=np.float32).reshape(-1), None
        token = self.processor.sample(logits)
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        lp = None
        if self.params.logprobs:
            lsm = log_softmax(logits)
            k = self.params.top_logprobs
            top = np.argsort(-lsm, kind="stable")[:k] if k else []
            lp = TokenLogprob(token, float(lsm[token]), [(int(t), float(lsm[t])) for t in top])
        if token in self.eos_token_ids:
            # the end token (not listed, as OpenAI does not list it): whatever was held back
            # for a possible stop string is text after all
            self._send(self._rest(), None)
            self._finish("stop")
            return
        self.generated.append(token)
        piece = self.stream.next_token(token) or ""
        text, stopped = self.stop.feed(piece)
        if stopped:
            self._send(text, lp)
            self._finish("stop")
            return
        if len(self.generated) >= self.params.max_tokens or self.position + 1 > limit:
            # the token is not fed back: the sequence ends with it
            self._send(text + self._rest(), lp)
            self._finish("length")
            return
        self._send(text, lp)

    def _rest(self) -> str:
        """The text still undecoded or held back, cut at a stop string if one shows.

        A character whose bytes were cut by the end (``max_tokens`` after the first of
        an emoji's byte tokens) decodes as U+FFFD; it was never generated whole, so it is
        left out rather than sent as a replacement character."""
        tail, stopped = self.stop.feed((self.stream.decode_rest() or "").rstrip("\ufffd"))
        return tail if stopped else tail + self.stop.flush()

    def _send(self, text, lp) -> None:
        if text or lp is not None:
            self.deliver(Event(text=text, logprobs=[lp] if lp is not None else []))

    def deliver_error(self, error: BaseException) -> None:
        """End the sequence with ``error`` (its request answers with it)."""
        if self.finish_reason is None:
            self.finish_reason = "error"
            self.deliver(Event(error=error))

    def _finish(self, reason: str) -> None:
        self.finish_reason = reason
        self.deliver(Event(finish_reason=reason))

    @property
    def next_token(self) -> int:
        return self.generated[-1]
