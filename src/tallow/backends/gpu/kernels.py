"""Kernels: WGSL sources shipped with the package, compiled at run time.

A *family* is one ``wgsl/<family>.wgsl`` file plus its binding list. A module is
a family specialised for a tuple of dtypes (``unary.wgsl<f32>``): the loader
prepends ``common.wgsl``, a generated binding prelude (buffer declarations, type
aliases, load/store functions) and, for float families, ``math.wgsl``, runs a
tiny ``//#if`` preprocessor and compiles the text once, on first use. Pipelines
are built per (module, entry point, override constants), also on first use.

Two levels of cache, as in candle's Metal backend: modules and pipelines. Both
are per device and in-process; drivers keep their own on-disk shader caches
underneath (the wgpu package exposes no pipeline-cache API to persist ours).
A cache hit is a dict lookup and takes no lock; building takes a per-module lock
only, so a compile never blocks ops whose pipelines are already built.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from ...op import wgsl_constants
from .lost import raise_if_lost
from .wgsl_types import TYPES

_OP_CONSTANTS = wgsl_constants()  # const OP_NEG: u32 = 0u; ... (the op table's GPU codes)

WGSL_DIR = Path(__file__).with_name("wgsl")

IN_BASE = 1  # inputs are bound at 1, 2, 3, 4
OUT_BASE = 5  # outputs (written or read-write) at 5, 6, 7
MAX_INPUTS = 4
MAX_OUTPUTS = 3


class Family:
    """A WGSL file and its bindings: ``(name, role, slot)`` with role ``in`` (read
    only), ``out`` (written word by word), ``atomic`` (written at arbitrary
    elements: packed types use u32 atomics), ``rw``, or ``flag`` (an
    ``array<atomic<u32>>`` whatever the dtype); ``slot`` indexes the
    module's dtype tuple or names a fixed dtype ("u8", "u32")."""

    def __init__(self, name, bindings, main=0, math=False, file=None, flags=(), includes=()):
        self.name = name
        self.file = file or f"{name}.wgsl"
        self.bindings = tuple(bindings)
        self.main = main
        self.math = math
        self.flags = tuple(flags)
        self.includes = tuple(includes)
        ins = [b for b in self.bindings if b[1] == "in"]
        outs = [b for b in self.bindings if b[1] != "in"]
        assert len(ins) <= MAX_INPUTS and len(outs) <= MAX_OUTPUTS
        self.sig = (len(ins), len(outs))


FAMILIES: dict = {}


def family(name, bindings, main=0, math=False, file=None, flags=(), includes=()) -> Family:
    f = Family(name, bindings, main, math, file, flags, includes)
    FAMILIES[name] = f
    return f


# -- source assembly --------------------------------------------------------------------

_SOURCES: dict = {}


def _source(fname: str) -> str:
    src = _SOURCES.get(fname)
    if src is None:
        src = (WGSL_DIR / fname).read_text()
        _SOURCES[fname] = src
    return src


_DIRECTIVE = re.compile(r"^\s*//#(if|elif|else|endif)\b(.*)$")


def preprocess(text: str, flags: dict) -> str:
    """Keep the lines whose ``//#if`` / ``//#elif`` / ``//#else`` conditions hold.

    Conditions are Python expressions over ``flags`` (names of true flags, False
    for unknown names), e.g. ``//#if T_FLOAT and not PACKED_Y``.
    """
    env = _Flags(flags)
    out = []
    stack = []  # (emitting, taken) per open #if
    emitting = True
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if not m:
            if emitting:
                out.append(line)
            continue
        kind, cond = m.group(1), m.group(2).strip()
        if kind == "if":
            stack.append((emitting, False))
            ok = emitting and bool(eval(cond, {"__builtins__": {}}, env))
            stack[-1] = (stack[-1][0], ok)
            emitting = ok
        elif kind == "elif":
            parent, taken = stack[-1]
            ok = parent and not taken and bool(eval(cond, {"__builtins__": {}}, env))
            stack[-1] = (parent, taken or ok)
            emitting = ok
        elif kind == "else":
            parent, taken = stack[-1]
            emitting = parent and not taken
            stack[-1] = (parent, True)
        else:
            parent, _ = stack.pop()
            emitting = parent
    if stack:
        raise ValueError("unbalanced //#if in WGSL source")
    return "\n".join(out)


class _Flags(dict):
    def __missing__(self, key):
        return False


