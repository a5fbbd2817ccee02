"""``tl.cuda``: what a PyTorch program asks before choosing its device.

tallow has no CUDA backend (its GPU backend is WebGPU: ``"gpu"``), so the usual first
line, ``device = "cuda" if torch.cuda.is_available() else "cpu"``, picks the CPU
unchanged; ``tl.utils.gpu_is_available()`` says whether ``"gpu"`` can be used."""

from __future__ import annotations


def is_available() -> bool:
    """False: tallow runs no CUDA device (use ``"gpu"`` for the WebGPU backend)."""
    return False


def device_count() -> int:
    return 0
