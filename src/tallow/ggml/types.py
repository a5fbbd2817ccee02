"""The registry of GGML types: names, ids, block geometry and codecs.

``GgmlType`` describes one format the way ggml does (``ggml_type`` in
ggml.h and ``ggml_type_traits``): its id in GGUF files, how many elements a
block holds and how many bytes it takes, and which format quantized matmul
converts activations to (``vec_dot_type``).  Names follow candle's
``GgmlDType`` ("Q4_0", "Q4K", ...); lookups also accept ggml's spellings
("q4_K") and any case, and the numeric id.

``quantize`` / ``dequantize`` here take and return whole tensors; they cut
the work into chunks of blocks so that the temporaries of the K-quant
searches stay a few MiB whatever the tensor size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import floats, iq4, kquants, legacy
from .blocks import as_bytes, byte_blocks, float_blocks
from .planes import ActPlanes, Planes

# Elements per chunk: large enough that per-call overhead vanishes, small
# enough that a K-quant search's (chunk, 16/32) temporaries fit in cache-ish memory.
_CHUNK_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class GgmlType:
    name: str
    type_id: int
    block_size: int
    type_size: int
    dot_type_name: str
    ggml_name: str
    _quantize: Callable[[np.ndarray], np.ndarray]
    _dequantize: Callable[[np.ndarray], np.ndarray]
    _planes: Callable[[np.ndarray], Planes] | None = None
    _act_planes: Callable[[np.ndarray], ActPlanes] | None = None
    _act_quantize: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def dot_type(self) -> "GgmlType":
        """The format activations are quantized to by ``matmul_t``."""
        return ggml_type(self.dot_type_name)

    @property
    def is_float(self) -> bool:
        return self.block_size == 1

    def nbytes(self, n_elements: int) -> int:
        """Bytes taken by ``n_elements`` values (a multiple of the block size)."""
        if n_elements % self.block_size:
            raise ValueError(f"{self.name}: {n_elements} elements is not a multiple of the block size {self.block_size}")
        return n_elements // self.block_size * self.type_size

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """float array (..., k) -> uint8 array (..., k / block_size * type_size) of GGML blocks."""
        return self._blocks_of(x, self._quantize)

    def quantize_activations(self, x: np.ndarray) -> np.ndarray:
        """Activation rows in this dot type before a quantized product: as ``quantize``,
        except that Q8_0/Q8_1 round ties half to even (ggml's x86 ``from_float``; Q8K
        does so in its codec too), the rule of every tallow path."""
        return self._blocks_of(x, self._act_quantize or self._quantize)

    def _blocks_of(self, x: np.ndarray, codec) -> np.ndarray:
        x = np.asarray(x)
        blocks = float_blocks(x, self.block_size, self.name)
        out = np.empty((blocks.shape[0], self.type_size), dtype=np.uint8)
        step = max(1, _CHUNK_ELEMENTS // self.block_size)
        # Non-finite inputs give unspecified (but well-formed) blocks, as in
        # ggml; the float warnings they raise inside the codecs are noise.
        with np.errstate(all="ignore"):
            for i in range(0, blocks.shape[0], step):
                out[i : i + step] = codec(blocks[i : i + step])
        return out.reshape(*x.shape[:-1], x.shape[-1] // self.block_size * self.type_size)

    def dequantize(self, raw, n_elements: int | None = None) -> np.ndarray:
        """GGML blocks (any array/buffer of bytes) -> float32 array of ``n_elements`` (1-D).

        ``n_elements`` defaults to what the bytes hold; when given it must match.
        """
        data = as_bytes(raw)
        if n_elements is None:
            if data.size % self.type_size:
                raise ValueError(f"{self.name}: {data.size} bytes is not a whole number of {self.type_size}-byte blocks")
            n_elements = data.size // self.type_size * self.block_size
        blocks = byte_blocks(data, n_elements, self.block_size, self.type_size, self.name)
        out = np.empty((blocks.shape[0], self.block_size), dtype=np.float32)
        step = max(1, _CHUNK_ELEMENTS // self.block_size)
        # Arbitrary bytes may hold inf/NaN scales; they dequantize to inf/NaN quietly.
        with np.errstate(invalid="ignore", over="ignore"):
            for i in range(0, blocks.shape[0], step):
                out[i : i + step] = self._dequantize(blocks[i : i + step])
        return out.reshape(-1)

    def planes(self, blocks: np.ndarray) -> Planes:
        """Integer view of ``(n, type_size)`` weight blocks for quantized matmul."""
        if self._planes is None:
            raise ValueError(f"{self.name} has no integer block form")
        return self._planes(blocks)

    def act_planes(self, blocks: np.ndarray) -> ActPlanes:
        """Integer view of activation blocks; only the dot types (Q8_0, Q8_1, Q8K) have one."""
        if self._act_planes is None:
            raise ValueError(f"{self.name} is not an activation (vec-dot) type")
        return self._act_planes(blocks)

    def __str__(self) -> str:
        return self.name


def _t(name, type_id, bs, ts, dot, ggml_name, q, dq, planes=None, act=None, act_q=None):
    return GgmlType(name, type_id, bs, ts, dot, ggml_name, q, dq, planes, act, act_q)


_ALL = [
    _t("F32", 0, 1, 4, "F32", "f32", floats.f32_quantize, floats.f32_dequantize),
    _t("F16", 1, 1, 2, "F16", "f16", floats.f16_quantize, floats.f16_dequantize),
    _t("Q4_0", 2, 32, 18, "Q8_0", "q4_0", legacy.q4_0_quantize, legacy.q4_0_dequantize, legacy.q4_0_planes),
    _t("Q4_1", 3, 32, 20, "Q8_1", "q4_1", legacy.q4_1_quantize, legacy.q4_1_dequantize, legacy.q4_1_planes),
    _t("Q5_0", 6, 32, 22, "Q8_0", "q5_0", legacy.q5_0_quantize, legacy.q5_0_dequantize, legacy.q5_0_planes),
    _t("Q5_1", 7, 32, 24, "Q8_1", "q5_1", legacy.q5_1_quantize, legacy.q5_1_dequantize, legacy.q5_1_planes),
    _t("Q8_0", 8, 32, 34, "Q8_0", "q8_0", legacy.q8_0_quantize, legacy.q8_0_dequantize, legacy.q8_0_planes,
       legacy.q8_0_act_planes, legacy.q8_0_quantize_activations),
    _t("Q8_1", 9, 32, 36, "Q8_1", "q8_1", legacy.q8_1_quantize, legacy.q8_1_dequantize, legacy.q8_1_planes,
       legacy.q8_1_act_planes, legacy.q8_1_quantize_activations),
    _t("Q2K", 10, 256, 84, "Q8K", "q2_K", kquants.q2k_quantize, kquants.q2k_dequantize, kquants.q2k_planes),
    _t("Q3K", 11, 256, 110, "Q8K", "q3_K", kquants.q3k_quantize, kquants.q3k_dequantize, kquants.q3k_planes),
    _t("Q4K", 12, 256, 144, "Q8K", "q4_K", kquants.q4k_quantize, kquants.q4k_dequantize, kquants.q4k_planes),
    _t("Q5K", 13, 256, 176, "Q8K", "q5_K", kquants.q5k_quantize, kquants.q5k_dequantize, kquants.q5k_planes),
    _t("Q6K", 14, 256, 210, "Q8K", "q6_K", kquants.q6k_quantize, kquants.q6k_dequantize, kquants.q6k_planes),
    _t("Q8K", 15, 256, 292, "Q8K", "q8_K", kquants.q8k_quantize, kquants.q8k_dequantize, kquants.q8k_planes,
       kquants.q8k_act_planes),
    _t("BF16", 30, 1, 2, "BF16", "bf16", floats.bf16_quantize, floats.bf16_dequantize),
    _t("IQ4_NL", 20, 32, 18, "Q8_0", "iq4_nl", iq4.iq4_nl_quantize, iq4.iq4_nl_dequantize,
       iq4.iq4_nl_planes),
    _t("IQ4_XS", 23, 256, 136, "Q8K", "iq4_xs", iq4.iq4_xs_quantize, iq4.iq4_xs_dequantize,
       iq4.iq4_xs_planes),
]

GGML_TYPES: dict[str, GgmlType] = {t.name: t for t in _ALL}
_BY_ID: dict[int, GgmlType] = {t.type_id: t for t in _ALL}
_BY_KEY: dict[str, GgmlType] = {}
for _ty in _ALL:
    for _key in (_ty.name, _ty.ggml_name, _ty.name.replace("_", ""), _ty.ggml_name.replace("_", "")):
        _BY_KEY[_key.lower()] = _ty


def ggml_type(spec) -> GgmlType:
    """Look a type up by ``GgmlType``, name ("q4_0", "Q4K", "q4_K", any case) or GGML id."""
    if isinstance(spec, GgmlType):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        try:
            return _BY_ID[int(spec)]
        except KeyError:
            raise ValueError(f"unsupported GGML type id {int(spec)}") from None
    if isinstance(spec, str):
        try:
            return _BY_KEY[spec.lower()]
        except KeyError:
            raise ValueError(f"unknown GGML type {spec!r}; known: {', '.join(GGML_TYPES)}") from None
    raise TypeError(f"a GGML type is a name, an id or a GgmlType, not {type(spec).__name__}")


def is_known_type_id(type_id: int) -> bool:
    return type_id in _BY_ID


def quantize(x: np.ndarray, spec) -> np.ndarray:
    """``ggml_type(spec).quantize(x)``."""
    return ggml_type(spec).quantize(x)


def dequantize(raw, spec, n_elements: int | None = None) -> np.ndarray:
    """``ggml_type(spec).dequantize(raw, n_elements)``."""
    return ggml_type(spec).dequantize(raw, n_elements)
