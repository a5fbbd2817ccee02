"""The kernel cache: modules compiled once per file and dtype, pipelines per
(entry point, override constants), timings and hit / miss counts, and compiles
that do not block ops whose pipelines exist."""

import threading
import time

import pytest

import tallow as tl
from tallow.backends.gpu import new_device_state
from tallow.backends.gpu.kernels import WGSL_DIR, preprocess

pytestmark = pytest.mark.gpu


def test_wgsl_sources_ship_with_the_package():
    names = {p.name for p in WGSL_DIR.glob("*.wgsl")}
    for family in ("common", "math", "map", "unary", "binary", "cmp", "where", "cast", "copy",
                   "reduce", "softmax", "scan", "sort", "index", "gemm", "conv", "random", "check"):
        assert f"{family}.wgsl" in names


def test_preprocessor():
    src = "a\n//#if X\nb\n//#elif Y\nc\n//#else\nd\n//#endif\ne"
    assert preprocess(src, {"X": True}).split() == ["a", "b", "e"]
    assert preprocess(src, {"Y": True}).split() == ["a", "c", "e"]
    assert preprocess(src, {}).split() == ["a", "d", "e"]
    nested = "//#if A\n//#if B\nx\n//#endif\ny\n//#endif\nz"
    assert preprocess(nested, {"A": True}).split() == ["y", "z"]
    assert preprocess(nested, {"A": True, "B": True}).split() == ["x", "y", "z"]
    assert preprocess(nested, {"B": True}).split() == ["z"]


def test_kernel_stats_misses_then_hits():
    dev = tl.Device.of(new_device_state(0))
    assert dev.kernel_stats() == {}
    x = tl.ones((8,), device=dev)
    y = x + x
    st = dev.kernel_stats()["binary.wgsl<f32>"]
    assert st["pipelines"] == 1 and st["misses"] == 1 and st["hits"] == 0
    assert st["compile_s"] > 0 and st["pipeline_s"] > 0
    for _ in range(3):
        y = y + x
    st = dev.kernel_stats()["binary.wgsl<f32>"]
    assert st["pipelines"] == 1 and st["hits"] == 3
    y = y * x  # same module, another override constant: a new pipeline, no recompile
    st2 = dev.kernel_stats()["binary.wgsl<f32>"]
    assert st2["pipelines"] == 2 and st2["misses"] == 2 and st2["compile_s"] == st["compile_s"]
    z = x.to_dtype("f16") + x.to_dtype("f16")  # another dtype: another module
    assert "binary.wgsl<f16>" in dev.kernel_stats()
    assert y.values()[0] == 5.0 and z.values()[0] == 2.0


def test_matmul_alignment_constants_make_new_pipelines():
    dev = tl.Device.of(new_device_state(0))
    a = tl.ones((128, 128), device=dev)  # a multiple of every tile
    (a @ a).values()
    b = tl.ones((50, 50), device=dev)
    (b @ b).values()
    st = dev.kernel_stats()["gemm.wgsl<f32>"]
    assert st["pipelines"] == 2  # aligned and unaligned variants of one module
    keys = [k for k in dev._state.kernels._pipes if k[0] == "gemm"]
    aligned = {dict(k[3])["ALIGNED"] for k in keys}
    assert aligned == {True, False}


def test_compiling_does_not_block_built_pipelines():
    state = new_device_state(0)
    dev = tl.Device.of(state)
    x = tl.ones((1000,), device=dev)
    (x + x).values()  # binary<f32> built
    real = state.device.create_shader_module
    started = threading.Event()

    def slow_compile(**kw):
        started.set()
        time.sleep(1.5)
        return real(**kw)

    state.device.create_shader_module = slow_compile
    try:
        t = threading.Thread(target=lambda: x.exp().values())  # unary<f32>: compiles
        t.start()
        assert started.wait(10)
        t0 = time.perf_counter()
        y = x + x
        for _ in range(5):
            y = y + x
        assert y.values()[0] == 7.0
        elapsed = time.perf_counter() - t0
        t.join()
    finally:
        state.device.create_shader_module = real
    assert elapsed < 1.0, f"an op with a built pipeline waited {elapsed:.2f}s for a compile"


def test_second_device_has_its_own_cache(gpu):
    d1 = tl.Device.of(new_device_state(0))
    d2 = tl.Device.of(new_device_state(0))
    (tl.ones((4,), device=d1).exp()).values()
    assert "unary.wgsl<f32>" in d1.kernel_stats()
    assert "unary.wgsl<f32>" not in d2.kernel_stats()


def test_families_sharing_a_file_keep_their_own_statistics():
    # fill, copy and copy_into all build from copy.wgsl: one name for all three would
    # leave the statistics of the last module built only.
    dev = tl.Device.of(new_device_state(0))
    t = tl.full((4, 4), 2.0, device=dev)  # fill
    c = t.t().contiguous()  # copy
    t[1:3] = c[0:2]  # copy_into
    t.values()
    stats = dev.kernel_stats()
    for name in ("copy.wgsl<f32>", "copy.wgsl[fill]<f32>", "copy.wgsl[copy_into]<f32>"):
        assert stats[name]["pipelines"] >= 1, name
