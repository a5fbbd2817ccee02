"""Every backend implements the protocol of tallow.backends.base, with its signatures.

The storages and device states are composed of mixins with the protocol class
last; a required method that no mixin defines would fall through to the
protocol's ``NotImplementedError`` default, and one with other parameters would
fail only when some op calls it. Both are caught here, for each backend.
"""

import inspect

import pytest

from tallow.backends.base import BackendDevice, BackendStorage
from support.source_tree import parse_file

# Ops a backend may leave out: the front end composes them (fused ops, backward
# kernels) or falls back to dequantized weights (quantized ops).
OPTIONAL_STORAGE = {
    "softmax_last_dim", "rms_norm", "layer_norm", "gelu_erf_fast", "bias_gelu_erf",
    "add_layer_norm", "attention_packed", "rope", "linear", "attention",
    "dequantize", "prepare_qweight", "qmatmul_t",
    "conv2d_kernel_grad", "max_pool2d_backward", "avg_pool2d_backward",
    "cross_entropy_ids", "relu_backward",
    # have a composed default in the protocol
    "add_scaled_inplace", "linear_backward",
}
OPTIONAL_DEVICE = {"synchronize", "supports_dtype", "check_dtype", "qmatmul_path"}


def _protocol_methods(proto):
    return {name: f for name, f in vars(proto).items()
            if inspect.isfunction(f) and not name.startswith("_")}


def _params(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def _backends():
    from tallow.backends.cpu.device import CpuDeviceState
    from tallow.backends.cpu.storage import CpuStorage

    out = [pytest.param(CpuStorage, CpuDeviceState, id="cpu")]
    try:
        from tallow.backends.gpu.device import GpuDeviceState
        from tallow.backends.gpu.storage import GpuStorage
    except ImportError as e:  # pragma: no cover - wgpu missing
        out.append(pytest.param(None, None, id="gpu", marks=pytest.mark.skip(reason=str(e))))
    else:
        out.append(pytest.param(GpuStorage, GpuDeviceState, id="gpu"))
    return out


def _check(cls, proto, optional):
    missing, mismatched = [], []
    for name, spec in _protocol_methods(proto).items():
        impl = getattr(cls, name)
        if impl is spec:
            if name not in optional:
                missing.append(name)
            continue
        if _params(impl) != _params(spec):
            mismatched.append(f"{name}{inspect.signature(impl)} != protocol {name}{inspect.signature(spec)}")
    return missing, mismatched


@pytest.mark.parametrize("storage, state", _backends())
def test_storage_implements_every_required_method_with_the_protocols_signature(storage, state):
    missing, mismatched = _check(storage, BackendStorage, OPTIONAL_STORAGE)
    assert not missing, f"{storage.__name__} lacks {missing}"
    assert not mismatched, "\n".join(mismatched)


@pytest.mark.parametrize("storage, state", _backends())
def test_device_state_implements_every_required_method_with_the_protocols_signature(storage, state):
    missing, mismatched = _check(state, BackendDevice, OPTIONAL_DEVICE)
    assert not missing, f"{state.__name__} lacks {missing}"
    assert not mismatched, "\n".join(mismatched)


@pytest.mark.parametrize("storage, state", _backends())
def test_protocol_class_comes_last_so_its_defaults_shadow_nothing(storage, state):
    assert storage.__mro__[-2] is BackendStorage
    assert state.__mro__[-2] is BackendDevice


def test_the_check_catches_a_missing_method_and_a_changed_signature():
    class Broken(BackendStorage):
        def unary(self, op, layout, extra):  # one parameter too many
            raise AssertionError

    missing, mismatched = _check(Broken, BackendStorage, OPTIONAL_STORAGE)
    assert "binary" in missing and "softmax_last_dim" not in missing
    assert len(mismatched) == 1 and mismatched[0].startswith("unary")


def _backend_import_graph():
    """module -> backend modules it imports (at module level or inside functions)."""
    import ast
    import pathlib

    import tallow.backends as pkg

    root = pathlib.Path(pkg.__file__).parent
    graph = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = ["tallow", "backends", *rel.parts]
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        name = ".".join(parts)
        here = parts if is_pkg else parts[:-1]
        deps = set()
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                mod = ".".join(base + (node.module.split(".") if node.module else []))
                # ``from pkg import sub`` imports the submodule; ``from mod import name``
                # the module (resolved below, once every module is known).
                targets = [(mod, f"{mod}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            else:
                continue
            deps.update(targets)
        graph[name] = deps
    return {m: ({sub if sub in graph else mod for mod, sub in deps} & set(graph)) - {m}
            for m, deps in graph.items()}


def _cycle(graph):
    state = {}

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d] if d in path else [m, d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_cycle_inside_backends():
    graph = _backend_import_graph()
    assert "tallow.backends.cpu.elementwise" in graph["tallow.backends.cpu.storage"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
