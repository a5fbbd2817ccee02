"""Rotary tables that grow with the positions a generation uses.

A model file states its context length, and a table for all of it up front would
cost ``context x head_dim x 4`` bytes before the first token: a GGUF claiming 2^32
positions would ask for terabytes. ``RopeTable`` computes rows only as far as they
are used, doubling from 256 and stopping at its limit; each row is the f32 product
of its position and the inverse frequencies, so a grown table holds exactly the
values a full one would.
"""

from __future__ import annotations

import numpy as np

FIRST_ROWS = 256


class RopeTable:
    """``cos``/``sin`` (rows, head_dim / 2) f32 arrays of at least the positions asked for."""

    def __init__(self, inv_freq: np.ndarray, limit: int):
        self.inv = np.asarray(inv_freq, dtype=np.float32)
        self.limit = int(limit)
        self.cos = np.zeros((0, self.inv.size), np.float32)
        self.sin = self.cos

    @property
    def rows(self) -> int:
        return self.cos.shape[0]

    def reserve(self, positions: int) -> bool:
        """Rows for positions ``0..positions - 1`` (at most the limit); True if the
        tables grew."""
        positions = min(int(positions), self.limit)
        if positions <= self.rows:
            return False
        cap = max(FIRST_ROWS, self.rows)
        while cap < positions:
            cap *= 2
        cap = min(cap, self.limit)
        freqs = np.outer(np.arange(cap, dtype=np.float32), self.inv).astype(np.float32)
        self.cos = np.ascontiguousarray(np.cos(freqs), dtype=np.float32)
        self.sin = np.ascontiguousarray(np.sin(freqs), dtype=np.float32)
        return True
