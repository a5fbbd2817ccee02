"""Several sequences decoded together: the batched step behind continuous batching.

A server that generates for several clients at once advances every active
sequence by one token per engine step.  Each sequence has its own key/value
cache at its own position, and sequences join and leave between steps.  The
decoder models ``tallow generate`` loads (``Llama`` and the families run as
one, and the GGUF ``ModelWeights``) share this interface, ``SequenceBatching``:

    seq = model.new_sequence()               # an empty cache at position 0
    logits = model.prefill(seq, prompt_ids)  # (vocab,): the prompt's last position
    logits = model.step_batch([s1, s2], [t1, t2])  # (2, vocab): one token each
    seq.release()                            # its cache is freed at once

In ``step_batch`` the embedding, the norms, the q/k/v, output and MLP
products and the output layer run once over the B rows (one row per
sequence); the rotary embedding turns each row by its own position and each
row attends over its own cache.  One sequence (B = 1) takes the
single-sequence decoding path unchanged.

Rows do not influence each other: quantized products quantize each
activation row on its own, as the one-row product does.  A row's logits
equal those of its sequence decoded alone up to the summation order of the
float products (a several-row product may block its sums differently).

Not thread-safe: one thread (a server's engine loop) makes, prefills, steps
and releases the sequences; a sequence is released between steps.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexOutOfRangeError, InvalidArgumentError, ShapeMismatchError
from ..nn import ops
from ..tensor_class import Tensor
from .config import ContextLengthError
from .decoder_input import embed_tokens


class DecoderSequence:
    """One sequence's decoding state: its key/value cache and its position.

    Made by ``model.new_sequence()``; ``position`` is the number of tokens in
    its cache (the position the next token takes), ``max_positions`` the most
    it may hold.  ``release()`` frees the cache (also on leaving a ``with``
    block); a released sequence cannot be used again.
    """

    __slots__ = ("model", "cache", "__weakref__")

    def __init__(self, model, cache):
        self.model = model
        self.cache = cache

    @property
    def position(self) -> int:
        self._check_live()
        return int(self.cache.seq_len)

    @property
    def max_positions(self) -> int:
        self._check_live()
        return int(self.cache.max_positions)

    @property
    def released(self) -> bool:
        return self.cache is None

    def release(self) -> None:
        """Free this sequence's key/value cache now (idempotent)."""
        cache, self.cache = self.cache, None
        if cache is not None:
            cache.reset()
            cache._decode_state = None

    def _check_live(self) -> None:
        if self.cache is None:
            raise InvalidArgumentError("DecoderSequence: this sequence was released; start a new "
                                       "one with model.new_sequence()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        if self.cache is None:
            return "DecoderSequence(released)"
        return f"DecoderSequence(position={self.position}, max_positions={self.max_positions})"


class SequenceBatching:
    """``new_sequence`` / ``prefill`` / ``step_batch`` for a decoder model (see the module doc).

    The model provides ``new_cache(max_context=...)``, ``forward(ids, index_pos,
    cache)``, ``config``, ``model`` (its embedding, layers and final norm) and
    ``_head(hidden)`` (f32 logits); ``_rows_logits(token_ids, caches, positions)``
    is the B-row step, on the Tensor path unless the model overrides it.
    """

    def new_sequence(self, max_context: int | None = None) -> DecoderSequence:
        """An empty sequence; ``max_context`` caps its positions below the model's context."""
        return DecoderSequence(self, self.new_cache(max_context=max_context))

    def prefill(self, seq: DecoderSequence, token_ids) -> np.ndarray:
        """Run ``token_ids`` into ``seq``'s cache after its current position; returns the
        logits (vocab,) f32 of the last of them (what predicts the next token)."""
        self._check_sequences([seq])
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ShapeMismatchError("prefill: no token ids")
        x = Tensor(np.asarray([ids], dtype=np.uint32), device=seq.cache.device)
        logits = self.forward(x, seq.position, seq.cache)
        return np.ascontiguousarray(logits.to_dtype("f32").numpy()[0])

    def step_batch(self, seqs, token_ids) -> np.ndarray:
        """Advance each sequence by its token at its own position; returns (B, vocab) f32
        logits, row i those of ``seqs[i]``."""
        seqs = list(seqs)
        ids = [int(t) for t in token_ids]
        if len(seqs) != len(ids) or not seqs:
            raise ShapeMismatchError(f"step_batch: {len(seqs)} sequences and {len(ids)} token ids; "
                                     "give one token per sequence, at least one")
        self._check_sequences(seqs)
        if len({id(s) for s in seqs}) != len(seqs):
            raise InvalidArgumentError("step_batch: a sequence appears twice in one step; each "
                                       "advances by one token per step")
        positions = [s.position for s in seqs]
        for i, (s, p) in enumerate(zip(seqs, positions)):
            if p + 1 > s.max_positions:
                raise ContextLengthError(
                    f"step_batch: sequence {i} is full ({p} of its {s.max_positions} positions "
                    "used); release it")
        vocab = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise IndexOutOfRangeError(f"step_batch: token id {bad[0]} is outside the vocabulary "
                                       f"of {vocab}")
        if len(seqs) == 1:  # the single-sequence path as it is
            return self.prefill(seqs[0], ids).reshape(1, -1)
        caches = [s.cache for s in seqs]
        out = self._rows_logits(np.asarray(ids, dtype=np.int64), caches, positions)
        for c, p in zip(caches, positions):
            c.seq_len = p + 1
        return out

    def release(self, seq: DecoderSequence) -> None:
        """Free ``seq``'s cache (as ``seq.release()``)."""
        seq.release()

    def _check_sequences(self, seqs) -> None:
        for s in seqs:
            if not isinstance(s, DecoderSequence):
                raise InvalidArgumentError(f"expected sequences from model.new_sequence(), got "
                                           f"{type(s).__name__}")
            s._check_live()
            if s.model is not self:
                raise InvalidArgumentError("a sequence of another model; make it with this "
                                           "model's new_sequence()")

    def _rows_logits(self, ids, caches, positions) -> np.ndarray:
        return tensor_rows_logits(self, ids, caches, positions)


# ------------------------------------------------------------ the Tensor path's rows
class SequenceRows:
    """One step's rows, passed to the decoder layers in place of a single ``Cache``:
    row i is a token of the sequence whose cache is ``caches[i]``, at ``positions[i]``.
    The attention layers hand their projected queries, keys and values to ``attend``."""

    def __init__(self, caches, positions):
        self.caches = caches
        self.positions = positions
        self.config = caches[0].config
        self._tables = {}
        self._masks = {}

    def _rotary(self, layer: int):
        """cos, sin (B, 1, head_dim / 2): each row's position in ``layer``'s table."""
        key = self.config.window(layer) is not None and self.caches[0]._rope_local is not None
        if key not in self._tables:
            parts = [c.rotary(layer, p, 1) for c, p in zip(self.caches, self.positions)]
            b = len(parts)
            cos = Tensor.cat([c for c, _ in parts], 0)
            sin = Tensor.cat([s for _, s in parts], 0)
            self._tables[key] = (cos.reshape((b, 1, cos.shape[-1])), sin.reshape((b, 1, sin.shape[-1])))
        return self._tables[key]

    def _mask(self, row: int, window):
        key = (row, window)
        if key not in self._masks:
            self._masks[key] = self.caches[row].mask(1, self.positions[row], window)
        return self._masks[key]

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, scale: float, rotate) -> Tensor:
        """Attention of q (B, heads, 1, d) over each row's cache after storing its k, v
        (B, kv_heads, 1, d); ``rotate`` is the family's rope. Returns (B, heads, 1, d)."""
        cos, sin = self._rotary(layer)
        q = rotate(q.contiguous(), cos, sin)
        k = rotate(k.contiguous(), cos, sin)
        window = self.config.window(layer)
        out = []
        for i, (cache, pos) in enumerate(zip(self.caches, self.positions)):
            keys, values = cache.update(layer, k.narrow(0, i, 1), v.narrow(0, i, 1), pos)
            out.append(ops.scaled_dot_product_attention(q.narrow(0, i, 1), keys, values,
                                                        self._mask(i, window), scale=scale))
        return Tensor.cat(out, 0)


def tensor_rows_logits(model, ids: np.ndarray, caches, positions) -> np.ndarray:
    """The Tensor path's batched step: logits (B, vocab) of one token per sequence."""
    inner = model.model
    b = len(ids)
    for c, p in zip(caches, positions):
        c.reserve(p + 1)
    x = embed_tokens(inner, Tensor(ids.astype(np.uint32).reshape(b, 1), device=caches[0].device))
    rows = SequenceRows(caches, positions)
    for i, layer in enumerate(inner.layers):
        x = layer(x, None, i, rows, None)
    h = inner.norm(x).squeeze(1)
    return np.ascontiguousarray(model._head(h).to_dtype("f32").numpy())
