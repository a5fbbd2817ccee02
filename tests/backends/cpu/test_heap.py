"""``backends/cpu/heap.py``: glibc's malloc keeps ``TALLOW_HEAP_PAD`` bytes of slack at
the top of the heap (set once per process, when the CPU device is made)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_PROBE = ("from tallow.backends.cpu import heap; import tallow; "
          "print(heap._DONE['pad'])")


def _pad_in_child(env_value):
    import os

    env = dict(os.environ)
    env.pop("TALLOW_HEAP_PAD", None)
    if env_value is not None:
        env["TALLOW_HEAP_PAD"] = env_value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_default_pad_is_set_on_glibc():
    from tallow.backends.cpu import heap

    assert _pad_in_child(None) == heap.DEFAULT_PAD
    assert _pad_in_child("4M") == 4 << 20


def test_zero_leaves_malloc_alone():
    assert _pad_in_child("0") == 0
