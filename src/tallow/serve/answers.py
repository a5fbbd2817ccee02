"""One generation's events turned into OpenAI's objects: a whole chat completion or
text completion, or the server-sent chunks of one, with ``usage`` and logprobs."""

from __future__ import annotations

import secrets
import time

from ..models.llama import ContextLengthError
from .errors import RequestError, context_length_exceeded
from .sequence import Sequence
from .sse import event


class Answer:
    """One generation's events turned into OpenAI's chat or completion objects."""

    def __init__(self, model, seq: Sequence, chat: bool, include_usage: bool):
        self.model, self.seq, self.chat, self.include_usage = model, seq, chat, include_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.text = []
        self.logprobs = []
        self.finish_reason = None

    def _raise(self, error):
        if isinstance(error, ContextLengthError):
            raise context_length_exceeded(self.model.engine.limit, len(self.seq.prompt_ids), None)
        raise RequestError("The server had an error while generating", 500, type="server_error",
                           code="internal_error")

    async def collect(self, events) -> None:
        while True:
            ev = await events.get()
            if ev.error is not None:
                self._raise(ev.error)
            self.text.append(ev.text)
            self.logprobs.extend(ev.logprobs)
            if ev.finish_reason is not None:
                self.finish_reason = ev.finish_reason
                return

    def usage(self) -> dict:
        p, c = len(self.seq.prompt_ids), len(self.seq.generated)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _token(self, token_id: int) -> str:
        return self.model.tokenizer.decode([token_id], skip_special_tokens=False)

    def _logprobs(self, items, offset: int = 0):
        if not self.seq.params.logprobs:
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

    def whole(self) -> dict:
        text = "".join(self.text)
        lp = self._logprobs(self.logprobs)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                      "logprobs": lp, "finish_reason": self.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": self.finish_reason}
        return {**self._base(False), "choices": [choice], "usage": self.usage()}

    def _chunk(self, text=None, lp=None, finish=None, role=False) -> bytes:
        if self.chat:
            delta = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
        out = {**self._base(True), "choices": [choice]}
        if self.include_usage:
            out["usage"] = None
        return event(out)

    async def stream(self, events, engine):
        """The SSE byte chunks; leaving early (the client went away) frees the sequence."""
        sent = 0
        try:
            if self.chat:
                yield self._chunk("", role=True)
            while True:
                ev = await events.get()
                if ev.error is not None:
                    try:
                        self._raise(ev.error)
                    except RequestError as e:
                        yield event(e.body())
                    break
                if ev.text or ev.logprobs:
                    lp = self._logprobs(ev.logprobs, sent) if ev.logprobs else None
                    yield self._chunk(ev.text, lp)
                    sent += len(ev.text)
                if ev.finish_reason is not None:
                    yield self._chunk(None if self.chat else "", finish=ev.finish_reason)
                    if self.include_usage:
                        yield event({**self._base(True), "choices": [], "usage": self.usage()})
                    break
            yield event("[DONE]")
        finally:
            if not self.seq.done:
                engine.cancel(self.seq)
