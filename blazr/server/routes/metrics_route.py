"""GET /metrics: Prometheus text exposition (no API key, like /health)."""

from __future__ import annotations

from quart import Blueprint, Response

from blazr.server.metrics import CONTENT_TYPE
from blazr.server.openapi import documented
from blazr.server.state import current_state

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
@documented(stream=CONTENT_TYPE.split(";")[0], summary="Prometheus metrics")
async def metrics():
    state = current_state()
    state.metrics.loaded_models.set(len(state.models.loaded()))
    return Response(state.metrics.render(), content_type=CONTENT_TYPE)
