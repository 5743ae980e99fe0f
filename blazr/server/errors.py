"""HTTP errors and their bodies in each route family's own shape (OpenAI, Anthropic, Ollama).

Routes raise ApiError; the app's error handlers (app.py) render it with `error_response` in the shape of the
family the request path belongs to, so a client always gets the error format its SDK parses."""

from __future__ import annotations

import json

from quart import Response

from blazr.errors import (
    BlazrError,
    CheckpointError,
    ConfigError,
    InputError,
    LoraLoadError,
    LoraNotFoundError,
    ModelNotFoundError,
    TemplateError,
    TokenizerError,
    UnavailableError,
    UnsupportedError,
)

# Anthropic's error type per HTTP status (its SDK maps these to exception classes).
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

# OpenAI's error type per status when the raiser did not pick one (wire-formats.md §7).
OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "unavailable_error",
}


class ApiError(Exception):
    """An HTTP error with a client-facing message; `param` names the request field at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        # The default type fits 4xx input errors; other statuses get their own unless the raiser chose one.
        self.type = OPENAI_TYPES.get(status, type) if type == "invalid_request_error" else type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def family_for_path(path: str) -> str:
    """The route family of a request path: "anthropic", "ollama" or "openai"."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def error_body(err: ApiError, family: str) -> dict:
    """The JSON body of `err` in `family`'s shape."""
    if family == "anthropic":
        kind = ANTHROPIC_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": err.message}}
    if family == "ollama":
        return {"error": err.message}
    code = None if err.code is None else str(err.code)
    return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": code}}


def error_response(err: ApiError, family: str) -> Response:
    """A JSON Response for `err` in `family`'s shape, with its status and headers (e.g. Retry-After)."""
    body = json.dumps(error_body(err, family))
    response = Response(body, status=err.status, content_type="application/json")
    for name, value in err.headers.items():
        response.headers[name] = value
    return response


def api_error_from_blazr(error: BlazrError) -> ApiError:
    """Map a library error to its HTTP status: the user's input is at fault (4xx) unless it is unknown."""
    from blazr.engine.scheduler import QueueFullError  # here, not at import: the server's errors load first
    from blazr.engine.slots import SlotNotFoundError

    message = str(error)
    if isinstance(error, QueueFullError):  # the engine's bounded waiting queue is full: back-pressure
        return ApiError(
            429, message, type="rate_limit_error", code="queue_full", headers={"Retry-After": "1"}
        )
    if isinstance(error, ModelNotFoundError):
        return ApiError(404, message, type="not_found_error", param="model", code="model_not_found")
    if isinstance(error, SlotNotFoundError):
        return ApiError(404, message, type="slot_not_found", param="slot_id", code="slot_not_found")
    if isinstance(error, LoraNotFoundError):
        return ApiError(404, message, type="lora_not_found", param="lora_adapter", code="lora_not_found")
    if isinstance(error, LoraLoadError):
        # a 400 as vLLM answers a failed adapter load (the original blazr's 422 is no status clients expect),
        # with the original's error type
        return ApiError(400, message, type="lora_load_error", code="lora_load_error")
    if isinstance(error, InputError):
        return ApiError(400, message, param=error.param)
    if isinstance(error, ConfigError):
        return ApiError(400, message, param=_field_named_in(message))
    if isinstance(error, (CheckpointError, UnsupportedError, TokenizerError, TemplateError)):
        return ApiError(400, message)
    if isinstance(error, UnavailableError):  # a swarm replica that went away: another one, or it, will answer
        return ApiError(503, message, headers={"Retry-After": "1"})
    return ApiError(500, message, type="server_error")


def _field_named_in(message: str) -> str | None:
    """The field a ConfigError names ("sampling parameter top_p=..." -> "top_p"), if any."""
    prefix = "sampling parameter "
    if message.startswith(prefix):
        rest = message[len(prefix) :]
        for end in ("=", " ", ":"):
            rest = rest.split(end, 1)[0]
        return rest or None
    return None
