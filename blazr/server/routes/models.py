"""GET /v1/models and /v1/models/{id}: the default model, loaded models and every model in the model dir."""

from __future__ import annotations

import asyncio

from quart import Blueprint, jsonify

from blazr.server.errors import ApiError
from blazr.server.openapi import documented
from blazr.server.state import current_state

bp = Blueprint("models", __name__)

MODEL_SCHEMA = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
        "loaded": {"type": "boolean"},
        "parent": {"type": "string", "description": "a LoRA adapter's base model (id base:adapter)"},
    },
}
LIST_SCHEMA = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": MODEL_SCHEMA}},
}


async def model_cards() -> list[dict]:
    """One OpenAI model object per servable model, the default first, without loading anything."""
    manager = current_state().models
    loaded = {m.name: m for m in manager.loaded()}
    cards: dict[str, dict] = {}
    default_name = manager.default_name()
    if default_name is not None:
        cards[default_name] = _card(default_name, manager.default_path, default_name in loaded)
    for entry in await asyncio.to_thread(manager.available):
        cards.setdefault(entry.name, _card(entry.name, entry.path, entry.name in loaded))
    for name, model in loaded.items():
        cards.setdefault(name, _card(name, model.path, True))
    return list(cards.values()) + _adapter_cards(manager, cards, loaded)


def _adapter_cards(manager, cards: dict[str, dict], loaded: dict) -> list[dict]:
    """One card per LoRA adapter, "base:adapter" with its base as parent (as vLLM lists served adapters)."""
    out = []
    paths = {manager.default_name(): manager.default_path} | {m.name: m.path for m in loaded.values()}
    for name, path in paths.items():
        if name is None or path is None or name not in cards:
            continue
        for adapter in manager.loras.names(path):
            card = dict(cards[name], id=f"{name}:{adapter}", parent=name)
            out.append(card)
    return out


def _card(name: str, path, loaded: bool) -> dict:
    try:
        created = int(path.stat().st_mtime)
    except OSError:
        created = 0
    return {"id": name, "object": "model", "created": created, "owned_by": "blazr", "loaded": loaded}


@bp.get("/v1/models")
@documented(response=LIST_SCHEMA, summary="Models this server can serve")
async def list_models():
    return jsonify({"object": "list", "data": await model_cards()})


@bp.get("/v1/models/<path:model_id>")
@documented(response=MODEL_SCHEMA, summary="One model, or 404")
async def get_model(model_id: str):
    for card in await model_cards():
        if card["id"] == model_id:
            return jsonify(card)
    raise ApiError(404, f"model '{model_id}' not found", param="model", code="model_not_found")
