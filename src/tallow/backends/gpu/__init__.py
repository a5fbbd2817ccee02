"""The GPU backend on WebGPU (the ``wgpu`` package): candle's Metal design in Python.

``gpu_device_state(ordinal)`` is the shared state behind ``Device.gpu(ordinal)``;
``adapter_available()`` says whether any adapter exists (a real GPU, or Mesa's
lavapipe on a machine without one).

``run_wgsl`` dispatches a user's WGSL kernel (for custom ops' ``gpu_fwd``).
"""

from .custom import run_wgsl
from .device import adapter_available, adapters, gpu_device_state, new_device_state

__all__ = ["adapter_available", "adapters", "gpu_device_state", "new_device_state", "run_wgsl"]
