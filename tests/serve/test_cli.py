"""``tallow serve`` on the command line: its options, the key from TALLOW_API_KEY,
the warning when exposed, and a real start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tallow.cli.main import build_parser
from tallow.cli.serve import contradiction, options_from_args
from tallow.serve.server import ServeOptions, is_loopback, warn_if_exposed


def parse(*argv):
    return build_parser().parse_args(["serve", *argv])


def test_the_key_comes_from_the_flag_or_tallow_api_key(monkeypatch):
    monkeypatch.delenv("TALLOW_API_KEY", raising=False)
    assert options_from_args(parse(), ServeOptions).api_key is None
    monkeypatch.setenv("TALLOW_API_KEY", "from-env")
    assert options_from_args(parse(), ServeOptions).api_key == "from-env"
    assert options_from_args(parse("--api-key", "flag"), ServeOptions).api_key == "flag"


def test_defaults_and_models():
    opts = options_from_args(parse(), ServeOptions)
    assert (opts.host, opts.port, opts.models, opts.embed) == ("127.0.0.1", 8000, [None], True)
    opts = options_from_args(parse("--model", "a.gguf", "--model", "b.gguf", "--no-embed"), ServeOptions)
    assert (opts.models, opts.embed) == (["a.gguf", "b.gguf"], False)
    assert contradiction(parse("--no-embed", "--no-generate"))
    assert contradiction(parse("--no-embed", "--embed-model", "x"))
    with pytest.raises(SystemExit):
        parse("--max-batch", "0")


def test_a_warning_when_bound_beyond_loopback_without_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    with pytest.warns(RuntimeWarning, match="without an API key"):
        warn_if_exposed("0.0.0.0", None)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_exposed("0.0.0.0", "key")
        warn_if_exposed("127.0.0.1", None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc, url: str, seconds: float = 60) -> None:
    """Until the server at ``url`` answers /health, failing if ``proc`` ends first."""
    end = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < end, "tallow serve did not start"
        time.sleep(0.2)


def test_tallow_serve_starts_and_answers(smollm2_gguf):
    port = _free_port()
    env = {**os.environ, "TALLOW_API_KEY": "k"}
    proc = subprocess.Popen([sys.executable, "-m", "tallow", "serve", "--no-embed", "--model", smollm2_gguf,
                             "--port", str(port), "--max-batch", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, url)
        assert httpx.get(url + "/v1/models").status_code == 401
        models = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer k"}).json()
        assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct.Q4_1"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert "SmolLM2-135M-Instruct.Q4_1 on http://127.0.0.1" in out


def test_a_busy_port_fails_at_once_with_a_clear_error(smollm2_gguf):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "tallow", "serve", "--no-embed", "--model", smollm2_gguf,
                               "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"tallow serve: error: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "--port" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert " on http://" not in proc.stdout  # it never claimed the port, nor loaded the model
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("signame,status", [("SIGTERM", -15), ("SIGINT", 130)])
def test_shutdown_answers_the_requests_in_flight_and_frees_the_port(smollm2_gguf, signame, status):
    """SIGTERM or Ctrl-C with a stream and a plain request running (both longer than the
    grace): each gets an answer (the stream an error event and [DONE], the plain one a
    503), the process ends as the signal says (killed by SIGTERM, as uvicorn re-raises it;
    130 for Ctrl-C) without a traceback, and the port is free again."""
    import json
    import signal
    import threading

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tallow", "serve", "--no-embed", "--model", smollm2_gguf,
                             "--port", str(port), "--max-batch", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    # greedy counting goes on far longer than the grace
    body = {"prompt": ", ".join(str(i) for i in range(1, 30)) + ",", "max_tokens": 3000, "temperature": 0}
    results = {}

    def stream():
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
            results["stream"] = [line for line in r.iter_lines() if line]

    def plain():
        results["plain"] = httpx.post(url + "/v1/completions", json=body, timeout=60)

    try:
        _wait_healthy(proc, url)
        clients = [threading.Thread(target=stream), threading.Thread(target=plain)]
        for c in clients:
            c.start()
        while httpx.get(url + "/health").json()["active_sequences"] < 2:
            time.sleep(0.05)
        proc.send_signal(getattr(signal, signame))
        out = proc.communicate(timeout=60)[0]
        for c in clients:
            c.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, out
    assert "Traceback" not in out and "Cancel" not in out, out
    assert results["stream"][-1] == "data: [DONE]"
    assert json.loads(results["stream"][-2][len("data: "):])["error"]["code"] == "server_shutting_down"
    assert results["plain"].status_code == 503 and results["plain"].headers["Retry-After"]
    with socket.socket() as s:  # the listener is gone (uvicorn's own option: a restart may bind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
