"""The default thread count respects affinity, cgroup quotas (v1 and v2) and cores."""

import os
import subprocess
import sys

import pytest

import tallow as tl
from tallow.backends.cpu import threads


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_sys(tmp_path, n_cpus, smt=1):
    sys_cpu = tmp_path / "sys"
    for cpu in range(n_cpus):
        core = cpu // smt
        sibs = ",".join(str(core * smt + i) for i in range(smt))
        write(sys_cpu / f"cpu{cpu}" / "topology" / "core_cpus_list", sibs)
    return str(sys_cpu)


def test_cgroup_v2_quota_rounds_up(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/docker/abc\n")
    write(tmp_path / "cg" / "docker" / "abc" / "cpu.max", "250000 100000\n")
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    q = threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup"))
    assert q == 2.5
    n, rule, _ = threads.detect_default(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup"),
                                        fake_sys(tmp_path, 24), "/nonexistent", allowed=set(range(24)))
    assert (n, rule) == (3, "cgroup cpu quota")


def test_cgroup_v2_parent_limit_applies(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/a/b\n")
    write(tmp_path / "cg" / "a" / "b" / "cpu.max", "max 100000\n")
    write(tmp_path / "cg" / "a" / "cpu.max", "400000 100000\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == 4.0


def test_cgroup_v1_quota(tmp_path):
    write(tmp_path / "proc_cgroup", "4:cpu,cpuacct:/kubepods/pod1\n3:memory:/kubepods/pod1\n")
    base = tmp_path / "cg" / "cpu,cpuacct" / "kubepods" / "pod1"
    write(base / "cpu.cfs_quota_us", "150000\n")
    write(base / "cpu.cfs_period_us", "100000\n")
    q = threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup"))
    assert q == 1.5
    write(base / "cpu.cfs_quota_us", "-1\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) is None


def test_affinity_and_physical_cores(tmp_path):
    sys_cpu = fake_sys(tmp_path, 8, smt=2)  # 4 cores, 2 threads each
    assert threads.physical_cores(None, sys_cpu, "/nonexistent") == 4
    assert threads.physical_cores({0, 1}, sys_cpu, "/nonexistent") == 1
    n, rule, _ = threads.detect_default("/nonexistent", "/nonexistent", sys_cpu, "/nonexistent",
                                        allowed={0, 2, 4})
    assert (n, rule) == (3, "cpu affinity mask")
    n, rule, _ = threads.detect_default("/nonexistent", "/nonexistent", sys_cpu, "/nonexistent",
                                        allowed=set(range(8)))
    assert (n, rule) == (4, "physical cores")


def test_cpuinfo_fallback(tmp_path):
    info = "".join(f"processor\t: {i}\nphysical id\t: 0\ncore id\t: {i // 2}\n\n" for i in range(6))
    write(tmp_path / "cpuinfo", info)
    assert threads.physical_cores(None, "/nonexistent", str(tmp_path / "cpuinfo")) == 3


def _run(env):
    code = "import tallow as tl; print(tl.utils.get_num_threads(), tl.utils.num_threads_rule())"
    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=True)
    return out.stdout.split(maxsplit=1), out.stderr


def test_environment_override_and_invalid_value():
    # 1: above the usable CPU count the value is capped (tests/adversarial covers that).
    (n, rule), _ = _run({"TALLOW_NUM_THREADS": "1"})
    assert n == "1" and "TALLOW_NUM_THREADS" in rule
    (n, rule), err = _run({"TALLOW_NUM_THREADS": "lots"})
    assert "not a positive integer" in err
    assert "TALLOW_NUM_THREADS" not in rule


def test_parse_env_warns():
    with pytest.warns(RuntimeWarning):
        assert threads.parse_env("-2") is None
    assert threads.parse_env("5") == 5
    assert threads.parse_env(None) is None


def test_set_num_threads_applies_to_blas():
    from threadpoolctl import threadpool_info

    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        assert tl.utils.get_num_threads() == 1
        assert all(d["num_threads"] == 1 for d in threadpool_info() if d["user_api"] == "blas")
        with pytest.raises(ValueError):
            tl.utils.set_num_threads(0)
    finally:
        tl.utils.set_num_threads(before)


def test_default_on_this_machine_is_within_the_affinity_mask():
    n = tl.utils.get_num_threads()
    assert 1 <= n <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["abc", "0", "-1", "2.5", "", "  ", "1_0", "\u0663"])
def test_parse_env_rejects_with_a_warning(value):
    # "" is a value someone set (an empty export), not an unset variable; "1_0" and
    # Arabic-Indic digits are what int() accepts but no one means as a thread count.
    with pytest.warns(RuntimeWarning, match="not a positive integer"):
        assert threads.parse_env(value) is None


def test_parse_env_accepts_surrounding_space():
    assert threads.parse_env(" 4\n") == 4


def test_garbage_bytes_in_proc_and_sys_fall_back(tmp_path):
    """Undecodable contents are treated like unreadable files, not an import-time crash."""
    junk = b"\xff\xfe\x00\x81garbage"
    (tmp_path / "proc_cgroup").write_bytes(junk)
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) is None
    write(tmp_path / "proc_cgroup2", "0::/a\n")
    (tmp_path / "cg" / "a").mkdir(parents=True)
    (tmp_path / "cg" / "a" / "cpu.max").write_bytes(junk)
    write(tmp_path / "cg" / "cpu.max", "200000 100000\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup2")) == 2.0
    (tmp_path / "cpuinfo").write_bytes(junk)
    sys_cpu = tmp_path / "sys"
    (sys_cpu / "cpu0" / "topology").mkdir(parents=True)
    (sys_cpu / "cpu0" / "topology" / "core_cpus_list").write_bytes(junk)
    assert threads.physical_cores(None, str(tmp_path / "nosys"), str(tmp_path / "cpuinfo")) is None
    n, rule, _ = threads.detect_default(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup"),
                                        str(sys_cpu), str(tmp_path / "cpuinfo"), allowed={0, 1, 2})
    assert n >= 1


