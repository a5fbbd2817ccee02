"""Shared pieces of the adversarial suite: devices and the dtype lists."""

from __future__ import annotations

import os

import pytest

import tallow as tl

ALL = [tl.u8, tl.u32, tl.i64, tl.f16, tl.bf16, tl.f32, tl.f64]
FLOATS = [tl.f16, tl.bf16, tl.f32, tl.f64]
INTS = [tl.u8, tl.u32, tl.i64]

REQUIRE_GPU = os.environ.get("TALLOW_REQUIRE_GPU") == "1" or os.environ.get("CI") == "true"


def gpu_or_skip():
    """The first GPU, or a skip (a failure where CI requires a GPU)."""
    if tl.utils.gpu_is_available():
        return tl.Device.gpu(0)
    if REQUIRE_GPU:
        pytest.fail("no WebGPU adapter, and TALLOW_REQUIRE_GPU / CI requires one")
    pytest.skip("no WebGPU adapter")


DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def device_of(name):
    return tl.cpu if name == "cpu" else gpu_or_skip()
