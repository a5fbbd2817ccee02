"""tallow.config: the one reader of TALLOW_* variables, one parser per kind."""

import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

import tallow as tl
from tallow import config

SRC = pathlib.Path(tl.__file__).parent


def _quiet(f, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return f(*args)


def test_every_variable_is_read_through_config_and_documented():
    documented = set(re.findall(r"``(TALLOW_\w+)``", config.__doc__))
    assert documented == set(config.VARIABLES)
    for path in SRC.rglob("*.py"):
        if path.name == "config.py":
            continue
        text = path.read_text()
        assert not re.search(r"environ[^\n]*TALLOW_|getenv\([^\n]*TALLOW_", text), path
        for name in re.findall(r"config\.\w+\(\s*\"(TALLOW_\w+)\"", text):
            assert name in config.VARIABLES, (path, name)
        # a name kept in a constant (ENV_X = "TALLOW_...") is read through config too
        for name in re.findall(r"[\"'](TALLOW_[A-Z0-9_]+)[\"']", text):
            assert name in config.VARIABLES, (path, name)
    design = (SRC.parent.parent / "docs" / "design.md").read_text()
    for name in config.VARIABLES:
        assert f"`{name}`" in design, f"{name} missing from docs/design.md's table"


@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), (" YES ", True), ("on", True),
    ("0", False), ("false", False), ("No", False), ("off", False), (None, "default"),
])
def test_flags(value, expected):
    for default in (True, False):
        want = default if expected == "default" else expected
        assert _quiet(config.flag, "TALLOW_NO_NUMBA", default, value) is want


@pytest.mark.parametrize("value", ["", "2", "y", "enabled"])
def test_a_flag_that_does_not_parse_warns_and_keeps_the_default(value):
    with pytest.warns(RuntimeWarning, match=r"TALLOW_DEQUANTIZE_ALL=.* is not a flag"):
        assert config.flag("TALLOW_DEQUANTIZE_ALL", False, value) is False


@pytest.mark.parametrize("value,expected", [("0", 0), ("7", 7), (" 12\n", 12), (None, 50)])
def test_counts(value, expected):
    assert _quiet(config.count, "TALLOW_GPU_OPS_PER_SUBMIT", 50, value) == expected


@pytest.mark.parametrize("value", ["", "-1", "2.5", "1_0", "\u0663", "x"])
def test_a_count_that_does_not_parse_warns_and_keeps_the_default(value):
    with pytest.warns(RuntimeWarning, match="TALLOW_GPU_OPS_PER_SUBMIT"):
        assert config.count("TALLOW_GPU_OPS_PER_SUBMIT", 50, value) == 50


@pytest.mark.parametrize("value,expected", [
    ("100", 100), ("100B", 100), ("2K", 2048), ("2kb", 2048), ("3MiB", 3 << 20), ("1.5G", 3 << 29),
])
def test_sizes(value, expected):
    assert _quiet(config.size, "TALLOW_GPU_CACHE_LIMIT", 1, value) == expected


@pytest.mark.parametrize("value", ["", "-1", "lots", "1T", "K"])
def test_a_size_that_does_not_parse_warns_and_keeps_the_default(value):
    with pytest.warns(RuntimeWarning, match="TALLOW_GPU_CACHE_LIMIT"):
        assert config.size("TALLOW_GPU_CACHE_LIMIT", 9, value) == 9


def test_an_unknown_name_is_refused():
    with pytest.raises(KeyError):
        config.flag("TALLOW_NO_NUMBAH", False)


def test_the_environment_is_read_when_no_value_is_given(monkeypatch):
    monkeypatch.setenv("TALLOW_NO_NUMBA", "1")
    assert config.flag("TALLOW_NO_NUMBA", False) is True
    monkeypatch.delenv("TALLOW_NO_NUMBA")
    assert config.flag("TALLOW_NO_NUMBA", False) is False


