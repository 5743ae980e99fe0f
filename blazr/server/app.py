"""The Quart app: route blueprints, API-key auth, CORS, body limit, request logging and metrics, and error
handlers that answer every failure in the route family's own error shape."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from quart import Quart, Request, Response, g, request
from werkzeug.exceptions import HTTPException

from blazr.config import Settings
from blazr.errors import BlazrError
from blazr.server.errors import ApiError, api_error_from_blazr, error_response, family_for_path
from blazr.server.metrics import Metrics
from blazr.server.openapi import AUTH_FREE_PATHS
from blazr.server.slo import SloChecker
from blazr.server.state import ModelManager, ServerState, current_state, load_for_serving

access_log = logging.getLogger("blazr.server.access")
log = logging.getLogger("blazr.server")
REAP_INTERVAL_SECS = 5.0  # how often idle models past their keep_alive are unloaded
AUDIO_PREFIX = "/v1/audio/"  # routes that take audio files (server.max_audio_body_size)
JSON_AUDIO_PATHS = ("/v1/audio/speech",)  # audio routes whose body is JSON: the general limit
CORS_HEADERS = (
    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, OpenAI-Organization"
)


def create_app(
    settings: Settings,
    *,
    model: str | None = None,
    model_dir: Path | None = None,
    api_keys: list[str] | None = None,
    loader: Any = load_for_serving,
    asr_models: dict[str, Path] | None = None,
    tts_models: dict[str, Path] | None = None,
    loras: dict[str, Path] | None = None,
) -> Quart:
    """A server app. `model` (else settings.default_model) is served when a request names none; other
    names load from `model_dir` on first use. `loader(path, settings) -> LLM` loads a model. `asr_models`
    (name -> Whisper model path, `serve --asr-model`) serve the /v1/audio transcription routes under those
    names, `tts_models` (name -> voice path, `serve --tts-model`) /v1/audio/speech; `loras` (name -> adapter
    path, `serve --lora`) are LoRA adapters of the default model."""
    from blazr.model_dir import model_dir as default_model_dir
    from blazr.server.routes import ALL_BLUEPRINTS

    app = Quart("blazr.server")
    metrics = Metrics()
    metrics.slo = SloChecker.from_settings(settings.server, metrics.slo_violations)
    directory = Path(model_dir) if model_dir is not None else default_model_dir(settings=settings)
    manager = ModelManager(
        settings,
        directory,
        model or settings.default_model,
        metrics,
        loader,
        asr_models=asr_models,
        tts_models=tts_models,
        loras=loras,
    )
    state = ServerState(settings, manager, metrics, [k for k in (api_keys or []) if k])
    app.extensions["blazr"] = state
    state.app = app
    app.config["MAX_CONTENT_LENGTH"] = settings.server.max_body_size
    app.request_class = _request_class(settings.server)
    app.config["RESPONSE_TIMEOUT"] = settings.server.request_timeout_secs
    app.config["JSON_SORT_KEYS"] = False
    for blueprint in ALL_BLUEPRINTS:
        app.register_blueprint(blueprint)
    _install_hooks(app, state)
    _install_error_handlers(app)
    _install_lifecycle(app, state)
    return app


def _install_hooks(app: Quart, state: ServerState) -> None:
    server = state.settings.server

    @app.before_request
    async def admit_request() -> Response | None:
        g.request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        g.started = time.perf_counter()
        state.metrics.requests_active.inc()
        g.active = True  # teardown_request counts it out, whatever happens after
        if request.method == "OPTIONS":
            return None  # CORS preflight carries no credentials
        if state.shutting_down and request.path not in AUTH_FREE_PATHS:
            raise ApiError(
                503, "the server is shutting down", type="unavailable_error", headers={"Retry-After": "5"}
            )
        if state.api_keys and request.path not in AUTH_FREE_PATHS:
            check_api_key(state.api_keys)
        length, limit = request.content_length, body_limit(request.path, server)
        if length is not None and length > limit:
            raise ApiError(413, f"the request body has {length} bytes; the limit is {limit}")
        return None

    @app.teardown_request
    async def count_out(_error: BaseException | None) -> None:
        if getattr(g, "active", False):
            g.active = False
            state.metrics.requests_active.dec()

    @app.after_request
    async def finish_request(response: Response) -> Response:
        _add_cors(response, server)
        request_id = getattr(g, "request_id", "-")
        response.headers["X-Request-Id"] = request_id
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        elapsed = time.perf_counter() - getattr(g, "started", time.perf_counter())
        state.metrics.requests_total.labels(route, str(response.status_code)).inc()
        state.metrics.request_seconds.labels(route).observe(elapsed)
        if server.request_logging:
            access_log.info(
                "request_id=%s method=%s route=%s status=%d latency_ms=%.1f",
                request_id,
                request.method,
                request.path,
                response.status_code,
                elapsed * 1000,
            )
        return response


def body_limit(path: str, server) -> int:
    """Largest request body for `path`: audio uploads get their own (larger) limit, as OpenAI takes 25 MB
    files while a JSON body of that size is a mistake."""
    audio = path.startswith(AUDIO_PREFIX) and path not in JSON_AUDIO_PATHS
    return server.max_audio_body_size if audio else server.max_body_size


def _request_class(server) -> type[Request]:
    """Requests whose body limit follows their path (body_limit). Quart enforces the limit while the body
    arrives, chunked or not, with the value the request was made with, so it is chosen here, not in a view."""

    class BlazrRequest(Request):
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
            limit = kwargs["max_content_length"] = body_limit(path, server)
            super().__init__(method, scheme, path, *args, **kwargs)
            self.max_content_length = limit  # the form parser reads this one, not the body's

    return BlazrRequest


def check_api_key(keys: list[str]) -> None:
    """Accept `Authorization: Bearer <key>` or `x-api-key: <key>`; every key is compared in constant time."""
    header = request.headers.get("Authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else ""
    given = given or request.headers.get("x-api-key", "").strip()
    if not given:
        raise ApiError(
            401,
            "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
            code="invalid_api_key",
        )
    matched = False
    for key in keys:  # no early exit: timing does not reveal which key (or how much of it) matched
        matched |= hmac.compare_digest(given.encode(), key.encode())
    if not matched:
        raise ApiError(401, "invalid API key", code="invalid_api_key")


def _add_cors(response: Response, server) -> None:
    if not server.cors_enabled:
        return
    origin = request.headers.get("Origin")
    if server.cors_origins:
        if origin not in server.cors_origins:
            return
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    else:
        response.headers["Access-Control-Allow-Origin"] = "*"
    if request.method == "OPTIONS":
        asked = request.headers.get("Access-Control-Request-Headers")
        response.headers["Access-Control-Allow-Headers"] = asked or CORS_HEADERS
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
        response.headers["Access-Control-Max-Age"] = "600"
    response.headers["Access-Control-Expose-Headers"] = "X-Request-Id, Retry-After"


def _install_error_handlers(app: Quart) -> None:
    def render(error: ApiError) -> Response:
        return error_response(error, family_for_path(request.path))

    @app.errorhandler(ApiError)
    async def on_api_error(error: ApiError):
        return render(error)

    @app.errorhandler(BlazrError)
    async def on_blazr_error(error: BlazrError):
        return render(api_error_from_blazr(error))

    @app.errorhandler(HTTPException)
    async def on_http_error(error: HTTPException):
        return render(_http_error(error))

    @app.errorhandler(Exception)
    async def on_unexpected(error: Exception):
        request_id = getattr(g, "request_id", "-")
        log.error("request %s failed", request_id, exc_info=error)
        message = f"internal server error ({type(error).__name__}); request id {request_id}"
        return render(ApiError(500, message, type="server_error"))


def _http_error(error: HTTPException) -> ApiError:
    status = error.code or 500
    if status == 404:
        return ApiError(404, f"no route {request.method} {request.path}", code="route_not_found")
    if status == 405:
        return ApiError(405, f"method {request.method} is not allowed on {request.path}")
    if status == 413:
        limit = body_limit(request.path, current_state().settings.server)
        return ApiError(413, f"the request body is larger than the limit of {limit} bytes")
    if status == 400:
        return ApiError(400, f"malformed request: {error.description}")
    return ApiError(status, error.description or error.name)


def _install_lifecycle(app: Quart, state: ServerState) -> None:
    tasks: list[asyncio.Task] = []

    @app.before_serving
    async def start() -> None:
        if state.models.default_model is not None:
            tasks.append(asyncio.ensure_future(state.models.preload()))
        tasks.append(asyncio.ensure_future(_reap_forever(state)))

    @app.after_serving
    async def stop() -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await state.models.close()


async def _reap_forever(state: ServerState) -> None:
    while True:
        await asyncio.sleep(REAP_INTERVAL_SECS)
        await state.models.reap()
