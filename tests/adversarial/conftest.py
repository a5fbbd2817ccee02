"""Fixtures of the adversarial suite (self-contained, so the suite moves as one piece)."""

import pytest

from support.adversarial import DEVICES, device_of


@pytest.fixture(params=DEVICES)
def dev(request):
    """The CPU, then the GPU (skipped where no adapter exists)."""
    return device_of(request.param)
