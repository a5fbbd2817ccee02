"""Compute backends. ``base`` is the protocol; ``cpu`` and ``gpu`` implement it."""