def _binding_prelude(name, role, binding, wt) -> str:
    var = f"buf_{name}"
    T = f"T{name.upper()}"
    lines = [f"alias {T} = {wt.compute};",
             f"const EPW_{name.upper()}: u32 = {wt.epw}u;",
             f"const BITS_{name.upper()}: u32 = {wt.bits}u;"]
    atomic = (role == "atomic" and wt.packed) or role == "flag"
    if role == "in":
        lines.append(f"@group(0) @binding({binding}) var<storage, read> {var}: array<{wt.store}>;")
    elif atomic:
        lines.append(f"@group(0) @binding({binding}) var<storage, read_write> {var}: array<atomic<u32>>;")
    else:
        lines.append(f"@group(0) @binding({binding}) var<storage, read_write> {var}: array<{wt.store}>;")
    if role == "flag":
        return "\n".join(lines)
    if wt.packed:
        mask = (1 << wt.bits) - 1
        word = f"atomicLoad(&{var}[i / {wt.epw}u])" if atomic else f"{var}[i / {wt.epw}u]"
        bits = f"(({word} >> ((i % {wt.epw}u) * {wt.bits}u)) & {mask:#x}u)"
        lines.append(f"fn ld_{name}(i: u32) -> {T} {{ return {wt.decode.format(w=bits)}; }}")
        lines.append(f"fn enc_{name}(v: {T}) -> u32 {{ return {wt.encode.format(v='v')}; }}")
        if atomic:
            lines.append(
                f"fn st_{name}(i: u32, v: {T}) {{\n"
                f"    let sh = (i % {wt.epw}u) * {wt.bits}u;\n"
                f"    atomicAnd(&{var}[i / {wt.epw}u], ~({mask:#x}u << sh));\n"
                f"    atomicOr(&{var}[i / {wt.epw}u], enc_{name}(v) << sh);\n}}")
    else:
        lines.append(f"fn ld_{name}(i: u32) -> {T} {{ return {var}[i]; }}")
        if role != "in":
            lines.append(f"fn st_{name}(i: u32, v: {T}) {{ {var}[i] = v; }}")
    return "\n".join(lines)


# sc(k): scalar parameter k of a kernel (two words each, from word 8).
_SCALAR_FN = {
    "f32": "fn sc(k: u32) -> T { return pf(8u + 2u * k); }",
    "u32": "fn sc(k: u32) -> T { return pw(8u + 2u * k); }",
    "i32": "fn sc(k: u32) -> T { return pi32(8u + 2u * k); }",
    "f64": "fn sc(k: u32) -> T { return pf64(8u + 2u * k); }",
    "i64": "fn sc(k: u32) -> T { return pi64(8u + 2u * k); }",
}


def assemble(fam: Family, dtypes: tuple) -> str:
    """The full WGSL text of ``fam`` specialised for ``dtypes``."""
    types = []
    for _, _, slot in fam.bindings:
        types.append(TYPES[dtypes[slot]] if isinstance(slot, int) else TYPES[slot])
    main = TYPES[dtypes[fam.main]] if dtypes else TYPES["f32"]
    flags = {
        "T_FLOAT": main.is_float, "T_INT": not main.is_float,
        "T_SIGNED": main.compute in ("i32", "i64") or main.is_float,
        "T_I32": main.compute == "i32", "T_BOOL": main.name == "bool",
        "T_F64": main.name == "f64", "T_I64": main.name == "i64", "T_U8": main.name == "u8",
        "T_HALF": main.name in ("f16", "bf16"), "T_NAME_" + main.name: True,
        "HAS_F64": any(t.name == "f64" for t in types) or main.name == "f64",
        "HAS_I64": any(t.name == "i64" for t in types) or main.name == "i64",
        "HAS_SMALL": any(t.dtype.is_small_float for t in types) or main.dtype.is_small_float,
    }
    for (name, _, _), wt in zip(fam.bindings, types):
        up = name.upper()
        flags[f"PACKED_{up}"] = wt.packed
        flags[f"FLOAT_{up}"] = wt.is_float
        flags[f"I32_{up}"] = wt.compute == "i32"
        flags[f"SMALL_{up}"] = wt.dtype.is_small_float
        flags[f"{up}_IS_{wt.name}"] = True
    for i, d in enumerate(dtypes):
        flags[f"D{i}_{d}"] = True
    for f in fam.flags:
        flags[f] = True
    parts = [_source("common.wgsl"), _OP_CONSTANTS]
    parts.append(f"alias T = {main.compute};")
    parts.append(_SCALAR_FN[main.compute])
    n_in = n_out = 0
    for (name, role, _), wt in zip(fam.bindings, types):
        if role == "in":
            binding = IN_BASE + n_in
            n_in += 1
        else:
            binding = OUT_BASE + n_out
            n_out += 1
        parts.append(_binding_prelude(name, role, binding, wt))
    if fam.math and main.is_float:
        parts.append(_source("math.wgsl"))
    parts.append(_source(fam.file))
    for inc in fam.includes:
        parts.append(_source(inc))
    return preprocess("\n".join(p for p in parts if p), flags)


# -- caches ---------------------------------------------------------------------------------

