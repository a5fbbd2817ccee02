"""Resource limits: thread ceilings, huge shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tallow as tl
from tallow.errors import TallowError
from tallow.backends.cpu.threads import usable_cpus


def _child(code, env=None):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_usable_cpus_is_the_affinity_mask_at_most():
    n = usable_cpus()
    assert 1 <= n <= (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count())


def test_env_thread_count_is_capped_with_a_warning():
    out, err = _child("import tallow as tl, threading, numpy as np\n"
                      "a = tl.ones((512, 512)); (a + a).sum_all()\n"
                      "print(tl.utils.get_num_threads(), threading.active_count())",
                      {"TALLOW_NUM_THREADS": "100000"})
    n, active = map(int, out.split())
    assert n == usable_cpus()
    assert active <= usable_cpus() + 8
    assert "100000" in err and "threads" in err


def test_set_num_threads_is_capped_with_a_warning():
    before = tl.utils.get_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match=r"asks for 100000000 threads .* using"):
            tl.utils.set_num_threads(10**8)
        assert tl.utils.get_num_threads() == usable_cpus()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tl.utils.set_num_threads(1)  # within the ceiling: no warning
        assert tl.utils.get_num_threads() == 1
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tl.utils.set_num_threads(before)


# -- huge shapes ---------------------------------------------------------------------------

from tallow.errors import ShapeTooLargeError  # noqa: E402


@pytest.mark.parametrize("make,op", [
    (lambda d: tl.zeros((2**64, 0), device=d), "zeros"),
    (lambda d: tl.zeros((2**40, 2**30), device=d), "zeros"),
    (lambda d: tl.ones((2**62,), device=d), "ones"),
    (lambda d: tl.rand((2**31, 2**31), device=d), "rand"),
    (lambda d: tl.full((2**61, 4), 1.0, device=d), "full"),
    (lambda d: tl.arange(0, 2**62, device=d), "arange"),
    (lambda d: tl.zeros((0,), device=d).reshape((2**70, 0)), "reshape"),
    (lambda d: tl.zeros((1,), device=d).broadcast_as((2**64,)), "broadcast_as"),
])
def test_huge_shapes_fail_up_front_naming_op_shape_and_limit(dev, make, op):
    with pytest.raises(ShapeTooLargeError) as e:
        make(dev)
    msg = str(e.value)
    assert msg.startswith(op) and "shape (" in msg and ("limit" in msg or "memory" in msg
                                                        or "largest buffer" in msg)


@pytest.mark.gpu
def test_gpu_reduction_over_a_huge_broadcast_view_is_refused():
    from support.adversarial import gpu_or_skip

    gpu = gpu_or_skip()
    view = tl.zeros((1,), device=gpu).broadcast_as((2**20, 2**20, 2**10))
    with pytest.raises(ShapeTooLargeError, match=r"sum.*\(1048576, 1048576, 1024\).*4294967295"):
        view.sum_all()
    with pytest.raises(TallowError):
        view.exp()
