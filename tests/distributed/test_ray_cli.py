"""``tallow embed --ray`` usage errors and joining clusters that do not answer: no
Ray runtime of the test process is started (a join that hangs runs in a child)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tallow.cli import main

pytestmark = pytest.mark.xdist_group("ray")


def test_ray_given_a_file_says_to_use_input(tmp_path, capsys):
    src = tmp_path / "corpus.txt"
    src.write_text("x\n")
    assert main(["embed", "--ray", str(src), "--output", str(tmp_path / "ix")]) == 2
    err = capsys.readouterr().err
    assert f"--ray {src}: not a Ray address" in err and f"pass --input {src}" in err


def test_ray_refuses_stdin_input(tmp_path, capsys):
    assert main(["embed", "--ray", "--input", "-", "--output", str(tmp_path / "ix")]) == 2
    assert "--input -: with --ray the workers read files" in capsys.readouterr().err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_child(code: str, timeout: float):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=env, timeout=timeout)
    return r, time.monotonic() - t0


def test_stopped_cluster_fails_at_once(tmp_path):
    pytest.importorskip("ray")
    src = tmp_path / "a.txt"
    src.write_text("x\n")
    port = closed_port()
    r, took = run_child(f"""
        import sys
        from tallow.cli import main
        sys.exit(main(["embed", "--ray", "127.0.0.1:{port}", "--input", {str(src)!r},
                       "--output", {str(tmp_path / 'ix')!r}, "--model", {str(tmp_path)!r}]))
    """, timeout=120)
    assert r.returncode == 1, r.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in r.stderr
    assert took < 60


def test_cluster_that_never_answers_times_out(tmp_path):
    """A port that accepts connections and never speaks: ray.init would wait minutes."""
    pytest.importorskip("ray")
    r, took = run_child("""
        import socket, sys, time
        from tallow.distributed import connect
        from tallow.errors import DistributedError
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
        t0 = time.monotonic()
        try:
            connect(f"127.0.0.1:{s.getsockname()[1]}", timeout=4)
        except DistributedError as e:
            print("error after", round(time.monotonic() - t0), "s:", e)
            sys.exit(3)
    """, timeout=150)
    assert r.returncode == 3, r.stdout + r.stderr[-2000:]
    assert "could not join the Ray cluster at 127.0.0.1:" in r.stdout and "within 4 s" in r.stdout
    assert took < 90


def test_auto_against_a_private_loopback_runtime_times_out_with_a_reason(tmp_path):
    """A runtime tallow started for its own process (loopback only, its own token) as
    the cluster --ray auto finds: joining it fails after --ray-timeout, with the reasons
    to check, instead of waiting for minutes without a word."""
    pytest.importorskip("ray")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import time
            from tallow.distributed import connect
            ray = connect(num_cpus=1)
            print(ray.get_runtime_context().gcs_address, flush=True)
            time.sleep(300)
        """)], stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        address = holder.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        src = tmp_path / "a.txt"
        src.write_text("x\n")
        r, took = run_child(f"""
            import os, sys
            os.environ["RAY_ADDRESS"] = {address!r}
            from tallow.cli import main
            sys.exit(main(["embed", "--ray", "auto", "--ray-timeout", "8", "--input",
                           {str(src)!r}, "--output", {str(tmp_path / 'ix')!r}]))
        """, timeout=150)
    finally:
        import signal

        holder.send_signal(signal.SIGINT)  # Ray's exit handler stops the runtime
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"could not join the Ray cluster at auto within 8 s" in r.stderr
    assert took < 100


def test_chaos_is_an_option_of_the_distributed_bench_only(capsys):
    assert main(["bench", "cpu", "--chaos"]) == 2
    assert "--chaos is an option of the distributed suite" in capsys.readouterr().err


def test_joins_a_loopback_cluster_started_with_ray_start(tmp_path, model_dir):
    """`ray start --head --node-ip-address=127.0.0.1` (a cluster for this machine only),
    joined by host:port: the job runs and the index is whole."""
    import signal
    import tempfile

    pytest.importorskip("ray")
    port = closed_port()
    temp = tempfile.mkdtemp(prefix="/tmp/tr-")  # Ray's socket paths must stay short
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen([ray_cli, "start", "--head", "--node-ip-address=127.0.0.1",
                             f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             f"--temp-dir={temp}", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(1)
        src = tmp_path / "a.txt"
        src.write_text("first line\nsecond line\n")
        out = tmp_path / "ix"
        r, took = run_child(f"""
            import os, sys
            os.environ["RAY_AUTH_MODE"] = "token"
            from tallow.cli import main
            sys.exit(main(["embed", "--ray", "127.0.0.1:{port}", "--ray-timeout", "60",
                           "--input", {str(src)!r}, "--output", {str(out)!r},
                           "--model", {model_dir!r}, "--num-workers", "1", "--no-progress"]))
        """, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "wrote 2 embeddings of dimension 384" in r.stderr
    finally:
        head.send_signal(signal.SIGTERM)  # ray start --block stops its processes
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
