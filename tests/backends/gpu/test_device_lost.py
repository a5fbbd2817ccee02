"""A lost device (here destroyed on purpose; on a real GPU, a driver failure or a
reset) gives one clear error, DeviceLostError, whatever the op runs into first."""

import numpy as np
import pytest

import tallow as tl
from tallow.backends.gpu import new_device_state

pytestmark = pytest.mark.gpu


def test_every_path_after_the_loss_says_the_device_is_lost(gpu):
    state = new_device_state(0)
    dev = tl.Device.of(state)
    x = tl.ones((8,), device=dev)
    w = tl.ones((8, 3), device=dev)
    assert (x + x).values() == [2.0] * 8
    state.device.destroy()
    cases = {
        "submit": lambda: (x + x).values(),  # a pipeline built before the loss
        "allocate": lambda: tl.ones((8,), device=dev).values(),
        "compile": lambda: x.exp().values(),  # a kernel never built on this device
        "read back": lambda: x.values(),
        "matmul": lambda: (x.reshape((1, 8)) @ w).values(),
        "upload": lambda: tl.tensor(np.arange(4.0), device=dev).values(),
    }
    for name, case in cases.items():
        with pytest.raises(tl.DeviceLostError, match=r"gpu:0 .* is lost") as info:
            case()
        assert isinstance(info.value, tl.TallowError), name
    # Other devices are untouched.
    assert (tl.ones((2,), device=gpu) * 3).values() == [3.0, 3.0]


def test_an_upload_into_a_reused_buffer_says_the_device_is_lost(gpu):
    """An upload whose buffer the pool reuses makes no allocation: the buffer write is
    the first call to meet the lost device, and it too says DeviceLostError."""
    import gc

    state = new_device_state(0)
    dev = tl.Device.of(state)
    for _ in range(3):  # freed buffers of this size wait in the pool
        tl.tensor(np.arange(4.0, dtype=np.float32), device=dev).values()
    gc.collect()
    state.device.destroy()
    with pytest.raises(tl.DeviceLostError, match=r"gpu:0 .* is lost: uploading 16 bytes failed"):
        tl.tensor(np.arange(4.0, dtype=np.float32), device=dev)