def _module_label(fam: Family) -> str:
    """The file's name, and the family's too where other families build from that file
    ("copy.wgsl[fill_into]"): one name for two modules would merge their statistics."""
    shared = any(f.file == fam.file and f.name != fam.name for f in FAMILIES.values())
    if shared and fam.file != f"{fam.name}.wgsl":
        return f"{fam.file}[{fam.name}]"
    return fam.file


class ModuleStats:
    __slots__ = ("name", "compile_s", "pipeline_s", "pipelines", "misses", "module")

    def __init__(self, name):
        self.name = name
        self.compile_s = 0.0
        self.pipeline_s = 0.0
        self.pipelines = []
        self.misses = 0
        self.module = None


class Pipeline:
    __slots__ = ("raw", "obj", "sig", "hits", "stats", "entry", "constants", "build_s")

    def __init__(self, obj, sig, stats, entry, constants, build_s):
        self.obj = obj
        self.raw = obj._internal
        self.sig = sig
        self.hits = 0
        self.stats = stats
        self.entry = entry
        self.constants = constants
        self.build_s = build_s


class KernelRef:
    """An element-wise kernel whose two variants (strided operands, or all
    operands contiguous: CONTIG = true) are built on first use of each."""

    __slots__ = ("_kernels", "_args", "_general", "_contig")

    def __init__(self, kernels, fam, dtypes, entry, constants):
        self._kernels = kernels
        self._args = (fam, dtypes, entry, constants)
        self._general = None
        self._contig = None

    def general(self) -> Pipeline:
        p = self._general
        if p is None:
            p = self._general = self._kernels.get(*self._args)
        else:
            p.hits += 1
        return p

    def contig(self) -> Pipeline:
        p = self._contig
        if p is None:
            fam, dtypes, entry, constants = self._args
            p = self._contig = self._kernels.get(fam, dtypes, entry, constants + (("CONTIG", True),))
        else:
            p.hits += 1
        return p


class Kernels:
    """Per-device module and pipeline caches with compile timings."""

    def __init__(self, state):
        self._state = state
        self._pipes: dict = {}
        self._refs: dict = {}
        self._modules: dict = {}
        self._locks: dict = {}
        self._guard = threading.Lock()

    def get(self, fam: Family, dtypes: tuple, entry: str = "main", constants: tuple = ()) -> Pipeline:
        key = (fam.name, dtypes, entry, constants)
        p = self._pipes.get(key)
        if p is not None:
            p.hits += 1
            return p
        return self._build(key, fam, dtypes, entry, constants)

    def ref(self, fam: Family, dtypes: tuple, entry: str = "main", constants: tuple = ()) -> KernelRef:
        key = (fam.name, dtypes, entry, constants)
        r = self._refs.get(key)
        if r is None:
            r = self._refs.setdefault(key, KernelRef(self, fam, dtypes, entry, constants))
        return r

    def _lock_for(self, mkey):
        with self._guard:
            lock = self._locks.get(mkey)
            if lock is None:
                lock = self._locks[mkey] = threading.Lock()
            return lock

    def _build(self, key, fam, dtypes, entry, constants) -> Pipeline:
        mkey = (fam.name, dtypes)
        with self._lock_for(mkey):
            p = self._pipes.get(key)
            if p is not None:
                p.hits += 1
                return p
            st = self._modules.get(mkey)
            dev = self._state.device
            if st is None:
                st = ModuleStats(f"{_module_label(fam)}<{','.join(dtypes)}>")
                code = assemble(fam, dtypes)
                t0 = time.perf_counter()
                try:
                    st.module = dev.create_shader_module(label=st.name, code=code)
                except Exception as e:  # a compile error is a tallow bug: say where
                    raise_if_lost(self._state, f"compiling {st.name}", e)
                    raise RuntimeError(f"WGSL module {st.name} failed to compile: {e}") from None
                st.compile_s = time.perf_counter() - t0
                self._modules[mkey] = st
            t0 = time.perf_counter()
            layout = self._state.commands.pipeline_layout(fam.sig)
            label = f"{st.name}:{entry}{list(constants) if constants else ''}"
            try:
                obj = dev.create_compute_pipeline(
                    label=label, layout=layout,
                    compute={"module": st.module, "entry_point": entry, "constants": dict(constants)},
                )
            except Exception as e:  # the driver's own compile: a failure there can lose the device
                raise_if_lost(self._state, f"building the pipeline {label}", e)
                raise
            dt_ = time.perf_counter() - t0
            st.pipeline_s += dt_
            st.misses += 1
            p = Pipeline(obj, fam.sig, st, entry, constants, dt_)
            st.pipelines.append(p)
            self._pipes[key] = p
            return p

    def stats(self) -> dict:
        out = {}
        for st in list(self._modules.values()):
            out[st.name] = {
                "compile_s": st.compile_s,
                "pipeline_s": st.pipeline_s,
                "pipelines": len(st.pipelines),
                "hits": sum(p.hits for p in st.pipelines),
                "misses": st.misses,
            }
        return out