def test_cgroup_path_cannot_climb_out_of_the_cgroup_root(tmp_path):
    # A process outside the cgroup namespace sees "/../.." paths; joined naively they
    # read files above the mount point (here: a quota that governs nothing).
    write(tmp_path / "proc_cgroup", "0::/../../outside\n")
    write(tmp_path / "cpu.max", "100000 100000\n")
    write(tmp_path / "outside" / "cpu.max", "100000 100000\n")
    cg = tmp_path / "mnt" / "cg"
    write(cg / "cpu.max", "max 100000\n")
    assert threads.cgroup_cpu_quota(str(cg), str(tmp_path / "proc_cgroup")) is None


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                      ("4", TypeError), (None, TypeError), (True, TypeError)])
def test_set_num_threads_rejects_non_counts(bad, exc):
    before = tl.utils.get_num_threads()
    with pytest.raises(exc):
        tl.utils.set_num_threads(bad)
    assert tl.utils.get_num_threads() == before


def test_set_num_threads_accepts_numpy_integers():
    import numpy as np

    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(np.int64(1))
        assert tl.utils.get_num_threads() == 1 and type(tl.utils.get_num_threads()) is int
    finally:
        tl.utils.set_num_threads(before)


def test_set_num_threads_reapplies_to_blas(monkeypatch):
    """An explicit call limits every BLAS loaded by now, even at an unchanged count (a
    library imported since the last call has its own, unlimited, pool)."""
    import threadpoolctl

    calls = []
    monkeypatch.setattr(threadpoolctl, "threadpool_limits",
                        lambda limits, user_api: calls.append((limits, user_api)))
    before = tl.utils.get_num_threads()
    try:
        tl.utils.set_num_threads(1)
        tl.utils.set_num_threads(1)
        assert calls == [(1, "blas"), (1, "blas")]
    finally:
        monkeypatch.undo()
        tl.utils.set_num_threads(before)


def test_cpus_without_topology_are_not_dropped(tmp_path):
    """A CPU whose topology files are unreadable counts as its own core: leaving it out
    would cap the threads below what the process may use."""
    sys_cpu = tmp_path / "sys"
    write(sys_cpu / "cpu0" / "topology" / "core_cpus_list", "0-1")
    write(sys_cpu / "cpu1" / "topology" / "core_cpus_list", "0-1")
    for cpu in (2, 3):
        (sys_cpu / f"cpu{cpu}").mkdir(parents=True)
    assert threads.physical_cores({0, 1, 2, 3}, str(sys_cpu), "/nonexistent") == 3
