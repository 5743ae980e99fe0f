"""LoRA adapters of a served model: GET /v1/lora?model=, POST /v1/lora {model, name, path}, DELETE
/v1/lora/{name}?model= (features.md §1.5). Requests then pick an adapter with `lora_adapter` or
`model: "base:adapter"` (blazr/server/lora_adapters.py)."""

from __future__ import annotations

from quart import Blueprint, Response, jsonify, request

from blazr.server.errors import ApiError
from blazr.server.openapi import documented
from blazr.server.protocol import get_str, read_json
from blazr.server.state import current_state

bp = Blueprint("lora", __name__)

ADAPTER = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "path": {"type": "string"},
        "format": {"enum": ["peft", "gguf"]},
        "rank": {"type": "integer"},
    },
}
LISTING = {
    "type": "object",
    "required": ["model", "adapters"],
    "properties": {"model": {"type": "string"}, "adapters": {"type": "array", "items": ADAPTER}},
}
LOAD_REQUEST = {
    "type": "object",
    "required": ["model", "name", "path"],
    "properties": {
        "model": {"type": "string"},
        "name": {"type": "string", "description": "what requests call it: lora_adapter, or model base:name"},
        "path": {
            "type": "string",
            "description": "a PEFT adapter directory or a llama.cpp GGUF adapter, relative to the model directory",
        },
    },
}
LOADED = {
    "type": "object",
    "required": ["status", "model", "adapter"],
    "properties": {"status": {"const": "ok"}, "model": {"type": "string"}, "adapter": ADAPTER},
}
MODEL_QUERY = {"model": {"type": "string", "description": "the base model (required)"}}


def _model_query() -> str:
    name = request.args.get("model")
    if not name:
        raise ApiError(400, "the 'model' query parameter is required (?model=NAME)", param="model")
    return name


@bp.get("/v1/lora")
@documented(response=LISTING, query=MODEL_QUERY, summary="The LoRA adapters a model serves")
async def list_adapters():
    manager = current_state().models
    path, served = manager.resolve(_model_query())
    adapters = manager.loras.listing(path, manager.loaded_at_path(path))
    return jsonify({"model": served, "adapters": adapters})


@bp.post("/v1/lora")
@documented(LOAD_REQUEST, LOADED, summary="Load a LoRA adapter onto a model (400 lora_load_error)")
async def load_adapter():
    body = await read_json()
    name = get_str(body, "name", required=True)
    raw_path = get_str(body, "path", required=True)
    model_name = get_str(body, "model", required=True)
    manager = current_state().models
    model = await manager.get(model_name)
    info = await manager.loras.add(model, name, raw_path)
    return jsonify({"status": "ok", "model": model.name, "adapter": info})


@bp.delete("/v1/lora/<name>")
@documented(query=MODEL_QUERY, status=204, summary="Unload a LoRA adapter (404 lora_not_found)")
async def delete_adapter(name: str):
    manager = current_state().models
    path, _ = manager.resolve(_model_query())
    await manager.loras.remove(path, manager.loaded_at_path(path), name)
    return Response(status=204)
