"""What the wheel must carry, checked from pyproject.toml (building one is slow):
every shader the GPU backend loads, and a ``tallow`` entry point that resolves."""

import fnmatch
import importlib
import os
import tomllib

import tallow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.dirname(tallow.__file__)


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_every_shader_is_package_data():
    globs = pyproject()["tool"]["setuptools"]["package-data"]["tallow"]
    shaders = []
    for d, _, files in os.walk(PKG):
        shaders += [os.path.relpath(os.path.join(d, f), PKG).replace(os.sep, "/")
                    for f in files if f.endswith(".wgsl")]
    assert shaders
    missing = [s for s in shaders if not any(fnmatch.fnmatch(s, g) for g in globs)]
    assert missing == []


def test_every_package_has_an_init():
    """setuptools' find_packages skips folders without __init__.py (their modules
    would be left out of the wheel); only data folders may lack one."""
    bare = []
    for d, dirs, files in os.walk(PKG):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        if any(f.endswith(".py") for f in files) and "__init__.py" not in files:
            bare.append(d)
    assert bare == []


def test_entry_point_resolves():
    scripts = pyproject()["project"]["scripts"]
    module, _, attr = scripts["tallow"].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))


def test_extras_and_minimum_versions():
    project = pyproject()["project"]
    assert {"test", "models", "bench"} <= set(project["optional-dependencies"])
    for req in project["dependencies"]:
        assert ">=" in req, f"{req}: a dependency needs a minimum version"
