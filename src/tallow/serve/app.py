"""The HTTP side of ``tallow serve``: Starlette routes in OpenAI's shapes.

Requests are read and checked on the event loop; model work runs on each model's
own thread (``GenerationEngine``, ``EmbeddingBatcher``), and the loop waits for it
without blocking. Every refusal is OpenAI's error JSON (``errors.py``).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hmac
import json
import re
import time
from dataclasses import dataclass

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import params as P
from .answers import Answer
from .errors import RequestError, bad_parameter, context_length_exceeded, error_body
from .metrics import ServerMetrics
from .sequence import Sequence
from .sse import EventStream

ENDPOINTS = ("/health", "/metrics", "/v1/models", "/v1/embeddings", "/v1/chat/completions",
             "/v1/completions")


@dataclass
class ServerLimits:
    max_body_bytes: int = 4 << 20
    api_key: str | None = None


class ClientGone(Exception):
    """The client closed its connection before the answer was ready."""


# -- reading a request --------------------------------------------------------------------
def check_key(request, limits: ServerLimits) -> None:
    if limits.api_key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), limits.api_key.encode()):
        raise RequestError("Incorrect or missing API key: send it as 'Authorization: Bearer KEY'",
                           401, code="invalid_api_key")


async def read_json(request, limits: ServerLimits) -> dict:
    too_big = RequestError(f"The request body is larger than the limit of {limits.max_body_bytes} bytes",
                           413, code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_big
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise too_big
            chunks.append(chunk)
    except ClientDisconnect:  # it left before its body was whole: nobody to answer
        raise ClientGone() from None
    raw = b"".join(chunks)
    try:
        body = json.loads(raw)
        # JSON may escape half of a UTF-16 pair ("\ud800"): Python reads it as a lone
        # surrogate, which no tokenizer takes; the escape is rare, so only then look
        if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
            raise RequestError("The request body has a lone UTF-16 surrogate escape (\\ud800 to \\udfff "
                               "without its pair): that is not Unicode text", 400, code="invalid_json")
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        if isinstance(e, RequestError):
            raise
        raise RequestError("The request body is not valid JSON", 400, code="invalid_json") from None
    return P.body_object(body)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


async def wait_or_disconnect(awaitable, request):
    """``awaitable``'s result, or ``ClientGone`` as soon as the client disconnects."""
    async def gone():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work = asyncio.ensure_future(awaitable)
    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if work.done():
        return work.result()
    work.cancel()
    raise ClientGone()


def sequence_sampling(req, ids, limit: int, param: str):
    """The request's sampling settings for one prompt, its length checked against the
    context; without ``max_tokens`` the answer may fill the context."""
    if not ids:
        raise bad_parameter(param, "the prompt encodes to no tokens")
    sampling = dataclasses.replace(req.sampling)
    # the answer takes at least one token: a prompt that fills the context leaves none
    asked = sampling.max_tokens if req.max_tokens_given else 1
    if len(ids) + asked > limit:
        raise context_length_exceeded(limit, len(ids), asked)
    if not req.max_tokens_given:
        sampling.max_tokens = max(1, limit - len(ids))
    return sampling


