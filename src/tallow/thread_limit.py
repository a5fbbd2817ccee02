"""The ceiling on tallow's CPU thread count: the CPUs this process may use.

More threads than usable CPUs only add start-up cost, memory and contention
(100,000 requested threads started hundreds for one multiply and took 80x longer),
so ``TALLOW_NUM_THREADS`` and ``set_num_threads`` are capped here, with a warning
saying so.
"""

from __future__ import annotations

import math
import os
import warnings


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, within a cgroup CPU quota."""
    from .backends.cpu.threads import affinity_cpus, cgroup_cpu_quota

    allowed = affinity_cpus()
    n = len(allowed) if allowed else (os.cpu_count() or 1)
    try:
        quota = cgroup_cpu_quota()
    except Exception:  # an unreadable cgroup tree: the mask alone
        quota = None
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def cap_threads(n: int, source: str) -> int:
    """``n``, or the usable CPU count when ``n`` exceeds it (with a RuntimeWarning)."""
    ceiling = usable_cpus()
    if n > ceiling:
        warnings.warn(
            f"{source} asks for {n} threads but this process can use {ceiling} CPUs; "
            f"using {ceiling}", RuntimeWarning, stacklevel=4)
        return ceiling
    return n
