"""The one way tallow loads its compiled CPU modules (``native/_*.c``).

:func:`load` gives a module when it is built and the compiled kernels are on
(``settings.no_native``, read at each call, so a test or a bench can switch paths);
:func:`built` gives it whatever that setting says (the worker pool serves NumPy
work too).  The first import of a module switches it to ``settings.native_isa``'s
instruction set, as on an older CPU; :func:`missing` says why a module is not there.
"""

from __future__ import annotations

import importlib
import threading

from .... import config

MODULES = ("_kernels", "_ops", "_gemm", "_conv", "_step", "_transpose", "_reduce", "_workers")

_modules: dict = {}  # name -> the module, or None when it is not built
_errors: dict = {}  # name -> why it is not built
_lock = threading.Lock()


def apply_isa(module) -> None:
    """Narrow a module to ``settings.native_isa``: "scalar" turns its SIMD builds off,
    "avx2" its AVX-512 ones.  A choice the CPU does not have keeps its widest."""
    want = config.settings.native_isa
    if want is None:
        return
    try:
        if hasattr(module, "set_isa"):  # the quantized kernels name their builds
            module.set_isa(want)
        elif want == "scalar" and hasattr(module, "set_simd"):
            module.set_simd(False)
        elif want == "avx2" and hasattr(module, "set_avx512"):
            module.set_avx512(False)
    except ValueError:
        pass  # wider than this CPU: its best stays


def built(name: str):
    """The compiled module ``name`` (one of :data:`MODULES`), or None when it is not built."""
    try:
        return _modules[name]
    except KeyError:
        pass
    if name not in MODULES:
        raise ValueError(f"{name!r} is not one of tallow's compiled modules {MODULES}")
    with _lock:  # (another thread may ask at the same time: one import, one ISA switch)
        if name not in _modules:
            try:
                module = importlib.import_module(f"{__package__}.{name}")
            except ImportError as e:  # no compiler at install time: the NumPy / numba paths serve
                module = None
                _errors[name] = f"not built ({type(e).__name__}: {e})"
            else:
                apply_isa(module)
            _modules[name] = module
    return _modules[name]


def load(name: str):
    """The compiled module ``name`` when it is built and the compiled kernels are on, else None."""
    if config.settings.no_native:
        return None
    return built(name)


def missing(name: str) -> str | None:
    """Why :func:`load` gives None for ``name`` (None when it gives the module)."""
    if built(name) is None:
        return _errors[name]
    if config.settings.no_native:
        return "switched off (TALLOW_NO_NATIVE)"
    return None


def status() -> dict:
    """Every module's state: "loaded", or why not."""
    return {name: missing(name) or "loaded" for name in MODULES}