# -- the application ----------------------------------------------------------------------
def create_app(models, limits: ServerLimits | None = None, metrics: ServerMetrics | None = None) -> Starlette:
    """The ASGI application serving ``models`` (a ``ModelSet``)."""
    limits = limits or ServerLimits()
    metrics = metrics or ServerMetrics()

    async def health(request):
        active = waiting = 0
        for m in models.generators:
            a, w = m.engine.counts()
            active, waiting = active + a, waiting + w
        return JSONResponse({"status": "ok", "models": [m["id"] for m in models.listing()],
                             "active_sequences": active, "queued_sequences": waiting})

    async def metrics_page(request):
        check_key(request, limits)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def list_models(request):
        check_key(request, limits)
        return JSONResponse({"object": "list", "data": models.listing()})

    async def get_model(request):
        check_key(request, limits)
        name = request.path_params["name"]
        for entry, m in zip(models.listing(), models.embedders + models.generators):
            if name == m.id or name in m.aliases:
                return JSONResponse(entry)
        from .errors import unknown_model
        raise unknown_model(name, [m["id"] for m in models.listing()])

    async def embeddings(request):
        check_key(request, limits)
        req = P.embedding_request(await read_json(request, limits))
        model = models.embedder(req.model)
        dim = model.batcher.dim
        if req.dimensions is not None and req.dimensions > dim:
            raise bad_parameter("dimensions", f"dimensions must be at most {dim} for {model.id}, "
                                f"got {req.dimensions}")
        tokens = sum(await run_in_threadpool(model.batcher.count_tokens, req.texts))
        future = model.batcher.submit(req.texts)
        try:
            vecs = await wait_or_disconnect(asyncio.wrap_future(future), request)
        except ClientGone:
            future.cancel()
            raise
        if req.dimensions is not None and req.dimensions < dim:
            # Matryoshka truncation: the leading dimensions, back to unit length
            vecs = vecs[:, :req.dimensions]
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = (vecs / np.where(norms == 0, 1, norms)).astype(np.float32)
        metrics.prompt_tokens.inc(tokens, model=model.id)
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if req.base64
                 else v.astype(np.float64).tolist()} for i, v in enumerate(vecs)]
        return JSONResponse({"object": "list", "data": data, "model": model.id,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def chat_completions(request):
        return await _generate(request, chat=True)

    async def completions(request):
        return await _generate(request, chat=False)

    async def _generate(request, chat: bool):
        check_key(request, limits)
        body = await read_json(request, limits)
        req = P.generation_request(body, chat)
        model = models.generator(req.model)
        if chat:
            messages = P.chat_messages(body)
            if model.chat_prompt is None:
                raise RequestError(f"{model.id} has no chat template: use /v1/completions", 400,
                                   param="model", code="model_not_supported")
            try:
                text = await run_in_threadpool(model.chat_prompt, messages)
            except Exception as e:  # a template that refuses these messages
                raise bad_parameter("messages", f"the chat template refused the messages: {e}") from None
            prompts = [await run_in_threadpool(model.encode, text)]
        else:
            prompts = P.completion_prompts(body)
            prompts = [await run_in_threadpool(model.encode, p) if isinstance(p, str) else p for p in prompts]
            vocab = model.extra["vocab_size"]
            if any(not 0 <= t < vocab for ids in prompts for t in ids):
                raise bad_parameter("prompt", f"prompt token ids must be in 0..{vocab - 1}")
        most = model.engine.max_batch + model.engine.max_queue
        if len(prompts) * req.n > most:
            raise bad_parameter("n" if req.n > 1 else "prompt",
                                f"at most {most} choices per request here (--max-batch plus --max-queue), "
                                f"got {len(prompts)} prompt(s) times n={req.n}")
        seqs, events = [], asyncio.Queue()
        loop = asyncio.get_running_loop()
        # choice i is prompt i // n's choice i % n, as OpenAI orders them
        for i, ids in enumerate(ids for ids in prompts for _ in range(req.n)):
            sampling = sequence_sampling(req, ids, model.engine.limit, "messages" if chat else "prompt")
            if sampling.seed is not None:  # a seed repeats the whole request, not one choice n times
                sampling.seed += i % req.n

            def deliver(ev, i=i):  # on the engine's thread
                try:
                    loop.call_soon_threadsafe(events.put_nowait, (i, ev))
                except RuntimeError:  # the loop has closed: nobody waits any more
                    pass

            seqs.append(Sequence(ids, sampling, model.tokenizer, model.eos_token_ids, deliver, model.id))
        model.engine.submit(*seqs)
        answer = Answer(model, seqs, chat, req.include_usage, req.n)

        def cancel_unfinished():  # done, failed, or the client left: no sequence outlives its request
            for seq in seqs:
                if not seq.done:
                    model.engine.cancel(seq)

        if req.stream:
            return EventStream(answer.stream(events, model.engine), on_close=cancel_unfinished)
        try:
            await wait_or_disconnect(answer.collect(events), request)
        finally:
            cancel_unfinished()
        return JSONResponse(answer.whole())

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{name:path}", get_model, methods=["GET"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]

    async def request_error(request, exc: RequestError):
        return JSONResponse(exc.body(), exc.status, headers=exc.headers)

    async def http_error(request, exc: HTTPException):
        kind = {404: ("not_found", f"No route {request.url.path!r:.100} (see /v1/models, /v1/embeddings, "
                                   "/v1/chat/completions, /v1/completions, /health, /metrics)"),
                405: ("method_not_allowed", f"Method {request.method} is not allowed on {request.url.path!r:.100}")}
        code, message = kind.get(exc.status_code, ("http_error", str(exc.detail)))
        return JSONResponse(error_body(message, "invalid_request_error", None, code), exc.status_code,
                            headers=exc.headers)

    async def client_gone(request, exc: ClientGone):
        return Response(status_code=499)  # nobody reads it: nginx's "client closed request"

    async def server_error(request, exc: Exception):
        return JSONResponse(error_body("The server had an error while processing the request",
                                       "server_error", None, "internal_error"), 500)

    app = Starlette(routes=routes, exception_handlers={
        RequestError: request_error, HTTPException: http_error, ClientGone: client_gone,
        Exception: server_error})
    app.state.models = models
    app.state.metrics = metrics
    return _Measured(app, metrics)


class _Measured:
    """ASGI middleware: every HTTP answer counted by endpoint and status, and timed to
    its last byte."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics
        self.state = app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        endpoint = path if path in ENDPOINTS else ("/v1/models" if path.startswith("/v1/models/") else "other")
        start = time.perf_counter()
        status = [500]

        async def measured_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, measured_send)
        finally:
            self.metrics.requests.inc(endpoint=endpoint, status=str(status[0]))
            self.metrics.latency.observe(time.perf_counter() - start, endpoint=endpoint)
