"""Request bodies read and checked as OpenAI's API defines them; anything out of
range is a 400 naming the parameter (``param``), before a model sees it."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RequestError, bad_parameter
from .sequence import SamplingParams

MAX_STOPS = 4  # OpenAI's limit
MAX_TOP_LOGPROBS = 20  # chat; completions take logprobs 0..5
MAX_EMBED_INPUTS = 2048  # OpenAI's limit of inputs per embeddings request
MAX_CHOICES = 128  # OpenAI's limit of n


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def body_object(body) -> dict:
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object", 400, code="invalid_body")
    return body


def optional(body: dict, key: str, check, what: str, default=None):
    v = body.get(key)
    if v is None:
        return default
    if not check(v):
        raise bad_parameter(key, f"{key} must be {what}, got {v!r:.80}", code="invalid_type")
    return v


def model_name(body: dict):
    return optional(body, "model", lambda v: isinstance(v, str), "a string")


def flag(body: dict, key: str) -> bool:
    return optional(body, key, lambda v: isinstance(v, bool), "true or false", False)


@dataclass
class GenerationRequest:
    model: str | None
    sampling: SamplingParams
    max_tokens_given: bool
    stream: bool
    include_usage: bool
    n: int = 1  # choices per prompt


def _stops(body) -> tuple:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad_parameter("stop", "stop must be a string or a list of strings", code="invalid_type")
    if len(stops) > MAX_STOPS:
        raise bad_parameter("stop", f"stop takes at most {MAX_STOPS} strings, got {len(stops)}")
    return tuple(s for s in stops if s)


def _refuse_unsupported(body: dict) -> None:
    """Options that would change the answer if honoured: silently ignoring them would
    hand back an answer the client did not ask for (plain text for a tool call or a
    JSON object, tokens it banned), so they are refused. Their empty or default forms
    (``tools: []``, ``tool_choice: "none"``, ``response_format: {"type": "text"}``,
    ``logit_bias: {}``) ask for nothing and pass, as do bookkeeping fields such as
    ``user``, ``metadata``, ``store`` and ``parallel_tool_calls``."""
    for key in ("tools", "functions"):
        if body.get(key):
            raise bad_parameter(key, f"{key} (function calling) is not supported here: send the "
                                "request without it", code="unsupported_value")
    for key in ("tool_choice", "function_call"):
        if body.get(key) not in (None, "none", "auto"):
            raise bad_parameter(key, f"{key} is not supported here (function calling): send the "
                                "request without it", code="unsupported_value")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        kind = fmt.get("type") if isinstance(fmt, dict) else fmt
        raise bad_parameter("response_format", f"response_format {kind!r:.40} is not supported here "
                            "(only {\"type\": \"text\"}): ask for JSON in the prompt instead",
                            code="unsupported_value")
    if body.get("logit_bias"):
        raise bad_parameter("logit_bias", "logit_bias is not supported here: send the request "
                            "without it", code="unsupported_value")
    modalities = body.get("modalities")
    if (modalities is not None and modalities != ["text"]) or body.get("audio") is not None:
        raise bad_parameter("modalities", "only text answers are supported here (modalities: "
                            "[\"text\"], no audio)", code="unsupported_value")


def generation_request(body: dict, chat: bool) -> GenerationRequest:
    """The sampling settings common to chat and completions."""
    _refuse_unsupported(body)
    temperature = optional(body, "temperature", _is_number, "a number", 1.0)
    if not 0 <= temperature <= 2:
        raise bad_parameter("temperature", f"temperature must be between 0 and 2, got {temperature}")
    top_p = optional(body, "top_p", _is_number, "a number", 1.0)
    if not 0 < top_p <= 1:
        raise bad_parameter("top_p", f"top_p must be in (0, 1], got {top_p}")
    n = optional(body, "n", _is_int, "an integer", 1)
    if not 1 <= n <= MAX_CHOICES:
        raise bad_parameter("n", f"n must be between 1 and {MAX_CHOICES}, got {n}")
    for key in ("frequency_penalty", "presence_penalty"):
        v = optional(body, key, _is_number, "a number", 0)
        if v != 0:
            raise bad_parameter(key, f"{key} is not supported (only 0), got {v}", code="unsupported_value")
    max_tokens = None
    for key in ("max_completion_tokens", "max_tokens"):
        v = optional(body, key, _is_int, "an integer")
        if v is not None:
            if v < 1:
                raise bad_parameter(key, f"{key} must be at least 1, got {v}")
            max_tokens = v if max_tokens is None else max_tokens
    seed = optional(body, "seed", _is_int, "an integer")
    if seed is not None and not -(1 << 63) <= seed < (1 << 63):
        raise bad_parameter("seed", f"seed must be a 64-bit signed integer, got {seed}")
    if chat:
        logprobs = flag(body, "logprobs")
        top = optional(body, "top_logprobs", _is_int, "an integer", 0)
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            raise bad_parameter("top_logprobs", f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}")
        if top and not logprobs:
            raise bad_parameter("top_logprobs", "top_logprobs needs logprobs: true")
    else:
        top = optional(body, "logprobs", _is_int, "an integer")
        if top is not None and not 0 <= top <= 5:
            raise bad_parameter("logprobs", f"logprobs must be between 0 and 5, got {top}")
        logprobs, top = top is not None, top or 0
        if flag(body, "echo"):
            raise bad_parameter("echo", "echo is not supported", code="unsupported_value")
        best_of = optional(body, "best_of", _is_int, "an integer", 1)
        if best_of != 1:
            raise bad_parameter("best_of", f"best_of must be 1, got {best_of}", code="unsupported_value")
        if optional(body, "suffix", lambda v: isinstance(v, str), "a string"):
            raise bad_parameter("suffix", "suffix is not supported", code="unsupported_value")
    stream = flag(body, "stream")
    options = optional(body, "stream_options", lambda v: isinstance(v, dict), "an object", {})
    if options and not stream:
        raise bad_parameter("stream_options", "stream_options is only allowed with stream: true")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_parameter("stream_options", "stream_options.include_usage must be true or false",
                            code="invalid_type")
    sampling = SamplingParams(max_tokens=max_tokens or 0, temperature=float(temperature), top_p=float(top_p),
                              seed=seed, stop=_stops(body), logprobs=logprobs, top_logprobs=top)
    return GenerationRequest(model_name(body), sampling, max_tokens is not None, stream, include_usage, n)


def chat_messages(body: dict) -> list:
    """``messages`` as ``[{"role", "content"}]`` with text content (a list of text
    parts is joined, as OpenAI reads it)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_parameter("messages", "messages must be a non-empty list of {role, content} objects",
                            code="invalid_type")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_parameter(where, f"{where} must be an object with a string role", code="invalid_type")
        if m["role"] not in ("system", "developer", "user", "assistant", "tool"):
            raise bad_parameter(f"{where}.role", f"{where}.role {m['role']!r:.40} is not one of system, "
                                "developer, user, assistant, tool")
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            parts = []
            for p in content:
                if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                    raise bad_parameter(f"{where}.content", f"{where}.content: only text parts "
                                        '({"type": "text", "text": ...}) are supported', code="invalid_type")
                parts.append(p["text"])
            content = "".join(parts)
        elif not isinstance(content, str):
            raise bad_parameter(f"{where}.content", f"{where}.content must be a string or a list of text parts",
                                code="invalid_type")
        role = "system" if m["role"] == "developer" else m["role"]
        out.append({"role": role, "content": content})
    return out


