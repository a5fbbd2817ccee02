"""Captured-step mode: ``tl.compile(fn)`` records the backend calls of a function once
per argument signature and replays them, fused and without per-op Python work.

One idea per module: ``signature`` (what a recording is keyed by), ``recorder``
(capturing one call), ``plan`` (the generated replay), ``elementwise`` (which
calls fuse), ``fusion_cpu`` and ``cpu_kernel`` (fused chains on the CPU, one numba
kernel), ``fusion_gpu`` (fused chains on the GPU, one generated WGSL kernel each),
``api`` (the cache and the public function).
"""

from .api import CompiledFunction, compile  # noqa: A004

__all__ = ["compile", "CompiledFunction"]
