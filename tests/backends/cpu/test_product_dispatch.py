"""Which kernel multiplies f32 matrices: tallow's own on x86, the system BLAS (NumPy's
matmul) on every other machine and when the native kernel is switched off; one
function (gemm.product_kernel) decides, and the products are right either way."""

import numpy as np
import pytest

import tallow as tl
from tallow import config
from tallow.backends.cpu import gemm

F = np.float32
SHAPES = [((64, 256), (256, 256)), ((3, 70, 40), (40, 90)), ((130, 20), (20, 600)), ((1, 5), (5, 7))]


@pytest.fixture
def blas_calls(monkeypatch):
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def check(a, b, got):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    assert np.all(np.abs(got - ref) <= a.shape[-1] * np.finfo(F).eps * scale)


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le", "riscv64", "s390x"])
def test_other_machines_multiply_with_the_system_blas(machine, monkeypatch, blas_calls):
    monkeypatch.setattr(gemm.platform, "machine", lambda: machine)
    monkeypatch.setattr(gemm, "_native_on", None)  # decided again at the next product
    assert gemm.product_kernel() == "blas"
    rng = np.random.default_rng(0)
    for sa, sb in SHAPES:
        a, b = rng.standard_normal(sa).astype(F), rng.standard_normal(sb).astype(F)
        blas_calls.clear()
        got = gemm.matmul(a, b)
        assert blas_calls, f"{sa} @ {sb} did not reach NumPy's matmul"
        check(a, b, got)
    assert not gemm.native_available()
    # and through the Tensor API
    a, b = rng.standard_normal((64, 96)).astype(F), rng.standard_normal((96, 128)).astype(F)
    blas_calls.clear()
    check(a, b, (tl.Tensor(a) @ tl.Tensor(b)).numpy())
    assert blas_calls


@pytest.mark.parametrize("machine", ["x86_64", "AMD64", "i686"])
def test_x86_machines_use_the_native_kernel_when_built(machine, monkeypatch):
    monkeypatch.setattr(gemm.platform, "machine", lambda: machine)
    built = gemm.loader.built("_gemm") is not None
    assert gemm.product_kernel() == ("native" if built else "blas")


@pytest.mark.parametrize("switch", ["no_native_gemm", "no_native"])
def test_the_switches_send_x86_products_to_blas(switch, monkeypatch, blas_calls):
    monkeypatch.setattr(gemm, "_native_on", None)
    with config.settings.override(**{switch: True}):
        assert gemm.product_kernel("x86_64") == "blas"
        a = np.ones((64, 256), F)
        np.testing.assert_array_equal(gemm.matmul(a, a.T), np.full((64, 64), 256, F))
    assert blas_calls
