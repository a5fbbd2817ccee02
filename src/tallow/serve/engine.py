"""Continuous batching: one worker thread runs every generation of one model.

Each turn of its loop admits waiting requests (up to ``max_batch`` sequences at
once; each runs its prompt into a KV cache of its own), then samples every active
sequence's next token from its logits, and advances the survivors by one token.
Requests join and leave between turns, so a short answer never waits for a long one.

The step goes through :class:`DecoderRunner`: a model with ``step_batch`` (the
decoders' ``SequenceBatching``) advances every sequence in one call, one batched
product per layer; any other decoder advances them one after another through its
single-sequence ``forward``. A row of a batched step equals its sequence decoded
alone up to the summation order of float products (quantized products quantize each
row on its own), so an answer does not depend on which requests share its steps.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from ..tensor_class import Tensor
from .errors import queue_full, shutting_down
from .sequence import Sequence


class DecoderRunner:
    """What the engine asks of a decoder: a prompt run into a fresh cache, one step of
    several sequences, and the cache freed when a sequence ends.

    A model with ``new_sequence`` / ``prefill`` / ``step_batch`` (``SequenceBatching``)
    steps all sequences in one call; any other decoder steps them one after another
    with its single-sequence ``forward``. ``batched=False`` forces the latter."""

    def __init__(self, model, max_context: int | None, batched: bool | None = None):
        self.model = model
        self.max_context = max_context
        can = all(callable(getattr(model, n, None)) for n in ("new_sequence", "prefill", "step_batch"))
        self.batched = can if batched is None else (batched and can)

    def context_limit(self) -> int:
        return self._new_cache().max_positions

    def _new_cache(self):
        if self.max_context is None:
            return self.model.new_cache()
        return self.model.new_cache(max_context=self.max_context)

    def prefill(self, seq: Sequence) -> None:
        if self.batched:
            seq.cache = self.model.new_sequence(max_context=self.max_context)
            seq.logits = self.model.prefill(seq.cache, seq.prompt_ids)
        else:
            seq.cache = self._new_cache()
            seq.logits = self._forward(seq.prompt_ids, 0, seq.cache)
        seq.position = len(seq.prompt_ids)

    def step(self, seqs: list) -> None:
        tokens = [s.next_token for s in seqs]
        if self.batched:
            logits = self.model.step_batch([s.cache for s in seqs], tokens)
            for s, row in zip(seqs, np.asarray(logits)):
                s.logits = row
                s.position += 1
            return
        for s, t in zip(seqs, tokens):
            s.logits = self._forward([t], s.position, s.cache)
            s.position += 1

    def release(self, seq: Sequence) -> None:
        """Free the sequence's key/value cache now, not when it is collected."""
        cache, seq.cache = seq.cache, None
        if cache is not None and hasattr(cache, "release"):
            cache.release()

    def _forward(self, ids, position, cache) -> np.ndarray:
        x = Tensor(np.asarray([ids], dtype=np.uint32), device=cache.device)
        return self.model.forward(x, position, cache).to_dtype("f32").numpy()[0]


class GenerationEngine:
    """Runs the sequences of one model on its own thread. ``submit`` never blocks: a
    request beyond ``max_batch`` active and ``max_queue`` waiting is refused (429)."""

    def __init__(self, name: str, runner: DecoderRunner, metrics=None, max_batch: int = 8,
                 max_queue: int = 32):
        self.name = name
        self.runner = runner
        self.metrics = metrics
        self.max_batch = max(1, int(max_batch))
        self.max_queue = max(0, int(max_queue))
        self.limit = runner.context_limit()
        self._waiting = collections.deque()
        self._active = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"tallow-serve-{name}", daemon=True)
        self._thread.start()

    # -- the request side (event loop) -------------------------------------------------
    def submit(self, *seqs: Sequence) -> None:
        """Queue ``seqs``, all or none (a request's prompts are answered together)."""
        with self._cond:
            if self._stopping:
                raise shutting_down()
            room = self.max_queue + max(0, self.max_batch - len(self._active)) - len(self._waiting)
            if len(seqs) > room:
                raise queue_full(f"generation ({self.name})")
            self._waiting.extend(seqs)
            self._gauges()
            self._cond.notify()

    def cancel(self, seq: Sequence) -> None:
        """Drop ``seq`` at once if it still waits, else at the engine's next turn."""
        seq.cancel()
        with self._cond:
            try:
                self._waiting.remove(seq)
            except ValueError:
                pass
            self._gauges()
            self._cond.notify()

    def counts(self) -> tuple[int, int]:
        with self._cond:
            return len(self._active), len(self._waiting)

    def stop(self) -> None:
        """End every sequence with a 503 at the next step (the server is shutting down);
        returns at once."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        self.stop()
        self._thread.join(timeout)

    # -- the worker thread -------------------------------------------------------------
    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_length.set(len(self._waiting), model=self.name)
            self.metrics.active_sequences.set(len(self._active), model=self.name)

    def _admit(self) -> list:
        with self._cond:
            while not self._stopping and not self._active and not self._waiting:
                self._cond.wait()
            self._active = self._prune(self._active)
            new = []
            while self._waiting and len(self._active) < self.max_batch:
                seq = self._waiting.popleft()
                if not seq.cancelled:
                    self._active.append(seq)
                    new.append(seq)
            self._gauges()
            return new

    def _loop(self) -> None:
        while True:
            new = self._admit()
            if self._stopping:
                with self._cond:
                    ending = self._active + list(self._waiting)
                    self._waiting.clear()
                for s in ending:
                    s.deliver_error(shutting_down())
                    self.runner.release(s)
                with self._cond:
                    self._active = []
                    self._gauges()
                return
            for seq in new:
                self._guarded(seq, self.runner.prefill, seq)
                if self.metrics is not None and not seq.done:
                    self.metrics.prompt_tokens.inc(len(seq.prompt_ids), model=self.name)
            for seq in self._active:
                if not seq.done and seq.logits is not None:
                    before = len(seq.generated)
                    self._guarded(seq, seq.take_logits, self.limit)
                    if self.metrics is not None:
                        self.metrics.completion_tokens.inc(len(seq.generated) - before, model=self.name)
                        if seq.first_token_at is not None and before == 0 and seq.generated[:1]:
                            self.metrics.time_to_first_token.observe(seq.first_token_at - seq.arrived,
                                                                     model=self.name)
            running = [s for s in self._active if not s.done]
            if running:
                if self.metrics is not None:
                    self.metrics.batch_size.observe(len(running), model=self.name)
                try:
                    self.runner.step(running)
                except Exception as e:  # one bad step fails the sequences in it, not the server
                    for s in running:
                        s.deliver_error(e)
            with self._cond:
                self._active = self._prune(self._active)
                self._gauges()

    def _prune(self, seqs) -> list:
        """The sequences still running; the finished and cancelled ones free their caches."""
        keep = []
        for s in seqs:
            if s.done:
                self.runner.release(s)
            else:
                keep.append(s)
        return keep

    @staticmethod
    def _guarded(seq, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:
            seq.deliver_error(e)

