"""The session's server and its openai clients (see support/serving.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

from support.serving import running_server  # noqa: E402


@pytest.fixture(scope="session")
def server(minilm_dir, smollm2_gguf):
    with running_server(minilm_dir, smollm2_gguf, max_batch=4, max_queue=8) as s:
        yield s


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def async_client(server):
    import openai

    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
