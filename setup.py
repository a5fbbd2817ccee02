"""Build of tallow's optional compiled CPU kernels (everything else is in pyproject.toml).

The extension is compiled for the baseline instruction set of the machine's
compiler; its SIMD functions carry target attributes and are chosen at run
time by CPU feature checks, so a wheel never needs ``-march=native``.  The
build is optional: without a C compiler tallow installs and uses its numba
and NumPy paths.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    flags = ["/O2", "/fp:precise"]
else:
    # No contraction of a * b + c into FMA: the kernels reproduce ggml's rounding.
    flags = ["-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-std=c11"]

setup(
    ext_modules=[
        Extension(
            f"tallow.backends.cpu.native.{name}",
            sources=[f"src/tallow/backends/cpu/native/{name}.c"],
            # shared helpers and the pool's interface (listed so that they ship in the sdist
            # and a change to them rebuilds the modules)
            depends=["src/tallow/backends/cpu/native/common.h", "src/tallow/backends/cpu/native/_workers.h",
                     "src/tallow/backends/cpu/native/_gemm.h", "src/tallow/backends/cpu/native/_kernels_body.h",
                     "src/tallow/backends/cpu/native/_kernels_tiled.h",
                     "src/tallow/backends/cpu/native/_ops_body.h", "src/tallow/backends/cpu/native/_gemm_body.h",
                     "src/tallow/backends/cpu/native/_vec_body.h", "src/tallow/backends/cpu/native/_vec_builds.h"],
            extra_compile_args=flags,
            optional=True,
        )
        for name in ("_workers", "_kernels", "_ops", "_conv", "_gemm", "_step", "_transpose", "_reduce")
    ]
)
