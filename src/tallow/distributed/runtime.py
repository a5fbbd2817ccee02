"""Joining a Ray cluster, or starting a private local one.

Ray is an optional dependency (``pip install 'tallow[distributed]'``): nothing here
imports it at module level, and ``import tallow`` never loads this package.

The local runtime tallow starts is for one user on one machine: no dashboard,
token authentication on, and the head asked to use the loopback address. Ray
itself decides where its processes listen (docs/distributed.md has the details):
a cluster of several machines is the user's to set up and to protect.
"""

from __future__ import annotations

import os

from ..errors import DistributedError

# Ray 2.52 added token authentication (RAY_AUTH_MODE=token); by 2.60 a local
# ray.init() turns it on unless the user set RAY_AUTH_MODE themselves.
MIN_RAY = (2, 60)
INSTALL_HINT = "pip install 'tallow[distributed]'"
LOOPBACK = "127.0.0.1"


def import_ray():
    """The ``ray`` module, or a ``DistributedError`` saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401  (the Data library is the part tallow uses)
    except ImportError as e:
        raise DistributedError(f"distributed embedding needs Ray Data ({INSTALL_HINT}): {e}") from None
    version = tuple(int(p) for p in ray.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_RAY:
        raise DistributedError(f"Ray {ray.__version__} is too old: tallow needs Ray >= "
                               f"{'.'.join(map(str, MIN_RAY))} ({INSTALL_HINT})")
    return ray


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota:
        n = min(n, max(1, int(quota)))
    return max(1, n)


def _cgroup_quota():
    try:
        from ..backends.cpu.threads import cgroup_cpu_quota
    except ImportError:  # the thread-policy module moved or went: no quota known
        return None
    return cgroup_cpu_quota()


def local_init_kwargs(num_cpus: int | None = None, num_gpus: int | None = None) -> dict:
    """The ``ray.init`` arguments of the local runtime tallow starts.

    No dashboard (its HTTP server is the usual way into an exposed Ray), and any
    dashboard a later change turns on would bind to loopback; the node address is
    loopback; logs of the workers stay in Ray's log files rather than on the
    user's terminal."""
    kwargs = dict(
        # "local": always a new runtime, even where RAY_ADDRESS names a cluster.
        address="local",
        num_cpus=usable_cpus() if num_cpus is None else int(num_cpus),
        include_dashboard=False,
        dashboard_host=LOOPBACK,
        _node_ip_address=LOOPBACK,
        log_to_driver=False,
        logging_level="warning",
        configure_logging=True,
    )
    if num_gpus is not None:
        kwargs["num_gpus"] = int(num_gpus)
    return kwargs


def connect(address: str | None = None, *, num_cpus: int | None = None,
            num_gpus: int | None = None):
    """Join the Ray cluster at ``address`` (``"auto"``, ``"host:port"`` or
    ``"ray://host:port"``), or with ``address=None`` start a local runtime on this
    machine's usable CPUs (``num_cpus`` to override). A process already connected to
    Ray keeps its connection. Returns the ``ray`` module."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    try:
        if address is None:
            ray.init(**local_init_kwargs(num_cpus, num_gpus))
            if not local_runtime_authenticated():
                import warnings

                warnings.warn("the local Ray runtime runs without token authentication "
                              f"(RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}): any process "
                              "that reaches its ports can run code as this user", stacklevel=2)
        else:
            ray.init(address=address, log_to_driver=False, logging_level="warning")
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "a local Ray runtime" if address is None else f"the Ray cluster at {address}"
        raise DistributedError(f"could not start or join {where}: {e}") from None
    return ray


def local_runtime_authenticated() -> bool:
    """Whether the running local runtime asks every connection for Ray's token
    (ray.init sets RAY_AUTH_MODE=token in this process when it turns it on)."""
    return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


def cluster_cpus_gpus(ray) -> tuple:
    """(CPUs, GPUs) the connected cluster has in total."""
    res = ray.cluster_resources()
    return float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
