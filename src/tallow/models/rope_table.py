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


class LongRopeTable:
    """Phi-3's LongRoPE: positions below ``original`` rotate with the short factors,
    later ones with the long factors (the frequencies Hugging Face switches to once
    a sequence passes ``original``), both tables scaled by ``attention_factor``."""

    def __init__(self, short_inv: np.ndarray, long_inv: np.ndarray, original: int,
                 attention_factor: float, limit: int):
        self.short = RopeTable(short_inv, limit)
        self.long = RopeTable(long_inv, limit)
        self.original = int(original)
        self.factor = np.float32(attention_factor)
        self.cos = self.sin = self.short.cos

    def reserve(self, positions: int) -> bool:
        grew = self.short.reserve(positions)
        self.long.reserve(positions)
        if grew:
            n = self.original
            self.cos = np.concatenate([self.short.cos[:n], self.long.cos[n:]]) * self.factor
            self.sin = np.concatenate([self.short.sin[:n], self.long.sin[n:]]) * self.factor
        return grew
