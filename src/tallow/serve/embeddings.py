"""Embedding requests that arrive together, embedded in one forward pass.

One worker thread takes the first waiting request, then every other one already
waiting, up to ``max_batch`` texts in all, and embeds them with one
``SentenceEmbedder.encode`` call; each request gets its own rows back. The queue is
bounded: a request beyond ``max_queue`` waiting ones is refused (429).

A request of more than ``max_batch`` texts (up to 2,048) is embedded in passes of
``max_batch`` texts: one pass over all of them would hold every text's attention
scores at once (gigabytes for long texts), and between passes a request whose
client has left is dropped instead of being finished for nobody.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading

import numpy as np

from .errors import queue_full, shutting_down


class _JobFuture(concurrent.futures.Future):
    """A job's result. ``cancel()`` on a job already being embedded cannot stop the pass
    under way, but marks it abandoned: the batcher drops it before its next pass."""

    abandoned = False

    def cancel(self) -> bool:
        self.abandoned = True
        return super().cancel()


class _Job:
    def __init__(self, texts):
        self.texts = texts
        self.future = _JobFuture()


class EmbeddingBatcher:
    def __init__(self, name: str, embedder, metrics=None, max_batch: int = 32, max_queue: int = 64):
        self.name = name
        self.embedder = embedder
        self.metrics = metrics
        self.max_batch = max(1, int(max_batch))
        self.max_queue = max(1, int(max_queue))
        self._waiting = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"tallow-serve-{name}", daemon=True)
        self._thread.start()

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def count_tokens(self, texts) -> list:
        """Tokens of each text as the model reads it (after truncation to its length)."""
        return [len(e.ids) for e in self.embedder.tokenize(texts)]

    def submit(self, texts) -> concurrent.futures.Future:
        """A future of the ``(len(texts), dim)`` float32 embeddings."""
        job = _Job(list(texts))
        with self._cond:
            if self._stopping:
                raise shutting_down()
            if len(self._waiting) >= self.max_queue:
                raise queue_full(f"embedding ({self.name})")
            self._waiting.append(job)
            self._gauge()
            self._cond.notify()
        return job.future

    def stop(self) -> None:
        """Answer the waiting requests with a 503 now, and stop after the pass under way;
        returns at once."""
        with self._cond:
            self._stopping = True
            waiting = [job for job in self._waiting if job.future.set_running_or_notify_cancel()]
            self._waiting.clear()
            self._gauge()
            self._cond.notify()
        for job in waiting:
            job.future.set_exception(shutting_down())

    def close(self, timeout: float = 5.0) -> None:
        self.stop()
        self._thread.join(timeout)

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_length.set(len(self._waiting), model=self.name)

    def _take(self) -> list:
        with self._cond:
            while not self._stopping and not self._waiting:
                self._cond.wait()
            if self._stopping:  # stop() has answered the waiting requests
                return []
            jobs, n = [], 0
            while self._waiting and (not jobs or n + len(self._waiting[0].texts) <= self.max_batch):
                job = self._waiting.popleft()
                if job.future.set_running_or_notify_cancel():  # False: its client left
                    jobs.append(job)
                    n += len(job.texts)
            self._gauge()
            return jobs

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if self._stopping:
                return
            if not jobs:
                continue
            texts = [t for job in jobs for t in job.texts]
            try:
                vecs = self._embed(texts, jobs)
            except Exception as e:
                for job in jobs:
                    job.future.set_exception(e)
                continue
            start = 0
            for job in jobs:
                if job.future.abandoned:  # nobody reads it; the rows may be unfinished
                    job.future.set_exception(concurrent.futures.CancelledError())
                else:
                    job.future.set_result(np.asarray(vecs[start:start + len(job.texts)], dtype=np.float32))
                start += len(job.texts)

    def _embed(self, texts, jobs):
        """``texts`` in passes of at most ``max_batch``; stops early (the rows left are
        zeros) once every job's client has left."""
        parts = []
        for start in range(0, len(texts), self.max_batch):
            if self._stopping and start:
                raise shutting_down()
            if all(job.future.abandoned for job in jobs):
                parts.append(np.zeros((len(texts) - start, self.dim), dtype=np.float32))
                break
            piece = texts[start:start + self.max_batch]
            if self.metrics is not None:
                self.metrics.batch_size.observe(len(piece), model=self.name)
            # normalize=None: what the directory says, as `tallow embed` and
            # sentence-transformers do
            parts.append(self.embedder.encode(piece, batch_size=self.max_batch, normalize=None,
                                              show_progress_bar=False, workers=1))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
