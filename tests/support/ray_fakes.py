"""Stand-in models for the Ray tests: cheap, deterministic, and able to misbehave.

Each is a picklable zero-argument factory (what ``embed_dataset`` accepts besides a
model directory); the conftest registers this module to travel by value, so the
Ray workers need not import the test tree.
"""

from __future__ import annotations

import hashlib
import os
import signal

import numpy as np


def hash_vector(text: str, dim: int) -> np.ndarray:
    """A fixed pseudo-random vector per text: the oracle the outputs are checked against."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


class HashEmbedder:
    def __init__(self, dim, kill_marker, fail_text, poison_text=None, delay=0.0):
        self.dim = dim
        self.delay = delay
        self.kill_marker = kill_marker
        self.fail_text = fail_text
        self.poison_text = poison_text
        self.calls = 0

    def encode(self, texts, batch_size=32, normalize=None, show_progress_bar=False):
        self.calls += 1
        if self.kill_marker and self.calls == 2 and _claim(self.kill_marker):
            # The worker process dies mid-run, once per test: SIGKILL, no cleanup.
            os.kill(os.getpid(), signal.SIGKILL)
        if self.delay:
            import time

            time.sleep(self.delay * len(texts))  # a slow model: kills land mid-block
        if self.poison_text is not None and self.poison_text in texts:
            # As an out-of-memory kill: the worker dies every time it meets this text.
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fail_text is not None and self.fail_text in texts:
            raise ValueError(f"refusing to embed {self.fail_text!r}")
        return np.stack([hash_vector(t, self.dim) for t in texts])


def _claim(path) -> bool:
    """True for the first process to create ``path`` (atomic on one file system)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


class HashModel:
    """Factory of ``HashEmbedder``: ``kill_marker`` makes the first worker to reach its
    second block kill itself; ``fail_text`` makes any block holding that text fail;
    ``poison_text`` kills every worker handed a batch holding that text; ``delay``:
    seconds of sleep per text."""

    def __init__(self, dim=8, kill_marker=None, fail_text=None, poison_text=None, delay=0.0):
        self.dim, self.kill_marker, self.fail_text = dim, kill_marker, fail_text
        self.poison_text, self.delay = poison_text, delay

    def __call__(self):
        return HashEmbedder(self.dim, self.kill_marker, self.fail_text, self.poison_text,
                            self.delay)
