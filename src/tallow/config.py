"""Every ``TALLOW_*`` environment variable tallow reads, with one parser per kind.

| Variable | Kind | Default | Read | Meaning |
|---|---|---|---|---|
| ``TALLOW_NUM_THREADS`` | count | detected | first use of the CPU thread setting | threads of the CPU backend (split float products, element-wise splits, quantized matmul; BLAS itself stays on one) |
| ``TALLOW_NO_NUMBA`` | flag | off | each quantized matmul, fused GELU and residual LayerNorm | use the NumPy kernels instead of the compiled (numba) ones |
| ``TALLOW_NO_NATIVE`` | flag | off | each use of the C kernels | use the numba / NumPy paths instead of tallow's compiled C kernels (quantized products, convolution and pooling passes, decode steps) |
| ``TALLOW_NATIVE_ISA`` | choice: ``scalar``, ``avx2``, ``avx512vnni`` | the CPU's widest | first use of the C kernels | narrow the instruction set the C kernels use (``scalar``: the portable C loops) |
| ``TALLOW_DEQUANTIZE_ALL`` | flag | off | each ``QMatMul`` made | multiply quantized weights as dequantized f32 matrices (candle's ``CANDLE_DEQUANTIZE_ALL``) |
| ``TALLOW_NO_NATIVE_GEMM`` | flag | off | first float product of the process (``gemm.py``) | multiply f32 matrices with NumPy's BLAS instead of tallow's own compiled kernel |
| ``TALLOW_SPLIT_WHEN_BUSY`` | flag | off | import of the compiled kernels | split decode products across threads even when the machine has no CPU to spare (a process at real-time priority or on reserved cores) |
| ``TALLOW_GPU_OPS_PER_SUBMIT`` | count (0 means 1) | 50 | each GPU device made | GPU ops encoded per queue submission |
| ``TALLOW_GPU_CACHE_LIMIT`` | size | 1G | each GPU device made | bytes of idle buffers the GPU pool keeps |
| ``TALLOW_GPU_CHECK_INDICES`` | flag | on | import of the GPU backend | check GPU index ops' ids (a readback) and raise on one out of range |
| ``TALLOW_HEAP_PAD`` | size | 16M | first CPU device made | bytes of freed memory glibc's malloc keeps at the top of the heap for the next allocation (0: malloc's own setting) |

The kinds, the same for every variable:

* **flag**: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case);
* **count**: plain ASCII digits (``1_0``, ``2.5``, ``-1`` are not counts);
* **choice**: one of the listed words (any case);
* **size**: a number of bytes with an optional ``K``/``M``/``G`` suffix (powers of
  1024; ``1.5G``, ``512KB``, ``3MiB`` are sizes).

Surrounding spaces are ignored. An unset variable takes the default. A value
that does not parse, the empty string included (an empty export is a mistake,
not "unset"), gives one ``RuntimeWarning`` naming the variable and its value,
and the default is used.
"""

from __future__ import annotations

import os
import re
import warnings

VARIABLES = (
    "TALLOW_NUM_THREADS", "TALLOW_NO_NUMBA", "TALLOW_DEQUANTIZE_ALL", "TALLOW_SPLIT_WHEN_BUSY",
    "TALLOW_NO_NATIVE_GEMM",
    "TALLOW_GPU_OPS_PER_SUBMIT", "TALLOW_GPU_CACHE_LIMIT", "TALLOW_GPU_CHECK_INDICES",
    "TALLOW_HEAP_PAD", "TALLOW_NO_NATIVE", "TALLOW_NATIVE_ISA",
)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)(?:I?B)?", re.ASCII)


_KNOWN = frozenset(VARIABLES)


def _check_name(name: str) -> None:
    if name not in _KNOWN:  # a typo here would silently read an unset variable
        raise KeyError(f"{name} is not one of tallow's environment variables {VARIABLES}")


FROM_ENV = object()  # the ``value`` default: read the environment (tests pass a value)


def _raw(name: str, value):
    _check_name(name)
    return os.environ.get(name) if value is FROM_ENV else value


def _invalid(name: str, value, expected: str, default_text: str) -> None:
    warnings.warn(f"{name}={value!r} is not {expected}; using {default_text}",
                  RuntimeWarning, stacklevel=4)


def flag(name: str, default: bool, value=FROM_ENV) -> bool:
    """A flag variable: True / False, or ``default`` when unset or invalid."""
    raw = _raw(name, value)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    _invalid(name, raw, "a flag (1/0, true/false, yes/no, on/off)", f"the default ({'on' if default else 'off'})")
    return default


def _count(text: str):
    return int(text) if text.isascii() and text.isdigit() else None


def count(name: str, default, value=FROM_ENV, minimum: int = 0, default_text: str | None = None):
    """A count variable (ASCII digits, at least ``minimum``), or ``default`` when
    unset or invalid."""
    return parse_count(name, _raw(name, value), default, minimum, default_text)


def parse_count(name: str, raw, default, minimum: int = 0, default_text: str | None = None):
    """The count parser itself, for a setting given as a value (``name`` labels the
    warning): None -> ``default``."""
    if raw is None:
        return default
    n = _count(str(raw).strip())
    if n is None or n < minimum:
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        _invalid(name, raw, expected, default_text or f"the default {default}")
        return default
    return n


def size(name: str, default: int, value=FROM_ENV) -> int:
    """A size variable in bytes (``K``/``M``/``G`` suffixes), or ``default``."""
    raw = _raw(name, value)
    if raw is None:
        return default
    m = _SIZE.fullmatch(raw.strip().upper())
    if m is None:
        _invalid(name, raw, "a size in bytes (a number with an optional K/M/G suffix)",
                 f"the default {default}")
        return default
    return int(float(m.group(1)) * _UNITS.get(m.group(2), 1))


def choice(name: str, options: tuple, default=None, value=FROM_ENV):
    """A choice variable: one of ``options`` (lower case; the value compared in any
    case), or ``default`` when unset or invalid."""
    raw = _raw(name, value)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in options:
        return text
    _invalid(name, raw, f"one of {', '.join(options)}",
             "the default" if default is None else f"the default {default}")
    return default
