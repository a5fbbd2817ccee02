"""Step counts for the examples: full by default, tiny when TALLOW_EXAMPLE_STEPS is set (tests)."""

import os


def steps(default: int) -> int:
    """The number of training steps: ``TALLOW_EXAMPLE_STEPS`` if set, else ``default``."""
    return int(os.environ.get("TALLOW_EXAMPLE_STEPS", default))
