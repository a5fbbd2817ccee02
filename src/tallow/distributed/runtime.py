"""Joining a Ray cluster, or starting a private local one.

Ray is an optional dependency (``pip install 'tallow[distributed]'``): nothing here
imports it at module level, and ``import tallow`` never loads this package.

The local runtime tallow starts is for one user on one machine: no dashboard,
token authentication on, and every process of it listening on the loopback
address only (docs/distributed.md has the details). A cluster of several
machines is the user's to set up and to protect.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import warnings

from ..errors import DistributedError

# Ray 2.52 added token authentication (RAY_AUTH_MODE=token); by 2.60 a local
# ray.init() turns it on unless the user set RAY_AUTH_MODE themselves.
MIN_RAY = (2, 60)
INSTALL_HINT = "pip install 'tallow[distributed]'"
LOOPBACK = "127.0.0.1"
# Joining a cluster: ray.init waits minutes, silently, for a cluster that is gone
# or that it cannot reach; tallow gives up after this many seconds.
DEFAULT_CONNECT_TIMEOUT = 60.0
PROBE_TIMEOUT = 5.0


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
    loopback (which Ray keeps only inside ``node_address_stays_loopback()``, as
    ``connect`` starts it); logs of the workers stay in Ray's log files rather than
    on the user's terminal."""
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


def cluster_address(address: str) -> tuple:
    """(host, port, where it came from) of the cluster ``address`` names: "auto" is
    RAY_ADDRESS or the address the last ``ray start`` on this machine recorded."""
    given = address
    source = f"--ray {given}"
    if address == "auto":
        from ray._private import services

        try:
            address = services.get_ray_address_from_environment("auto", None)
        except ConnectionError:
            raise DistributedError(
                "--ray auto: no Ray cluster found on this machine (no RAY_ADDRESS, no running "
                "'ray start'); start one with 'ray start --head', give its address, or leave "
                "--ray without an address for a private local runtime") from None
        source = f"--ray auto (found {address})"
    bare = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit():
        raise DistributedError(f"{source}: not a Ray address (auto, host:port or "
                               "ray://host:port)")
    return host.strip("[]"), int(port), source


def probe_cluster(address: str) -> tuple:
    """Fail at once, with the reason, where nothing listens at the cluster's address
    (a stopped cluster); returns (host, port)."""
    import socket

    host, port, source = cluster_address(address)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
            pass
    except OSError as e:
        raise DistributedError(
            f"{source}: no Ray cluster answers at {host}:{port} ({e.strerror or e}); is it "
            "running ('ray status' on its head node)?") from None
    return host, port


def _init_with_timeout(ray, timeout: float, **kwargs) -> None:
    """``ray.init(**kwargs)``, given up after ``timeout`` seconds (ray.init waits in
    C++ for an unreachable cluster, out of reach of signals: it runs in a daemon
    thread that the process leaves behind)."""
    import threading

    outcome = {}

    def run():
        try:
            ray.init(**kwargs)
            outcome["ok"] = True
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="tallow-ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise DistributedError(
            f"could not join the Ray cluster at {kwargs.get('address')} within {timeout:g} s "
            "(its processes may listen on addresses this machine cannot reach, e.g. a "
            "cluster started for loopback only on another machine, or its token "
            "authentication may refuse this process: see docs/distributed.md)")
    if "error" in outcome:
        raise outcome["error"]


def connect(address: str | None = None, *, num_cpus: int | None = None,
            num_gpus: int | None = None, timeout: float = DEFAULT_CONNECT_TIMEOUT):
    """Join the Ray cluster at ``address`` (``"auto"``, ``"host:port"`` or
    ``"ray://host:port"``), or with ``address=None`` start a local runtime on this
    machine's usable CPUs (``num_cpus`` to override). A process already connected to
    Ray keeps its connection. Joining fails at once where nothing listens at the
    address, and after ``timeout`` seconds where the cluster does not answer.
    Returns the ``ray`` module."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    try:
        if address is None:
            with node_address_stays_loopback():
                ray.init(**local_init_kwargs(num_cpus, num_gpus))
            if not local_runtime_on_loopback(ray):
                warnings.warn("the local Ray runtime did not keep the loopback node address: "
                              "its processes listen on every interface", stacklevel=2)
            if not local_runtime_authenticated():
                warnings.warn("the local Ray runtime runs without token authentication "
                              f"(RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}): any process "
                              "that reaches its ports can run code as this user", stacklevel=2)
        else:
            probe_cluster(address)
            _init_with_timeout(ray, float(timeout), address=address, log_to_driver=False,
                               logging_level="warning")
    except DistributedError:
        raise
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "a local Ray runtime" if address is None else f"the Ray cluster at {address}"
        raise DistributedError(f"could not start or join {where}: {e}") from None
    return ray


@contextlib.contextmanager
def node_address_stays_loopback():
    """Keep Ray from swapping the loopback node address for a routable one while
    ``ray.init`` starts a local runtime.

    Every listening socket of a Ray node follows its node address: the gRPC
    servers of the GCS, the raylet (node and object manager), the workers, the
    driver and the dashboard agent (metrics) bind 127.0.0.1 when the node address
    is a loopback one and all interfaces otherwise; the runtime-env agent and the
    agent's HTTP server bind the node address itself. But on Linux ``ray.init``
    replaces ``_node_ip_address="127.0.0.1"`` by the address the machine would
    reach the internet from (``services.resolve_ip_for_localhost`` ->
    ``get_node_ip_address``), unless Ray's single-machine switch is set: the
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` of macOS and Windows, where a local
    runtime always listens on loopback. Ray reads that variable once, when it is
    imported, into ``ray_constants.ENABLE_RAY_CLUSTER``; this sets the constant to
    False for the start-up only (workers get the node address from the raylet), so
    a later ``ray.init(address=...)`` in the same process joins clusters as usual.
    """
    try:
        from ray._private import ray_constants
    except ImportError:
        ray_constants = None
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield  # a Ray without the switch: connect() checks the address it got
        return
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (IPv4, IPv6, or IPv4 mapped into IPv6)."""
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host == "localhost"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def local_runtime_on_loopback(ray) -> bool:
    """Whether the runtime this process started kept a loopback node address
    (and so has every process of it listening on loopback only)."""
    return is_loopback(ray.util.get_node_ip_address())


def local_runtime_authenticated() -> bool:
    """Whether the running local runtime asks every connection for Ray's token
    (ray.init sets RAY_AUTH_MODE=token in this process when it turns it on)."""
    return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


def cluster_cpus_gpus(ray) -> tuple:
    """(CPUs, GPUs) the connected cluster has in total."""
    res = ray.cluster_resources()
    return float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