def completion_prompts(body: dict) -> list:
    """``prompt``: a string, a list of token ids, or a list of either (one choice each)."""
    prompt = body.get("prompt")
    many = isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt)
    prompts = prompt if many else [prompt]
    for p in prompts:
        if isinstance(p, str) and p:
            continue
        if isinstance(p, list) and p and all(_is_int(t) for t in p):
            continue
        raise bad_parameter("prompt", "prompt must be a non-empty string, a non-empty list of token ids, "
                            "or a list of them", code="invalid_type")
    return prompts


@dataclass
class EmbeddingRequest:
    model: str | None
    texts: list
    base64: bool
    dimensions: int | None


def embedding_request(body: dict) -> EmbeddingRequest:
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts:
        raise bad_parameter("input", "input must be a string or a non-empty list of strings", code="invalid_type")
    if not all(isinstance(t, str) for t in texts):
        if all(_is_int(t) for t in texts) or all(isinstance(t, list) for t in texts):
            raise bad_parameter("input", "token-id input is not supported: send the texts",
                                code="unsupported_value")
        raise bad_parameter("input", "input must be a string or a list of strings", code="invalid_type")
    if len(texts) > MAX_EMBED_INPUTS:
        raise bad_parameter("input", f"input takes at most {MAX_EMBED_INPUTS} texts, got {len(texts)}")
    if any(not t for t in texts):
        raise bad_parameter("input", "input texts must not be empty")
    fmt = optional(body, "encoding_format", lambda v: isinstance(v, str), "a string", "float")
    if fmt not in ("float", "base64"):
        raise bad_parameter("encoding_format", f"encoding_format must be float or base64, got {fmt!r:.40}")
    dims = optional(body, "dimensions", _is_int, "an integer")
    if dims is not None and dims < 1:
        raise bad_parameter("dimensions", f"dimensions must be at least 1, got {dims}")
    return EmbeddingRequest(model_name(body), texts, fmt == "base64", dims)
