"""The package's import graph: module-level imports form no circle, and the Tensor
front end defers an import only where it says why (the lists below).

Read from the source with ``ast`` (nothing is imported), so a circle fails here with
its members named rather than as an ImportError that depends on import order.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from support.source_tree import parse_file

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tallow"

# Function-local imports of tallow's own modules in the front end (src/tallow/*.py),
# each for a reason other than a circle: the module loads on first use, to keep
# ``import tallow`` light (the GPU backend, tl.quantized), or it is built on Tensor
# and Tensor calls it (backprop).
DEFERRED = {
    "tallow.tensor_class": {"tallow.quantized.qtensor", "tallow.backprop"},
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


def _target(module, path, node):
    """The module an ``import``/``from ... import`` statement names (absolute)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.level:
        base = node.module
    else:
        parts = module.split(".")
        if path.name != "__init__.py":
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # ``from . import x`` names the submodule x when there is one.
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports(module, path, local):
    tree = parse_file(path)
    nodes = tree.body if not local else [
        n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)]
    out = set()
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(t for t in _target(module, path, node) if t in MODULES and t != module)
    return out


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


def test_module_level_imports_form_no_circle():
    edges = {m: _imports(m, p, local=False) for m, p in MODULES.items()}
    assert _circles(edges) == []


def test_circle_finder_can_fail():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(m for m, p in MODULES.items() if p.parent == SRC))
def test_front_end_defers_imports_only_where_it_says_why(module):
    deferred = _imports(module, MODULES[module], local=True)
    assert deferred <= DEFERRED.get(module, set()), (
        f"{module} imports {sorted(deferred - DEFERRED.get(module, set()))} inside a function. "
        "Import at the top of the module; the op mixins reach Tensor through self "
        "(self._wrap, self.zeros, isinstance(x, TensorBase)) instead of importing it.")
