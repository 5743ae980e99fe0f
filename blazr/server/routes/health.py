"""Service routes: GET /health (readiness probe, no API key) and GET /openapi.json."""

from __future__ import annotations

import time

from quart import Blueprint, current_app, jsonify

from blazr import __version__
from blazr.server.openapi import build_spec, documented
from blazr.server.state import current_state

bp = Blueprint("health", __name__)

HEALTH_SCHEMA = {
    "type": "object",
    "required": ["status", "version", "loaded_models"],
    "properties": {
        "status": {"enum": ["ok", "loading", "error", "shutting_down"]},
        "version": {"type": "string"},
        "loaded_models": {"type": "array", "items": {"type": "string"}},
        "uptime_seconds": {"type": "number"},
        "error": {"type": "string"},
    },
}


def health_status(state) -> tuple[str, int]:
    """(status, HTTP code): 503 unless the server is ready to serve its default model."""
    if state.shutting_down:
        return "shutting_down", 503
    if state.models.default_error is not None:
        return "error", 503
    if not state.models.ready:
        return "loading", 503
    return "ok", 200


@bp.get("/health")
@documented(response=HEALTH_SCHEMA, summary="Readiness: 503 while the default model loads or on shutdown")
async def health():
    state = current_state()
    status, code = health_status(state)
    body = {
        "status": status,
        "version": __version__,
        "loaded_models": [m.name for m in state.models.loaded()],
        "uptime_seconds": round(time.time() - state.started_at, 3),
    }
    if state.models.default_error is not None:
        body["error"] = state.models.default_error.message
    response = jsonify(body)
    response.status_code = code
    if code == 503:
        response.headers["Retry-After"] = "5"
    return response


@bp.get("/openapi.json")
@documented(response={"type": "object"}, summary="This OpenAPI 3 document")
async def openapi():
    return jsonify(build_spec(current_app))
