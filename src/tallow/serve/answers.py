"""One generation's events turned into OpenAI's objects: a whole chat completion or
text completion, or the server-sent chunks of one, with ``usage`` and logprobs."""

from __future__ import annotations

import secrets
import time

from ..models.llama import ContextLengthError
from .errors import RequestError, context_length_exceeded
from .sse import event


class Answer:
    """The events of one request's sequences (one per choice: a chat has ``n``, a
    completion ``n`` per prompt) turned into OpenAI's chat or completion objects.
    ``events`` yields ``(choice index, Event)``."""

    def __init__(self, model, seqs: list, chat: bool, include_usage: bool, n: int = 1):
        self.model, self.seqs, self.chat, self.include_usage = model, list(seqs), chat, include_usage
        self.n = n  # choices per prompt: seqs[i] answers prompt i // n
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.text = [[] for _ in self.seqs]
        self.logprobs = [[] for _ in self.seqs]
        self.finish_reason = [None] * len(self.seqs)

    def _raise(self, error, i: int):
        if isinstance(error, RequestError):  # the engine's own refusal (shutting down)
            raise error
        if isinstance(error, ContextLengthError):
            raise context_length_exceeded(self.model.engine.limit, len(self.seqs[i].prompt_ids), None)
        raise RequestError("The server had an error while generating", 500, type="server_error",
                           code="internal_error")

    async def collect(self, events) -> None:
        left = len(self.seqs)
        while left:
            i, ev = await events.get()
            if ev.error is not None:
                self._raise(ev.error, i)
            self.text[i].append(ev.text)
            self.logprobs[i].extend(ev.logprobs)
            if ev.finish_reason is not None:
                self.finish_reason[i] = ev.finish_reason
                left -= 1

    def usage(self) -> dict:
        p = sum(len(s.prompt_ids) for s in self.seqs[::self.n])  # each prompt once, as OpenAI counts
        c = sum(len(s.generated) for s in self.seqs)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _token(self, token_id: int) -> str:
        return self.model.tokenizer.decode([token_id], skip_special_tokens=False)

    def _logprobs(self, items, offset: int = 0):
        if not self.seqs[0].params.logprobs:
            return None
        if self.chat:
            def entry(t, lp):
                s = self._token(t)
                return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}
            return {"content": [{**entry(x.token_id, x.logprob),
                                 "top_logprobs": [entry(t, lp) for t, lp in x.top]} for x in items],
                    "refusal": None}
        tokens = [self._token(x.token_id) for x in items]
        offsets, at = [], offset
        for s in tokens:
            offsets.append(at)
            at += len(s)
        return {"tokens": tokens, "token_logprobs": [x.logprob for x in items],
                "top_logprobs": [{self._token(t): lp for t, lp in x.top} for x in items],
                "text_offset": offsets}

    def _base(self, chunk: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model.id,
                "system_fingerprint": None}

    def _choice(self, i: int) -> dict:
        text = "".join(self.text[i])
        lp = self._logprobs(self.logprobs[i])
        if self.chat:
            return {"index": i, "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": lp, "finish_reason": self.finish_reason[i]}
        return {"index": i, "text": text, "logprobs": lp, "finish_reason": self.finish_reason[i]}

    def whole(self) -> dict:
        return {**self._base(False), "choices": [self._choice(i) for i in range(len(self.seqs))],
                "usage": self.usage()}

    def _chunk(self, i: int, text=None, lp=None, finish=None, role=False) -> bytes:
        if self.chat:
            delta = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}
        else:
            choice = {"index": i, "text": text or "", "logprobs": lp, "finish_reason": finish}
        out = {**self._base(True), "choices": [choice]}
        if self.include_usage:
            out["usage"] = None
        return event(out)

    async def stream(self, events, engine):
        """The SSE byte chunks; leaving early (the client went away) frees the sequences."""
        sent = [0] * len(self.seqs)
        left = len(self.seqs)
        try:
            if self.chat:
                for i in range(len(self.seqs)):
                    yield self._chunk(i, "", role=True)
            while left:
                i, ev = await events.get()
                if ev.error is not None:
                    try:
                        self._raise(ev.error, i)
                    except RequestError as e:
                        yield event(e.body())
                    break
                if ev.text or ev.logprobs:
                    lp = self._logprobs(ev.logprobs, sent[i]) if ev.logprobs else None
                    yield self._chunk(i, ev.text, lp)
                    sent[i] += len(ev.text)
                if ev.finish_reason is not None:
                    yield self._chunk(i, None if self.chat else "", finish=ev.finish_reason)
                    left -= 1
            if not left and self.include_usage:
                yield event({**self._base(True), "choices": [], "usage": self.usage()})
            yield event("[DONE]")
        finally:
            for seq in self.seqs:
                if not seq.done:
                    engine.cancel(seq)
