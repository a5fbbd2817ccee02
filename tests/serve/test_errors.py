"""Bad requests over raw HTTP: OpenAI's error JSON with the right status, never a 500,
never a dead server."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from support.serving import CHAT_MODEL, EMBED_MODEL, running_server

CHAT = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def post(server, path, body=None, **kw):
    if body is not None and not isinstance(body, (bytes, str)):
        kw["json"] = body
    elif body is not None:
        kw["content"] = body
    return httpx.post(server.url + path, timeout=60, **kw)


def assert_error(r, status, param=None, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    return err


def test_malformed_json_is_400(server):
    for body in (b"{bad", b"", b"\xff\xfe", b"[1, 2]", b'"text"', b"[" * 100000):
        assert_error(post(server, "/v1/chat/completions", body), 400)


def test_a_lone_surrogate_escape_is_400_not_a_server_error(server):
    """JSON can escape half of a UTF-16 pair; no tokenizer takes it (it raised a 500).
    A whole pair is an emoji and passes."""
    for path, body in [("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi \\ud800"}], '
                                                b'"max_tokens": 1}'),
                       ("/v1/completions", b'{"prompt": "hi \\udfff there", "max_tokens": 1}'),
                       ("/v1/embeddings", b'{"input": ["fine", "hi \\uD83D"]}')]:
        err = assert_error(post(server, path, body, headers={"content-type": "application/json"}), 400,
                           code="invalid_json")
        assert "surrogate" in err["message"]
    r = post(server, "/v1/embeddings", b'{"input": "pair \\ud83d\\ude00 and \\\\ud800 as text"}',
             headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_an_unknown_model_is_404(server):
    assert_error(post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-9"}), 404, "model", "model_not_found")
    assert_error(post(server, "/v1/embeddings", {"model": "nope", "input": "x"}), 404, "model")
    r = httpx.get(server.url + "/v1/models/nope")
    assert_error(r, 404)
    # a model of the other kind is a 400 naming it
    assert_error(post(server, "/v1/embeddings", {"model": CHAT_MODEL, "input": "x"}), 400, "model")


def test_too_many_tokens_for_the_context(server):
    err = assert_error(post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 100000}), 400,
                       code="context_length_exceeded")
    assert "maximum context length" in err["message"]
    long_prompt = "word " * 5000
    assert_error(post(server, "/v1/completions", {"model": CHAT_MODEL, "prompt": long_prompt, "max_tokens": 1}),
                 400, code="context_length_exceeded")


def test_a_prompt_that_fills_the_context_leaves_no_room_for_an_answer(server):
    """Prompt plus answer fit the context, with or without max_tokens: a prompt of exactly
    the context's length is refused as one token over (it was answered with a token
    beyond the context)."""
    limit = server.models.generators[0].engine.limit
    for extra in ({}, {"max_tokens": 1}):
        err = assert_error(post(server, "/v1/completions", {"model": CHAT_MODEL, "prompt": [100] * limit, **extra}),
                           400, code="context_length_exceeded")
        assert f"you requested {limit + 1} tokens ({limit} in the prompt, 1 in the completion)" in err["message"]


@pytest.mark.parametrize("change,param", [
    ({"temperature": -0.5}, "temperature"), ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"), ({"n": 129}, "n"), ({"n": 13}, "n"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": -3}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"), ({"max_tokens": 2.5}, "max_tokens"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"), ({"top_logprobs": 2}, "top_logprobs"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": 5}, "stop"), ({"seed": "x"}, "seed"),
    ({"stream": "yes"}, "stream"), ({"messages": []}, "messages"), ({"messages": [{"content": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"presence_penalty": 1.0}, "presence_penalty"), ({"stream_options": {"include_usage": True}}, "stream_options"),
])
def test_bad_chat_parameters_are_400(server, change, param):
    assert_error(post(server, "/v1/chat/completions", {**CHAT, **change}), 400, param)


@pytest.mark.parametrize("change,param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"tool_choice": "required"}, "tool_choice"), ({"function_call": {"name": "f"}}, "function_call"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, "response_format"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"), ({"modalities": ["text", "audio"]}, "modalities"),
])
def test_options_that_would_change_the_answer_are_refused_not_ignored(client, change, param):
    """A tool call, a JSON object or banned tokens cannot be honoured: the client learns so
    (openai raises BadRequestError naming the parameter) instead of getting plain text."""
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=CHAT_MODEL, messages=CHAT["messages"], max_tokens=2, **change)
    assert e.value.status_code == 400 and e.value.body["param"] == param
    assert e.value.body["code"] == "unsupported_value"


def test_harmless_fields_openai_clients_send_are_accepted(client):
    """Bookkeeping fields, and the empty or default forms of the refused options."""
    r = client.chat.completions.create(
        model=CHAT_MODEL, messages=CHAT["messages"], max_tokens=2, temperature=0, user="u-1",
        metadata={"k": "v"}, store=False, parallel_tool_calls=False, response_format={"type": "text"},
        tool_choice="none", logit_bias={}, modalities=["text"], extra_body={"unknown_field": 1})
    assert r.usage.completion_tokens == 2


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "logprobs": 6}, "logprobs"), ({"prompt": ""}, "prompt"), ({"prompt": [10**9]}, "prompt"),
    ({"prompt": ["a", ""]}, "prompt"), ({"prompt": [[]]}, "prompt"), ({"prompt": ["x"] * 100}, "prompt"), ({"prompt": "x", "echo": True}, "echo"), ({}, "prompt"),
])
def test_bad_completion_parameters_are_400(server, body, param):
    assert_error(post(server, "/v1/completions", {"model": CHAT_MODEL, "max_tokens": 2, **body}), 400, param)


@pytest.mark.parametrize("body,param", [
    ({"input": []}, "input"), ({"input": [1, 2, 3]}, "input"), ({"input": ["a", 3]}, "input"),
    ({"input": "x", "encoding_format": "hex"}, "encoding_format"), ({"input": "x", "dimensions": 0}, "dimensions"),
    ({"input": [""]}, "input"),
])
def test_bad_embedding_parameters_are_400(server, body, param):
    assert_error(post(server, "/v1/embeddings", {"model": EMBED_MODEL, **body}), 400, param)


def test_a_body_over_the_limit_is_413(server):
    big = {"model": EMBED_MODEL, "input": "x" * (2 << 20)}
    assert_error(post(server, "/v1/embeddings", big), 413)
    # without a Content-Length (chunked), counted as it arrives
    def chunks():
        yield b'{"input": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'
    assert_error(httpx.post(server.url + "/v1/embeddings", content=chunks(), timeout=60), 413)


def test_wrong_method_and_unknown_path(server):
    assert_error(httpx.get(server.url + "/v1/chat/completions"), 405, code="method_not_allowed")
    assert_error(httpx.delete(server.url + "/v1/embeddings"), 405)
    assert_error(httpx.get(server.url + "/v2/nothing"), 404, code="not_found")


def test_a_key_is_required_when_set(minilm_dir, smollm2_gguf):
    import openai

    with running_server(minilm_dir, smollm2_gguf, api_key="s3cret", max_batch=1, max_queue=1) as s:
        assert_error(httpx.get(s.url + "/v1/models"), 401, code="invalid_api_key")
        assert_error(httpx.get(s.url + "/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(httpx.get(s.url + "/metrics"), 401)
        assert_error(post(s, "/v1/embeddings", {"input": "x"}), 401)
        assert httpx.get(s.url + "/health").status_code == 200  # liveness needs no key
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert len(good.embeddings.create(model=EMBED_MODEL, input="x").data[0].embedding) == 384


def _random_value(rng, depth=0):
    kinds = [lambda: None, lambda: True, lambda: rng.randint(-10**20, 10**20), lambda: rng.uniform(-1e6, 1e6),
             lambda: rng.choice([0, 1, 2, -1, 0.5]),
             lambda: "".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(rng.randrange(6))),
             lambda: rng.choice(["", "user", "x"]),
             lambda: [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))],
             lambda: {rng.choice(["role", "content", "type", "text", "include_usage", "k"]):
                      _random_value(rng, depth + 1) for _ in range(rng.randrange(4))},
             lambda: [{"role": rng.choice(["user", "system", "bot"]), "content": _random_value(rng, depth + 1)}]]
    return kinds[rng.randrange(len(kinds) if depth < 3 else 7)]()


KEYS = ["model", "messages", "prompt", "input", "temperature", "top_p", "n", "stop", "seed", "logprobs",
        "top_logprobs", "stream", "stream_options", "encoding_format", "dimensions", "max_completion_tokens",
        "echo", "best_of", "suffix", "user", "tools", "frequency_penalty", "zzz"]


@pytest.mark.slow
def test_random_bodies_get_a_200_or_a_4xx_json_error(server):
    rng = random.Random(20261207)
    valid = {"/v1/chat/completions": CHAT, "/v1/completions": {"model": CHAT_MODEL, "prompt": "Hi", "max_tokens": 2},
             "/v1/embeddings": {"model": EMBED_MODEL, "input": "hi"}}
    statuses = set()
    for i in range(150):
        path = rng.choice(list(valid))
        body = dict(valid[path]) if rng.random() < 0.7 else {}
        for _ in range(rng.randrange(1, 4)):
            body[rng.choice(KEYS)] = _random_value(rng)
        # generation stays short whatever else is random: max_tokens is small or invalid
        body["max_tokens"] = rng.choice([1, 2, 3, 0, -1, "2", 1.5, True, [], {}])
        raw = json.dumps(body).encode() if rng.random() < 0.9 else bytes(rng.randrange(256) for _ in range(40))
        r = post(server, path, raw, headers={"content-type": "application/json"})
        statuses.add(r.status_code)
        assert r.status_code == 200 or 400 <= r.status_code < 500, (body, r.text)
        if r.status_code != 200:
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert 200 in statuses and 400 in statuses
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
