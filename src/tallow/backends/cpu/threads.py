"""How many threads the CPU backend uses, and why.

candle takes the machine's physical core count and ignores the limits a container
sets (its docs measure 24 threads fighting over a 4-CPU quota, 4x slower than one
thread). Here the default is the smallest of

* the CPUs in this process's affinity mask (``sched_getaffinity``),
* the cgroup CPU quota, rounded up (v2 ``cpu.max``; v1 ``cpu.cfs_quota_us`` /
  ``cpu.cfs_period_us``), the tightest one on the path from the process's cgroup
  up to the root,
* the physical cores among the allowed CPUs (hyper-threads share a core's units),

and ``TALLOW_NUM_THREADS`` overrides it (an invalid value warns and is ignored).
The readers take their roots as arguments so tests can point them at fake trees.
"""

from __future__ import annotations

import math
import operator
import os
import threading
import warnings

from ... import config

ENV_VAR = "TALLOW_NUM_THREADS"
BLAS_THREADS = 1  # NumPy's BLAS runs on the calling thread only (see ThreadConfig.apply)


def affinity_cpus() -> set | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):  # garbage bytes count as unreadable, not a crash
        return None


def _cgroup_paths(proc_self_cgroup: str) -> dict:
    """controller -> cgroup path, from /proc/self/cgroup ("" is the v2 unified entry)."""
    text = _read(proc_self_cgroup) or ""
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _ancestors(root: str, rel: str):
    """root/rel, root/parent(rel), ..., root: the files governing this cgroup."""
    # ".." segments (a cgroup outside this namespace shows as "/../..") would climb
    # above the mount point and read files that govern nothing: drop them.
    parts = [p for p in rel.split("/") if p not in ("", ".", "..")]
    for i in range(len(parts), -1, -1):
        yield os.path.join(root, *parts[:i])


