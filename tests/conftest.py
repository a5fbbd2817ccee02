"""Shared fixtures: the ``device`` fixture runs a test on the CPU and on the GPU.

The GPU is WebGPU: a real adapter or Mesa's lavapipe. Where none is found the GPU
cases skip, except when ``TALLOW_REQUIRE_GPU=1`` or ``CI=true``: then a missing
adapter is a failure, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tallow as tl

# The model fixtures, shared by tests/models, tests/cli and tests/bench.
from support.model_fixtures import minilm_dir, smollm2_gguf, st_minilm, tiny_bert_dir, tiny_llama  # noqa: F401

REQUIRE_GPU = os.environ.get("TALLOW_REQUIRE_GPU") == "1" or os.environ.get("CI") == "true"


def pytest_configure(config):
    # tallow's filter of NumPy's floating-point warnings (tallow/float_warnings.py),
    # added where pytest's own warning contexts start from: one added while a module
    # imports tallow during collection is dropped with the collection's context.
    from tallow import float_warnings

    float_warnings.install()


# Tests of models fetched with `tallow models fetch` (hundreds of MB, minutes per test)
# run only when asked: `TALLOW_TEST_FETCHED=1 pytest -m fetched tests`.
RUN_FETCHED = os.environ.get("TALLOW_TEST_FETCHED") == "1"


def pytest_collection_modifyitems(config, items):
    if RUN_FETCHED:
        return
    skip = pytest.mark.skip(reason="a fetched real model: set TALLOW_TEST_FETCHED=1 to run it")
    for item in items:
        if "fetched" in item.keywords:
            item.add_marker(skip)


def gpu_or_skip():
    if tl.utils.gpu_is_available():
        return tl.Device.gpu(0)
    if REQUIRE_GPU:
        pytest.fail("no WebGPU adapter, and TALLOW_REQUIRE_GPU / CI requires one")
    pytest.skip("no WebGPU adapter")


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "cpu":
        return tl.cpu
    return gpu_or_skip()


@pytest.fixture
def gpu():
    return gpu_or_skip()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def override_settings():
    """``override_settings(no_native=True, ...)``: ``tallow.config.settings.override``
    held until the test ends (how a test switches tallow's paths)."""
    import contextlib

    from tallow import config

    with contextlib.ExitStack() as stack:
        yield lambda **values: stack.enter_context(config.settings.override(**values))


def device_supports(device, dtype) -> bool:
    return device.supports_dtype(dtype)


def skip_unsupported(device, dtype):
    if not device.supports_dtype(dtype):
        pytest.skip(f"{device} has no {dtype}")
