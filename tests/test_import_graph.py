"""The package's import graph: layers in candle's order, no circle, no private names
reached across packages.

Layers, from the ground up (nothing imports a layer above its own, not even inside
a function):

1. the ground: errors, dtype, shape, layout, config, the op tables (GROUND below);
2. ``tallow.ggml``: the GGML block codecs and GGUF io, on NumPy only;
3. ``tallow.backends``: storages, kernels and the CPU backend's one thread pool;
4. the Tensor and everything built on it (op mixins, autograd, nn, quantized
   tensors, models, compile, CLI).

Read from the source with ``ast`` (nothing is imported), so a circle fails here with
its members named rather than as an ImportError that depends on import order.
Imports inside functions count like the others: a lazy import is fine for start-up
time only where it goes downward.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from support.source_tree import parse_file

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tallow"

# The ground floor: what every layer may import (each imports only the others here).
GROUND = {
    "tallow.errors", "tallow.dtype", "tallow.shape", "tallow.layout", "tallow.config",
    "tallow.limits", "tallow.atomic", "tallow.op", "tallow.versions", "tallow.bf16_numpy",
    "tallow.float_warnings", "tallow.checks", "tallow.grad_mode",
}
LOWER_LAYERS = ("tallow.ggml", "tallow.backends")  # in order: each may import the ones before it

# Function-local imports of tallow's own modules in the front end (src/tallow/*.py):
# downward ones that load a heavy module on first use, to keep ``import tallow`` light.
DEFERRED = {
    "tallow.utils": {"tallow.backends.gpu", "tallow.quantized.gguf_file"},
    "tallow.device": {"tallow.backends.gpu"},
}


def _modules():
    mods = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _compiled(path, name):
    """Whether ``name`` is a compiled extension beside ``path`` (its C source is there)."""
    return (path.parent / f"{name}.c").exists()


def _base(module, path, node):
    if not node.level:
        return node.module
    parts = module.split(".")
    if path.name != "__init__.py":
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _target(module, path, node):
    """The modules an ``import``/``from ... import`` statement names (absolute)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _base(module, path, node)
    out = []
    for a in node.names:
        # ``from . import x`` names the submodule x when there is one; a compiled
        # extension of the package (``from . import _workers``) is a leaf of its own.
        if f"{base}.{a.name}" in MODULES:
            out.append(f"{base}.{a.name}")
        elif not (node.level and _compiled(MODULES.get(base, path), a.name)):
            out.append(base)
    return out


def _imports(module, path, local=None):
    """tallow modules that ``module`` imports: all of them (``local`` None), only at the
    top level (False) or only inside functions (True)."""
    tree = parse_file(path)
    if local is None:
        nodes = list(ast.walk(tree))
    elif local:
        nodes = [n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f)]
    else:
        nodes = tree.body
    out = set()
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(t for t in _target(module, path, node) if t in MODULES and t != module)
    return out


EDGES = {m: _imports(m, p) for m, p in MODULES.items()}


def _circles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_imports_form_no_circle_counting_those_inside_functions():
    circles = _circles(EDGES)
    assert circles == [], "import circles (members, then their edges inside the circle): " + "; ".join(
        f"{c}: " + ", ".join(f"{a} -> {b}" for a in c for b in sorted(EDGES[a] & set(c))) for c in circles)


def test_circle_finder_can_fail():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def _layer(module):
    if module in GROUND:
        return 0
    for i, prefix in enumerate(LOWER_LAYERS, 1):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return len(LOWER_LAYERS) + 1  # the Tensor and above


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) <= len(LOWER_LAYERS)))
def test_lower_layers_import_nothing_above_them(module):
    upward = sorted(t for t in EDGES[module] if _layer(t) > _layer(module))
    assert not upward, (
        f"{module} imports {upward}, a layer above its own: the ground (errors, dtype, shape, "
        "layout, config, op tables), then tallow.ggml, then tallow.backends, then the Tensor. "
        "Move what it needs down, or have the upper layer pass it in (a hook, an argument).")


def test_ground_is_closed():
    assert all(EDGES[m] <= GROUND for m in GROUND if m in MODULES), {
        m: sorted(EDGES[m] - GROUND) for m in GROUND if m in MODULES and not EDGES[m] <= GROUND}


def test_layer_rule_can_fail():
    assert _layer("tallow.backends.cpu.native") > _layer("tallow.ggml.types") > _layer("tallow.dtype")
    assert _layer("tallow.tensor_class") > _layer("tallow.backends.cpu.gemm")


@pytest.mark.parametrize("module", sorted(m for m, p in MODULES.items() if p.parent == SRC))
def test_front_end_defers_imports_only_where_it_says_why(module):
    deferred = _imports(module, MODULES[module], local=True)
    assert deferred <= DEFERRED.get(module, set()), (
        f"{module} imports {sorted(deferred - DEFERRED.get(module, set()))} inside a function. "
        "Import at the top of the module; the op mixins reach Tensor through self "
        "(self._wrap, self.zeros, isinstance(x, TensorBase)) instead of importing it.")


# -- private names ---------------------------------------------------------------------

def _package(module):
    """The package a module belongs to for the private-name rule: tallow's first-level
    subpackage (tallow.backends, tallow.models, ...), or "tallow" for the front end."""
    parts = module.split(".")
    if len(parts) >= 2 and (len(parts) > 2 or MODULES[module].name == "__init__.py"):
        return parts[1]
    return "tallow"


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(module, path):
    """``from x import _y`` and ``x._y`` (x bound to a module by an import) where x is
    a module of another package: (line, text) pairs."""
    tree = parse_file(path)
    bound, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _base(module, path, node)
            if not base or not (base == "tallow" or base.startswith("tallow.")):
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in MODULES:
                    bound[a.asname or a.name] = full
                owner = full if full in MODULES else base
                if _private(a.name) and owner in MODULES and _package(owner) != _package(module):
                    found.append((node.lineno, f"from {base} import {a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    bound[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and _private(node.attr)):
            owner = bound[node.value.id]
            if _package(owner) != _package(module):
                found.append((node.lineno, f"{node.value.id}.{node.attr} ({owner})"))
    return sorted(found)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_reached_across_packages(module):
    found = private_reaches(module, MODULES[module])
    assert not found, (
        f"{module} reaches private names of another package: {found}. Use (or publish, "
        "documented) a public name of that package instead.")


def test_private_rule_can_fail(tmp_path):
    fake = tmp_path / "example.py"
    fake.write_text("from ..backends.cpu import gemm\nfrom ..backends.cpu.gemm import _edges\n"
                    "gemm._pool_threads()\nfrom . import _local_helper\n")
    MODULES["tallow.models.example"] = fake
    try:
        found = private_reaches("tallow.models.example", fake)
    finally:
        del MODULES["tallow.models.example"]
    assert [text for _, text in found] == [
        "from tallow.backends.cpu.gemm import _edges", "gemm._pool_threads (tallow.backends.cpu.gemm)"]