def test_dequantize_all_follows_the_variable_at_qmatmul_creation():
    code = ("import numpy as np, tallow as tl\n"
            "from tallow.quantized import QMatMul\n"
            "q = tl.Tensor(np.ones((4, 64), np.float32)).quantize('Q8_0')\n"
            "print(QMatMul(q).path)\n")
    env = dict(os.environ, TALLOW_DEQUANTIZE_ALL="yes",
               PYTHONPATH=str(SRC.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "dequantized", out.stderr


@pytest.mark.parametrize("value,expected", [
    ("scalar", "scalar"), (" AVX2 ", "avx2"), ("avx512vnni", "avx512vnni"), (None, None),
])
def test_choice_values(value, expected):
    assert _quiet(config.choice, "TALLOW_NATIVE_ISA", ("scalar", "avx2", "avx512vnni"), None, value) == expected


@pytest.mark.parametrize("value", ["", "sse", "avx-2"])
def test_choice_invalid_warns_and_takes_the_default(value):
    with pytest.warns(RuntimeWarning, match="TALLOW_NATIVE_ISA=.* is not one of scalar, avx2"):
        assert config.choice("TALLOW_NATIVE_ISA", ("scalar", "avx2"), None, value) is None


def test_no_native_is_a_flag(monkeypatch):
    from tallow.backends.cpu import native

    monkeypatch.setenv("TALLOW_NO_NATIVE", "1")
    assert native.disabled() and not native.available()
    monkeypatch.setenv("TALLOW_NO_NATIVE", "off")
    assert not native.disabled()


# ------------------------------------------------------------------- the settings object
def test_every_switch_is_listed_once_with_its_doc():
    fields = [s.field for s in config.SWITCHES]
    assert len(set(fields)) == len(fields) and len(set(config.VARIABLES)) == len(config.VARIABLES)
    for s in config.SWITCHES:
        assert s.doc and config.__doc__.count(f"``{s.variable}``") == 1
        assert getattr(type(config.settings), s.field).__doc__ == s.doc


def test_settings_read_the_environment_at_each_access(monkeypatch):
    monkeypatch.setenv("TALLOW_NO_NATIVE", "yes")
    assert config.settings.no_native is True
    monkeypatch.setenv("TALLOW_NO_NATIVE", "0")
    assert config.settings.no_native is False
    monkeypatch.delenv("TALLOW_NO_NATIVE")
    assert config.settings.no_native is False
    monkeypatch.setenv("TALLOW_HEAP_PAD", "2M")
    assert config.settings.heap_pad == 2 << 20
    monkeypatch.setenv("TALLOW_NATIVE_ISA", " AVX2 ")
    assert config.settings.native_isa == "avx2"


def test_an_invalid_value_warns_once_and_keeps_the_default(monkeypatch):
    monkeypatch.setenv("TALLOW_GPU_OPS_PER_SUBMIT", "many")
    with pytest.warns(RuntimeWarning, match="TALLOW_GPU_OPS_PER_SUBMIT='many'"):
        assert config.settings.gpu_ops_per_submit == config.default("gpu_ops_per_submit") == 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.settings.gpu_ops_per_submit == 50  # the same value: parsed once


def test_override_holds_values_inside_the_block_only(monkeypatch):
    monkeypatch.setenv("TALLOW_NO_NUMBA", "1")
    with config.settings.override(no_numba=False, native_isa="scalar"):
        assert config.settings.no_numba is False and config.settings.native_isa == "scalar"
        with config.settings.override(no_numba=True):
            assert config.settings.no_numba is True
        assert config.settings.no_numba is False
    assert config.settings.no_numba is True and config.settings.native_isa is None


def test_settings_refuse_unknown_fields_bad_choices_and_assignment():
    with pytest.raises(AttributeError, match="no setting 'no_natve'"):
        config.settings.no_natve
    with pytest.raises(AttributeError, match="no setting"):
        with config.settings.override(no_natve=True):
            pass
    with pytest.raises(ValueError, match="native_isa must be one of scalar, avx2, avx512vnni"):
        with config.settings.override(native_isa="sse"):
            pass
    with pytest.raises(AttributeError, match=r"settings.override\(no_native=...\)"):
        config.settings.no_native = True