def cgroup_cpu_quota(cgroup_root: str = "/sys/fs/cgroup",
                     proc_self_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The tightest CPU quota (in CPUs, may be fractional) over the cgroup's path, or None."""
    paths = _cgroup_paths(proc_self_cgroup)
    quotas = []
    # cgroup v2: one unified hierarchy, cpu.max = "<quota|max> <period>".
    if "" in paths:
        for d in _ancestors(cgroup_root, paths[""]):
            text = _read(os.path.join(d, "cpu.max"))
            if text:
                fields = text.split()
                if len(fields) >= 2 and fields[0] != "max":
                    try:
                        q, p = int(fields[0]), int(fields[1])
                        if q > 0 and p > 0:
                            quotas.append(q / p)
                    except ValueError:
                        pass
    # cgroup v1: the cpu controller, mounted as cpu, cpu,cpuacct or cpuacct,cpu.
    if "cpu" in paths:
        for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            base = os.path.join(cgroup_root, mount)
            if not os.path.isdir(base):
                continue
            for d in _ancestors(base, paths["cpu"]):
                q = _read(os.path.join(d, "cpu.cfs_quota_us"))
                p = _read(os.path.join(d, "cpu.cfs_period_us"))
                try:
                    qi, pi = int(q), int(p)
                except (TypeError, ValueError):
                    continue
                if qi > 0 and pi > 0:
                    quotas.append(qi / pi)
            break
    return min(quotas) if quotas else None


def physical_cores(allowed: set | None, sys_cpu: str = "/sys/devices/system/cpu",
                   proc_cpuinfo: str = "/proc/cpuinfo") -> int | None:
    """Distinct physical cores among the ``allowed`` logical CPUs (all if None)."""
    cores = set()
    unknown = 0  # allowed CPUs without readable topology: each counted as its own core
    try:
        names = os.listdir(sys_cpu)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        cpu = int(name[3:])
        if allowed is not None and cpu not in allowed:
            continue
        topo = os.path.join(sys_cpu, name, "topology")
        sib = _read(os.path.join(topo, "core_cpus_list")) or _read(
            os.path.join(topo, "thread_siblings_list"))
        if sib is None:
            pkg, core = _read(os.path.join(topo, "physical_package_id")), _read(
                os.path.join(topo, "core_id"))
            if pkg is None or core is None:
                unknown += 1
                continue
            cores.add((pkg.strip(), core.strip()))
        else:
            cores.add(sib.strip())
    if cores:
        return len(cores) + unknown
    # Fallback: /proc/cpuinfo's (physical id, core id) pairs.
    text = _read(proc_cpuinfo)
    if not text:
        return None
    pairs, cur, proc = set(), {}, None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if "core id" in cur and (allowed is None or proc in allowed):
                pairs.add((cur.get("physical id", "0"), cur["core id"]))
            cur, proc = {}, None
            continue
        key, _, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if key == "processor" and val.isdigit():
            proc = int(val)
        cur[key] = val
    return len(pairs) or None


def detect_default(cgroup_root: str = "/sys/fs/cgroup",
                   proc_self_cgroup: str = "/proc/self/cgroup",
                   sys_cpu: str = "/sys/devices/system/cpu",
                   proc_cpuinfo: str = "/proc/cpuinfo",
                   allowed: set | None = None) -> tuple:
    """``(threads, rule, details)``: the default count and the rule that chose it."""
    if allowed is None:
        allowed = affinity_cpus()
    candidates = []
    details = {}
    if allowed:
        candidates.append((len(allowed), "cpu affinity mask"))
        details["affinity"] = len(allowed)
    quota = cgroup_cpu_quota(cgroup_root, proc_self_cgroup)
    if quota is not None:
        candidates.append((max(1, math.ceil(quota)), "cgroup cpu quota"))
        details["cgroup_quota"] = quota
    phys = physical_cores(allowed, sys_cpu, proc_cpuinfo)
    if phys:
        candidates.append((phys, "physical cores"))
        details["physical_cores"] = phys
    if not candidates:
        n = os.cpu_count() or 1
        return n, "os.cpu_count", details
    n, rule = min(candidates, key=lambda c: c[0])
    return max(1, n), rule, details


def parse_env(value=config.FROM_ENV):
    """The thread count a ``TALLOW_NUM_THREADS`` value asks for, or None (unset; or
    invalid: then a warning, see tallow.config)."""
    return config.count(ENV_VAR, None, value, minimum=1, default_text="the detected default")


class ThreadConfig:
    """The process-wide thread setting (count, rule) and its application to BLAS."""

    def __init__(self):
        self._lock = threading.Lock()
        self._count = None
        self._rule = None
        self._details = {}
        self._applied = None

    def _resolve(self):
        if self._count is None:
            n, rule, details = detect_default()
            env = parse_env()
            if env is not None:

                n, rule = cap_threads(env, ENV_VAR), f"{ENV_VAR} environment variable"
            self._count, self._rule, self._details = n, rule, details

    def get(self) -> int:
        if self._count is None:
            with self._lock:
                self._resolve()
        if self._applied is None:  # whatever asks first settles BLAS (see apply)
            self.apply()
        return self._count

    def rule(self) -> str:
        self.get()
        return self._rule

    def details(self) -> dict:
        self.get()
        return dict(self._details)

    def set(self, n: int) -> None:
        # An integer, not anything int() takes: 2.5 or "4" silently truncated or parsed
        # hides a caller's mistake (and True is not a thread count).
        try:
            if isinstance(n, bool):
                raise TypeError
            n = operator.index(n)
        except TypeError:
            raise TypeError(
                f"set_num_threads: need an integer, got {type(n).__name__} {n!r}") from None
        if n < 1:
            raise ValueError(f"set_num_threads: need at least one thread, got {n}")

        n = cap_threads(n, "set_num_threads")
        with self._lock:
            self._count, self._rule = n, "set_num_threads"
            self._details = self._details or {}
            # Apply again even at an unchanged count: a BLAS loaded since the last call
            # has its own, unlimited, pool.
            self._applied = None
        self.apply()

    def apply(self) -> None:
        """Keep NumPy's BLAS on one thread (idempotent; cheap once done; done by the
        first ``get()``, so by any code that asks how many threads to use).

        BLAS's own worker threads spin-wait between and inside products; when
        another process takes a core they wait on a thread that is not running
        and a product takes 10-60x longer. tallow splits large products over
        its own pool instead (:mod:`tallow.backends.cpu.gemm`,
        :mod:`tallow.backends.cpu.native.pool`), so BLAS never needs more than
        the calling thread.
        """
        if self._count is None:
            with self._lock:
                self._resolve()
        n = self._count
        if self._applied == n:
            return
        with self._lock:
            try:
                from threadpoolctl import threadpool_limits

                threadpool_limits(limits=BLAS_THREADS, user_api="blas")
            except Exception:  # no BLAS pool to limit: nothing to apply
                pass
            self._applied = n

    def blas_info(self) -> list:
        try:
            from threadpoolctl import threadpool_info

            return [
                {k: d.get(k) for k in ("internal_api", "num_threads", "version", "architecture")}
                for d in threadpool_info()
            ]
        except Exception:
            return []


CONFIG = ThreadConfig()


def _after_fork_in_child():
    # A thread of the parent may have held the lock at the fork; it did not come along.
    CONFIG._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the ceiling: more threads than usable CPUs only add start-up cost, memory and
# contention (100,000 requested threads started hundreds for one multiply and took 80x
# longer), so TALLOW_NUM_THREADS and set_num_threads are capped, with a warning.

def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, within a cgroup CPU quota."""
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
