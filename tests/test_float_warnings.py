"""IEEE special values pass silently, as in PyTorch (tallow/float_warnings.py): no
RuntimeWarning from the NumPy kernels behind tallow's ops, while the caller's own
NumPy calls keep theirs."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import tallow as tl
from tallow import float_warnings

INF = float("inf")


def _ops():
    a = tl.Tensor(np.array([INF, 1.0, 0.0, -INF], np.float32))
    big = tl.Tensor(np.full(5, 3e38, np.float32))
    wide = tl.Tensor(np.full((512, 512), INF, np.float32))  # large enough to be split over threads
    return {
        "inf - inf": (a - a).numpy(),
        "inf * 0": (a * 0.0).numpy(),
        "overflow": (big * big).numpy(),
        "sum of inf and -inf": a.sum_all().numpy(),
        "sum over a dim": (a.reshape((2, 2)) * a.reshape((2, 2))).sum(1).numpy(),
        "mean": a.mean().numpy(),
        "wide inf - inf": (wide - wide).sum_all().numpy(),
        "f64": (a.to_dtype(tl.f64) - a.to_dtype(tl.f64)).numpy(),
    }


def test_ieee_special_values_pass_silently_with_numpy_s_values():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # any warning left fails the test
        float_warnings.install()  # (ahead of that filter, as at import)
        got = _ops()
        with pytest.raises(RuntimeWarning, match="invalid value"):  # the caller's own NumPy warns
            np.array([INF]) - np.array([INF])
    x = np.array([INF, 1.0, 0.0, -INF], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got["inf - inf"], x - x)
        np.testing.assert_array_equal(got["inf * 0"], x * np.float32(0))
        np.testing.assert_array_equal(got["overflow"], np.full(5, np.inf, np.float32))
        assert np.isnan(got["sum of inf and -inf"]) and np.isnan(got["mean"]) and np.isnan(got["wide inf - inf"])
        np.testing.assert_array_equal(got["sum over a dim"], (x * x).reshape(2, 2).sum(1))
        np.testing.assert_array_equal(got["f64"], x.astype(np.float64) - x.astype(np.float64))


def test_the_filter_is_installed_at_import_even_under_w_error():
    code = (
        "import numpy as np, tallow as tl\n"
        "a = tl.Tensor(np.array([float('inf')], np.float32))\n"
        "print((a - a).sum_all().item())\n"
        "try:\n"
        "    np.array([np.inf]) - np.array([np.inf])\n"
        "except RuntimeWarning:\n"
        "    print('user numpy warned')\n"
    )
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nan", "user", "numpy", "warned"]
