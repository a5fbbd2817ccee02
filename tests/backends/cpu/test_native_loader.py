"""The one loader of the compiled modules: TALLOW_NO_NATIVE at each call, the
instruction-set choice at first import, and why a module is missing."""

import subprocess
import sys

import pytest

from tallow import config
from tallow.backends.cpu.native import loader


def test_every_module_is_loaded_or_says_why():
    for name, state in loader.status().items():
        assert state == "loaded" or state.startswith("not built ("), (name, state)


def test_no_native_is_read_at_each_call():
    name = next((n for n in loader.MODULES if loader.built(n) is not None), None)
    if name is None:
        pytest.skip("no compiled module is built")
    assert loader.load(name) is loader.built(name)
    with config.settings.override(no_native=True):
        assert loader.load(name) is None
        assert loader.missing(name) == "switched off (TALLOW_NO_NATIVE)"
        assert loader.built(name) is not None  # the pool and the tests still reach it
    assert loader.load(name) is not None and loader.missing(name) is None


def test_an_unknown_module_is_refused():
    with pytest.raises(ValueError, match="'_nope' is not one of tallow's compiled modules"):
        loader.built("_nope")


@pytest.mark.skipif(loader.built("_kernels") is None or loader.built("_gemm") is None,
                    reason="the C extension is not built")
def test_the_isa_choice_narrows_every_module_at_import():
    code = ("from tallow.backends.cpu.native import loader; "
            "print(loader.built('_kernels').isa(), loader.built('_gemm').simd(), loader.built('_ops').simd())")
    env = {**__import__("os").environ, "TALLOW_NATIVE_ISA": "scalar"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["scalar", "False", "False"], out.stderr
