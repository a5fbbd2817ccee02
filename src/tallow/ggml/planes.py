"""The integer view of a block format that quantized matmul works on.

ggml's dot products (``ggml_vec_dot_*``, candle's ``vec_dot``) never
dequantize: they multiply the small integers of a weight block with the int8
values of an activation block, sum those products exactly in integers, and
only then multiply by the blocks' float scales.  Every format we support fits
one shape of that computation, with groups of 32 consecutive elements:

    dot(w, x) = sum_g  gscale_w[g] * gscale_x[g] * sum_{t in g} q_w[t] * q_x[t]
              + sum_b  mscale_w[b] * mscale_x[b] * sum_{u}  mins_w[b, u] * xsum[b, u]
              + sum_b  offset_w[b] * s_x[b]

* ``q`` holds the weight's small integers, chosen so that one group's integer
  sum with int8 activations stays below 2**24 and is therefore exact in f32
  (the K-quants with one scale per 16 values fold that 6/8-bit scale into
  ``q`` to make 32-wide groups: |sum| <= 32 * 4096 * 128 = 2**24 for Q6K).
* ``gscale`` is the float multiplier of each group (``d``, or ``d * scale``).
* ``mins``/``mscale`` (Q2K, Q4K, Q5K) are the integer sub-block minimums and
  ``-dmin``; they multiply the activation's integer partial sums (the Q8K
  ``bsums``), again summed exactly before scaling.
* ``offset`` (Q4_1, Q5_1) is the block minimum ``m`` in f32; it multiplies the
  Q8_1 activation's stored ``s`` (the block's ``d * sum(q)``, kept as f16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP = 32


@dataclass
class Planes:
    """Integer decomposition of ``n`` blocks of one format (see module doc).

    Shapes, for ``n`` blocks of ``bs`` elements:
    ``q`` (n, bs) int8/int16; ``gscale`` (n, bs // 32) float32;
    ``mins`` (n, u) small ints or None, ``mscale`` (n,) float32 or None;
    ``offset`` (n, bs // 32) float32 or None.
    """

    q: np.ndarray
    gscale: np.ndarray
    mins: np.ndarray | None = None
    mscale: np.ndarray | None = None
    offset: np.ndarray | None = None


@dataclass
class ActPlanes:
    """An activation quantized to a dot type, in the same integer view.

    ``q`` (n, bs) int8; ``gscale`` (n, bs // 32) float32; ``sums16`` (n, bs // 16)
    exact integer sums of 16 consecutive ``q`` (Q8K ``bsums``) or None;
    ``s`` (n, bs // 32) float32 block sums as stored by Q8_1, or None.
    """

    q: np.ndarray
    gscale: np.ndarray
    sums16: np.ndarray | None = None
    s: np.ndarray | None = None
