"""``tallow bench first-use``: what the first use of each kernel family costs
(module compile, pipeline build, the driver's own compile), against steady state,
in a fresh process and in a second one (candle's metal_first).

Each measurement runs in a child process: the device is created and timed, then
every family's op is timed once ("first", compiles included, up to the
``synchronize()`` that waits for it) and then ``later`` times more (median).
The first child runs with an empty driver shader cache directory (Mesa drivers:
``MESA_SHADER_CACHE_DIR``), the second reuses it: tallow's own caches are per
process (the wgpu package exposes no persistent pipeline cache), so what the
second process saves is the driver's cache. A second device in the same process
("dev2") has an empty tallow cache and shows the driver's in-process cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from .common import table, write_json

LATER = 5


def _families(tl, dev):
    x = tl.randn((512, 512), device=dev)
    y = tl.randn((512, 512), device=dev)
    z = tl.randn((500, 500), device=dev)
    dev.synchronize()
    cases = [
        ("add f32 [binary]", lambda: x.add(y)),
        ("mul f32 [same module]", lambda: x.mul(y)),
        ("exp f32 [unary]", lambda: x.exp()),
        ("matmul 512 [gemm]", lambda: x.matmul(y)),
        ("matmul 500 [new constants]", lambda: z.matmul(z)),
        ("sum_keepdim [reduce]", lambda: x.sum_keepdim(1)),
        ("softmax_last_dim [softmax]", lambda: _softmax(tl, x)),
        ("to_dtype f16 [cast]", lambda: x.to_dtype("f16")),
    ]
    cases += _quantized_kernels(tl, dev)
    qm = _qmatmul(tl, dev)
    if qm is not None:
        cases.append(("QMatMul q8_0 [quantized]", qm))
    return cases


def _quantized_kernels(tl, dev):
    """The GPU quantized kernels themselves (backends/gpu/quantized.py), 512 x 512
    Q4_0 and Q4K weights."""
    import numpy as np

    from tallow import dtype as dt
    from tallow.backends.gpu import quantized as oq
    from tallow.quantized import ggml_type

    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 512)).astype(np.float32)
    x1 = tl.randn((1, 512), device=dev)
    x32 = tl.randn((32, 512), device=dev)
    raws = {name: dev._state.from_numpy(ggml_type(name).quantize(w).reshape(-1), dt.u8)
            for name in ("Q4_0", "Q4K")}

    def qmm(name, x):
        return lambda: oq.qmatmul_t(x._storage, x.layout, raws[name], name, 512, 512)

    return [
        ("qmatmul_t q4_0 m=1 [quantized_matmul]", qmm("Q4_0", x1)),
        ("qmatmul_t q4_0 m=32 [new constants]", qmm("Q4_0", x32)),
        ("qmatmul_t q4k m=1 [quantized_matmul]", qmm("Q4K", x1)),
        ("dequantize q4k [quantized_dequantize]", lambda: oq.dequantize(raws["Q4K"], "Q4K", 512 * 512)),
    ]


def _softmax(tl, x):
    try:
        from tallow.nn.ops import softmax_last_dim
    except ImportError:
        return x._storage.softmax_last_dim(x.layout)
    return softmax_last_dim(x)


def _qmatmul(tl, dev):
    try:
        from tallow.quantized import QMatMul
    except ImportError:
        return None
    try:
        w = tl.randn((512, 512), device=tl.cpu).quantize("q8_0")
        qm = QMatMul.from_qtensor(w.to_device(dev) if hasattr(w, "to_device") else w)
        x = tl.randn((8, 512), device=dev)
        qm.forward(x)
    except Exception:
        return None
    return lambda: qm.forward(x)


def _timed(dev, fn):
    t0 = time.perf_counter()
    fn()
    dev.synchronize()
    first = time.perf_counter() - t0
    later = []
    for _ in range(LATER):
        t0 = time.perf_counter()
        fn()
        dev.synchronize()
        later.append(time.perf_counter() - t0)
    later.sort()
    return first, later[len(later) // 2]


def child() -> None:
    """Runs in the child: prints one JSON object."""
    t0 = time.perf_counter()
    import tallow as tl
    from tallow.backends.gpu import new_device_state

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    dev = tl.Device.gpu(0)
    t_dev = time.perf_counter() - t0
    rows = []
    for name, fn in _families(tl, dev):
        first, later = _timed(dev, fn)
        rows.append([name, first, later])
    t0 = time.perf_counter()
    dev2 = tl.Device.of(new_device_state(0))
    t_dev2 = time.perf_counter() - t0
    a = tl.randn((512, 512), device=dev2)
    dev2.synchronize()
    for name, fn in (("dev2: add f32", lambda: a.add(a)), ("dev2: matmul 512", lambda: a.matmul(a))):
        first, later = _timed(dev2, fn)
        rows.append([name, first, later])
    stats = dev.kernel_stats()
    print(json.dumps({"import_s": t_import, "device_s": t_dev, "device2_s": t_dev2, "rows": rows,
                      "kernel_stats": stats, "adapter": dev.info()["adapter"]}))


def _run_child(env):
    out = subprocess.run([sys.executable, "-m", "tallow.bench.first_use", "--child"], env=env,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"first-use child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args) -> int:
    import tallow as tl

    if not tl.utils.gpu_is_available():
        print("no WebGPU adapter: nothing to measure")
        return 0
    cache = tempfile.mkdtemp(prefix="tallow-driver-cache-")
    env = dict(os.environ, MESA_SHADER_CACHE_DIR=cache)
    src = os.path.abspath(os.path.join(os.path.dirname(tl.__file__), ".."))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    fresh = _run_child(env)
    second = _run_child(env)
    print(f"adapter: {fresh['adapter']}")
    print(f"Device.gpu(0): {fresh['device_s'] * 1e3:.1f} ms fresh, {second['device_s'] * 1e3:.1f} ms second "
          f"process; a second device in the process: {fresh['device2_s'] * 1e3:.1f} ms")
    rows = []
    for (name, f1, l1), (_, f2, l2) in zip(fresh["rows"], second["rows"]):
        rows.append([name, f1 * 1e3, l1 * 1e3, f2 * 1e3, l2 * 1e3])
    print(table(f"first use vs steady state (ms; later = median of {LATER}; 512x512 f32)",
                ["op [kernel family]", "fresh: first", "fresh: later", "second process: first",
                 "second: later"], rows))
    krows = [[name, s["compile_s"] * 1e3, s["pipeline_s"] * 1e3, s["pipelines"], s["misses"], s["hits"]]
             for name, s in sorted(fresh["kernel_stats"].items())]
    print(table("tallow's kernel cache in the fresh process (ms)",
                ["module", "compile", "pipelines build", "pipelines", "misses", "hits"], krows))
    write_json(getattr(args, "json", None), {"fresh": fresh, "second": second})
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
