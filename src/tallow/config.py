"""tallow's settings: every switch in one object (``settings``), each read from its
``TALLOW_*`` environment variable, with one parser per kind.

``settings.<field>`` reads the variable when it is asked for (a test or a bench may
change the environment between two products), unless ``settings.override(...)``
holds a value for it: ``with settings.override(no_native=True): ...``.  The table
below is generated from :data:`SWITCHES`, the one list of them.

{table}

The kinds, the same for every variable:

* **flag**: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case);
* **count**: plain ASCII digits (``1_0``, ``2.5``, ``-1`` are not counts);
* **choice**: one of the listed words (any case);
* **size**: a number of bytes with an optional ``K``/``M``/``G`` suffix (powers of
  1024; ``1.5G``, ``512KB``, ``3MiB`` are sizes);
* **path**: a folder (an empty value is unset);
* **text**: any text, such as a key (an empty value is unset).

Surrounding spaces are ignored. An unset variable takes the default. A value
that does not parse, the empty string included (an empty export is a mistake,
not "unset"), gives one ``RuntimeWarning`` naming the variable and its value,
and the default is used.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    """One setting: ``settings.<field>``, read from ``variable``."""

    field: str
    variable: str
    kind: str  # flag, count, choice, size, path or text
    default: object
    read: str  # when tallow asks for it
    doc: str
    options: tuple = ()  # a choice's words


NATIVE_ISAS = ("scalar", "avx2", "avx512vnni")

SWITCHES = (
    Switch("num_threads", "TALLOW_NUM_THREADS", "count", None, "first use of the CPU thread setting",
           "threads of the CPU backend (split float products, element-wise splits, quantized matmul; "
           "BLAS itself stays on one); default: detected"),
    Switch("no_numba", "TALLOW_NO_NUMBA", "flag", False, "each quantized matmul, fused GELU and residual LayerNorm",
           "use the NumPy kernels instead of the compiled (numba) ones"),
    Switch("no_native", "TALLOW_NO_NATIVE", "flag", False, "each use of the C kernels",
           "use the numba / NumPy paths instead of tallow's compiled C kernels (quantized products, "
           "convolution and pooling passes, decode steps, the f32 product)"),
    Switch("native_isa", "TALLOW_NATIVE_ISA", "choice", None, "first load of each C module",
           "narrow the instruction set of the C kernels (``scalar``: their generic build); default: "
           "the CPU's widest", NATIVE_ISAS),
    Switch("dequantize_all", "TALLOW_DEQUANTIZE_ALL", "flag", False, "each ``QMatMul`` made",
           "multiply quantized weights as dequantized f32 matrices (candle's ``CANDLE_DEQUANTIZE_ALL``)"),
    Switch("no_native_gemm", "TALLOW_NO_NATIVE_GEMM", "flag", False, "first float product of the process",
           "multiply f32 matrices with NumPy's BLAS instead of tallow's own compiled kernel "
           "(machines that are not x86 always do)"),
    Switch("split_when_busy", "TALLOW_SPLIT_WHEN_BUSY", "flag", False, "import of the compiled pool",
           "split decode products across threads even when the machine has no CPU to spare "
           "(a process at real-time priority or on reserved cores)"),
    Switch("gpu_ops_per_submit", "TALLOW_GPU_OPS_PER_SUBMIT", "count", 50, "each GPU device made",
           "GPU ops encoded per queue submission (0 means 1)"),
    Switch("gpu_cache_limit", "TALLOW_GPU_CACHE_LIMIT", "size", 1 << 30, "each GPU device made",
           "bytes of idle buffers the GPU pool keeps"),
    Switch("gpu_check_indices", "TALLOW_GPU_CHECK_INDICES", "flag", True, "import of the GPU backend",
           "check GPU index ops' ids (a readback) and raise on one out of range"),
    Switch("heap_pad", "TALLOW_HEAP_PAD", "size", 16 << 20, "first CPU device made",
           "bytes of freed memory glibc's malloc keeps at the top of the heap for the next "
           "allocation (0: malloc's own setting)"),
    Switch("cache_dir", "TALLOW_CACHE", "path", None, "each lookup or fetch of a fetched model",
           "folder of the models ``tallow models fetch`` unpacks; default: ``$XDG_CACHE_HOME/tallow`` "
           "or ``~/.cache/tallow``"),
    Switch("api_key", "TALLOW_API_KEY", "text", None, "start of ``tallow serve``",
           "the key ``tallow serve`` requires as ``Authorization: Bearer KEY`` (``--api-key`` "
           "wins over it); default: no key"),
)
VARIABLES = tuple(s.variable for s in SWITCHES)

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


# ------------------------------------------------------------------- the settings object
_BY_FIELD = {s.field: s for s in SWITCHES}
_READERS = {
    "flag": lambda s, raw: flag(s.variable, s.default, raw),
    "count": lambda s, raw: count(s.variable, s.default, raw, minimum=1 if s.field == "num_threads" else 0),
    "size": lambda s, raw: size(s.variable, s.default, raw),
    "choice": lambda s, raw: choice(s.variable, s.options, s.default, raw),
    "path": lambda s, raw: (raw.strip() or None) if raw is not None else s.default,
    "text": lambda s, raw: (raw.strip() or None) if raw is not None else s.default,
}
# The environment's own bytes on POSIX (os.environ decodes, encodes and copies on every
# read; a setting is read once per product): monkeypatch.setenv and os.environ[...] =
# write through to it.  Elsewhere, os.environ itself.
_ENV_BYTES = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _env_value(variable: str, key: bytes):
    if _ENV_BYTES is None:
        return os.environ.get(variable)
    raw = _ENV_BYTES.get(key)
    return None if raw is None else os.fsdecode(raw)


def _setting(switch: Switch) -> property:
    field, key, read = switch.field, os.fsencode(switch.variable), _READERS[switch.kind]

    def get(self):
        overrides = self._overrides
        if overrides and field in overrides:
            return overrides[field]
        raw = _env_value(switch.variable, key)
        seen = self._parsed.get(field)
        if seen is not None and seen[0] == raw:  # parsed (and warned about) once per value
            return seen[1]
        value = read(switch, raw)
        self._parsed[field] = (raw, value)
        return value

    return property(get, doc=switch.doc)


class Settings:
    """Every switch of :data:`SWITCHES` as an attribute: ``settings.no_native``."""

    def __init__(self):
        object.__setattr__(self, "_overrides", {})
        object.__setattr__(self, "_parsed", {})
        object.__setattr__(self, "_lock", threading.Lock())

    def __getattr__(self, field):  # (only for names that are not settings)
        raise AttributeError(f"tallow has no setting {field!r} (settings: {', '.join(_BY_FIELD)})")

    def __setattr__(self, field, value):
        raise AttributeError(f"settings are not assigned: use settings.override({field}=...) "
                             f"or set {_BY_FIELD[field].variable if field in _BY_FIELD else 'its variable'}")

    @contextlib.contextmanager
    def override(self, **values):
        """Hold these fields at these values inside the block (the environment is then
        not read for them); the previous values come back after it."""
        for field, value in values.items():
            switch = _BY_FIELD.get(field)
            if switch is None:
                raise AttributeError(f"tallow has no setting {field!r} (settings: {', '.join(_BY_FIELD)})")
            if switch.kind == "choice" and value is not None and value not in switch.options:
                raise ValueError(f"{field} must be one of {', '.join(switch.options)} or None, not {value!r}")
        with self._lock:
            before = self._overrides
            # a new dict: a reader on another thread never sees one half made
            object.__setattr__(self, "_overrides", {**before, **values})
        try:
            yield self
        finally:
            with self._lock:
                object.__setattr__(self, "_overrides", before)


for _switch in SWITCHES:
    setattr(Settings, _switch.field, _setting(_switch))
del _switch

settings = Settings()


def default(field: str):
    """A setting's value when its variable is unset."""
    return _BY_FIELD[field].default


def _table() -> str:
    rows = ["| Variable | Setting | Kind | Default | Read | Meaning |", "|---|---|---|---|---|---|"]
    for s in SWITCHES:
        kind = f"choice: {', '.join(f'``{o}``' for o in s.options)}" if s.options else s.kind
        if s.kind == "size":
            default = next(f"{s.default >> shift}{unit}" for shift, unit in ((30, "G"), (20, "M"), (10, "K"), (0, ""))
                           if s.default >= 1 << shift and not s.default % (1 << shift))
        else:
            default = {True: "on", False: "off", None: "see meaning"}.get(s.default, s.default)
        rows.append(f"| ``{s.variable}`` | ``{s.field}`` | {kind} | {default} | {s.read} | {s.doc} |")
    return "\n".join(rows)


__doc__ = __doc__.format(table=_table())
