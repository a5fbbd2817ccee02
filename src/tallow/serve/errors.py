"""Errors as OpenAI's API writes them: ``{"error": {"message", "type", "param", "code"}}``
with the HTTP status that goes with each."""

from __future__ import annotations

from ..errors import TallowError


class RequestError(TallowError, ValueError):
    """A request the server refuses; ``status`` is its HTTP status and ``body()`` the
    JSON OpenAI's clients parse (``openai.BadRequestError`` and its siblings)."""

    def __init__(self, message: str, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param=None, code=None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_parameter(param: str, message: str, code: str | None = "invalid_value") -> RequestError:
    return RequestError(message, 400, param=param, code=code)


def unknown_model(name, available) -> RequestError:
    listed = ", ".join(available) or "none"
    return RequestError(f"The model {name!r} does not exist or is not served here (served: {listed}; "
                        "see GET /v1/models)", 404, param="model", code="model_not_found")


def context_length_exceeded(limit: int, prompt: int, completion: int | None) -> RequestError:
    asked = prompt if completion is None else prompt + completion
    detail = f"{prompt} in the prompt" + ("" if completion is None else f", {completion} in the completion")
    return RequestError(
        f"This model's maximum context length is {limit} tokens. However, you requested {asked} "
        f"tokens ({detail}). Please reduce the length of the messages or the completion.",
        400, param="messages", code="context_length_exceeded")


def queue_full(what: str, retry_after: int = 1) -> RequestError:
    return RequestError(f"The server is busy: the {what} queue is full; retry after {retry_after} s",
                        429, type="rate_limit_error", code="queue_full",
                        headers={"Retry-After": str(retry_after)})


def shutting_down(retry_after: int = 5) -> RequestError:
    return RequestError("The server is shutting down and did not finish this request; retry "
                        f"after {retry_after} s (or on another server)", 503, type="server_error",
                        code="server_shutting_down", headers={"Retry-After": str(retry_after)})


class ListenError(TallowError, OSError):
    """``tallow serve`` cannot listen where it was told: the port is taken (another server),
    not ours to take, or the host is not an address of this machine."""
