"""Loading the models and running the app under uvicorn (``tallow serve``)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field

from .app import ServerLimits, create_app
from .embeddings import EmbeddingBatcher
from .engine import DecoderRunner, GenerationEngine
from .errors import ListenError
from .metrics import ServerMetrics
from .models import ChatModel, EmbedModel, ModelSet, load_decoder, load_embedder, model_id

DEFAULT_MAX_CONTEXT = 4096
# On SIGTERM or Ctrl-C, requests in flight may finish for this long; then the models stop
# and what still runs is answered with a 503 (a stream: an error event and [DONE]).
SHUTDOWN_GRACE_S = 5.0


@dataclass
class ServeOptions:
    embed_model: str | None = None
    embed: bool = True  # serve an embedder (the default one unless embed_model names one)
    models: list = field(default_factory=lambda: [None])  # decoders; None is the default one
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_batch: int = 16
    max_queue: int = 32
    max_context: int | None = DEFAULT_MAX_CONTEXT
    max_body_bytes: int = 4 << 20
    device: str = "cpu"


def load_models(opts: ServeOptions, metrics: ServerMetrics) -> ModelSet:
    from ..models.generate import TextGenerator

    embedders, generators = [], []
    if opts.embed:
        path, embedder = load_embedder(opts.embed_model, opts.device)
        name = model_id(path)
        batcher = EmbeddingBatcher(name, embedder, metrics, max_batch=opts.max_batch,
                                   max_queue=opts.max_queue)
        embedders.append(EmbedModel(name, tuple(a for a in (opts.embed_model, path) if a), batcher))
    for given in opts.models:
        path, model, tokenizer, chat_prompt = load_decoder(given, opts.device)
        name = model_id(path)
        # the end tokens `tallow generate` stops at
        eos = TextGenerator(model, tokenizer, temperature=0).eos_token_ids
        engine = GenerationEngine(name, DecoderRunner(model, opts.max_context), metrics,
                                  max_batch=opts.max_batch, max_queue=opts.max_queue)
        aliases = tuple(a for a in (given, path, os.path.basename(path)) if a)
        generators.append(ChatModel(name, aliases, path, tokenizer, eos, engine, chat_prompt,
                                    int(time.time()), {"vocab_size": model.config.vocab_size}))
    return ModelSet(embedders, generators)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str, api_key) -> None:
    if not is_loopback(host) and not api_key:
        warnings.warn(f"tallow serve: listening on {host} without an API key: anyone who can reach "
                      "this address can use the models (set --api-key or TALLOW_API_KEY)",
                      RuntimeWarning, stacklevel=2)


class BackgroundServer:
    """The app under uvicorn on a thread: ``with BackgroundServer(app, port=0) as s: s.url``.
    Port 0 takes a free one. Used by the tests and ``tallow bench serve``."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 30.0):
        import socket

        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=SHUTDOWN_GRACE_S + 5)
        # closing it answers the requests in flight as `tallow serve` does on SIGTERM
        self.server = _graceful_server(config, self._stop_models)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="tallow-serve-http", daemon=True)
        self.startup_timeout = startup_timeout

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self):
        self.thread.start()
        end = time.monotonic() + self.startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > end:
                raise RuntimeError(f"the server did not start on {self.url} within {self.startup_timeout} s")
            time.sleep(0.02)
        return self

    def _stop_models(self) -> None:
        models = getattr(self, "models", None)
        if models is not None:
            models.stop()

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(SHUTDOWN_GRACE_S + 10)
        self.sock.close()
        models = getattr(self, "models", None)
        if models is not None:
            models.close()

    def close(self) -> None:
        self.__exit__()


def start_server(opts: ServeOptions) -> BackgroundServer:
    """``tallow serve`` inside this process, on a thread (``opts.port`` 0: a free port):
    ``server.url`` is its address, ``server.close()`` stops it and its model threads."""
    warn_if_exposed(opts.host, opts.api_key)
    metrics = ServerMetrics()
    models = load_models(opts, metrics)
    app = create_app(models, ServerLimits(opts.max_body_bytes, opts.api_key), metrics)
    server = BackgroundServer(app, opts.host, opts.port)
    server.models = models
    try:
        return server.__enter__()
    except BaseException:
        models.close()
        raise


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the models load: a busy port fails at once,
    with the way out, instead of after the loading."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ListenError(f"--host {host}: not an address of this machine ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        hint = {errno.EADDRINUSE: "another server there? choose another --port, or stop that server",
                errno.EACCES: "ports below 1024 need privileges: choose another --port"}.get(
                    e.errno, "is --host an address of this machine?")
        raise ListenError(f"cannot listen on {host}:{port}: {e.strerror} ({hint})") from None
    return sock


def _graceful_server(config, stop_models):
    """uvicorn's server, whose shutdown gives the requests in flight ``SHUTDOWN_GRACE_S``
    to finish and then calls ``stop_models``, so those still running get their 503 and
    the connections close cleanly instead of being cut."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        async def shutdown(self, sockets=None):
            timer = asyncio.get_running_loop().call_later(SHUTDOWN_GRACE_S, stop_models)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    return GracefulServer(config)


def serve(opts: ServeOptions) -> int:
    import uvicorn

    warn_if_exposed(opts.host, opts.api_key)
    sock = listening_socket(opts.host, opts.port)
    try:
        metrics = ServerMetrics()
        models = load_models(opts, metrics)
        try:
            app = create_app(models, ServerLimits(opts.max_body_bytes, opts.api_key), metrics)
            listed = ", ".join(m["id"] for m in models.listing())
            port = sock.getsockname()[1]  # --port 0: the free port it took
            print(f"tallow serve: {listed} on http://{opts.host}:{port}/v1"
                  f"{' (API key required)' if opts.api_key else ''}", flush=True)
            # a backstop only: the models stop (and answer) after SHUTDOWN_GRACE_S
            config = uvicorn.Config(app, log_level="info", lifespan="off",
                                    timeout_graceful_shutdown=SHUTDOWN_GRACE_S + 5)
            try:
                _graceful_server(config, models.stop).run(sockets=[sock])
            except KeyboardInterrupt:  # Ctrl-C, after the shutdown above: its usual status
                return 130
        finally:
            models.close()
    finally:
        sock.close()
    # SIGTERM: uvicorn raises it again once shut down, so the process ends as signalled
    return 0
