"""GET /metrics: Prometheus text exposition (no API key, like /health)."""

from __future__ import annotations

import asyncio
import time

from quart import Blueprint, Response

from blazr.server.metrics import CONTENT_TYPE
from blazr.server.openapi import documented
from blazr.server.state import current_state

bp = Blueprint("metrics", __name__)
RECOUNT_SECS = 30.0  # the model directory is listed at most this often (it reads every model's header)


@bp.get("/metrics")
@documented(stream=CONTENT_TYPE.split(";")[0], summary="Prometheus metrics")
async def metrics():
    state = current_state()
    loaded = state.models.loaded()
    state.metrics.loaded_models.set(len(loaded))
    generators = [m for m in loaded if m.task == "generate"]
    local = {m.name: m.llm.engine for m in generators if not getattr(m.llm, "remote", False)}
    remote = {m.name: await m.engine.counts() for m in generators if getattr(m.llm, "remote", False)}
    state.metrics.observe_engines(local, remote)
    admission = state.models.admission
    state.metrics.observe_admission(admission.tokens, admission.max_tokens)
    if time.monotonic() - state.metrics.models_counted_at >= RECOUNT_SECS:
        state.metrics.models_available.set(len(await asyncio.to_thread(state.models.available)))
        state.metrics.models_counted_at = time.monotonic()
    return Response(state.metrics.render(), content_type=CONTENT_TYPE)
