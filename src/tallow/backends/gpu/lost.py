"""A lost GPU device as one clear error.

When a driver fails (NVIDIA's compiler rejecting a shader did it), the GPU resets or
the device is destroyed, wgpu answers every later call with a validation error
naming whichever call came next ("In wgpuDeviceCreateBuffer: Parent device is
lost"), and a shader compiled after that looks broken. The places that create GPU
objects or submit work turn such an error into ``DeviceLostError``, which names the
device and what was being done.
"""

from __future__ import annotations

from ...errors import DeviceLostError


def is_lost(exc: BaseException) -> bool:
    """Whether a wgpu error says the device is gone."""
    text = str(exc).lower()
    return "device is lost" in text or "device lost" in text


def raise_if_lost(state, doing: str, exc: BaseException) -> None:
    """Raise ``DeviceLostError`` (from ``exc``) when ``exc`` says the device is gone, naming
    the device and what was being done; else return, for the caller to handle ``exc``."""
    if not is_lost(exc):
        return
    said = " ".join(str(exc).split())
    raise DeviceLostError(
        f"gpu:{state.ordinal} ({state.adapter_name}) is lost: {doing} failed. The device is "
        "gone (a driver failure, a GPU reset or destroy()), and nothing more can run on it "
        f"in this process. wgpu said: {said}") from exc
