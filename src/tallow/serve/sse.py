"""Server-sent events that stop as soon as the client goes away.

Starlette's ``StreamingResponse`` notices a disconnect either by listening for it or
(ASGI 2.4 servers) only when a write fails; a sequence still waiting for its first
token writes nothing, so this response always listens, and cancels the stream (its
``finally`` frees the sequence) the moment the client leaves.
"""

from __future__ import annotations

import json

import anyio


def event(data) -> bytes:
    """One ``data:`` event (JSON, or the literal ``[DONE]``)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


class EventStream:
    """An ASGI response streaming ``events`` (an async iterator of bytes)."""

    media_type = "text/event-stream"

    def __init__(self, events, headers: dict | None = None, on_close=None):
        self.events = events
        # run however the response ends: a generator that never started (the client left
        # while the headers were being written) never runs its own ``finally``
        self.on_close = on_close
        self.headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        self.headers += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
        self.status_code = 200

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream():
                    try:
                        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
                        async for chunk in self.events:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    except OSError:  # the connection broke under a write
                        pass
                    finally:
                        tg.cancel_scope.cancel()

                async def listen():
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                tg.start_soon(listen)
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if self.on_close is not None:
                self.on_close()
