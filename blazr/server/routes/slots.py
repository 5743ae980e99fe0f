"""Slots (blazr/engine/slots.py) over HTTP: llama.cpp's GET /slots and POST /slots/{id}?action=save|restore|erase
(files in --slot-save-path), and the original blazr's /api/slots handles (POST -> 201 with a new id, GET, DELETE).

A generation request joins a slot with llama.cpp's `id_slot` (an integer: such slots exist on first use; -1 means
none) or `slot_id` (an id /api/slots gave: 404 slot_not_found otherwise); when it ends, the conversation's KV
stays pinned in that slot for its next turn. Slots live in a loaded model's engine: unloading the model drops
them (a saved file restores them).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from quart import Blueprint, Response, jsonify, request

from blazr.engine.slots import model_fingerprint
from blazr.server.errors import ApiError
from blazr.server.openapi import documented
from blazr.server.protocol import get_str, read_json
from blazr.server.state import LoadedModel, current_state

bp = Blueprint("slots", __name__)

ACTIONS = ("save", "restore", "erase")
SLOT = {
    "type": "object",
    "required": ["id", "total_tokens", "is_processing"],
    "properties": {
        "id": {"type": ["integer", "string"]},
        "model": {"type": "string"},
        "n_ctx": {"type": "integer"},
        "total_tokens": {"type": "integer", "description": "tokens whose KV the slot holds"},
        "idle_seconds": {"type": "number"},
        "is_processing": {"type": "boolean"},
    },
}
ACTION_RESULT = {
    "type": "object",
    "required": ["id_slot"],
    "properties": {
        "id_slot": {"type": ["integer", "string"]},
        "filename": {"type": "string"},
        "n_saved": {"type": "integer"},
        "n_restored": {"type": "integer"},
        "n_erased": {"type": "integer"},
        "n_written": {"type": "integer"},
        "n_read": {"type": "integer"},
        "timings": {"type": "object"},
    },
}


def wire_id(slot_id: str) -> int | str:
    """llama.cpp's slots are numbered: a numeric id goes back as an integer."""
    return int(slot_id) if slot_id.isdigit() else slot_id


async def _model(name: str | None) -> LoadedModel:
    model = await current_state().models.get(name)
    model.require("generate", route=request.path)
    return model


def _card(model: LoadedModel, slot) -> dict:
    return slot.info() | {"id": wire_id(slot.id), "model": model.name, "n_ctx": model.num_ctx}


@bp.get("/slots")
@documented(response={"type": "array", "items": SLOT}, summary="The slots of a model (llama.cpp)")
async def list_slots():
    model = await _model(request.args.get("model"))
    return jsonify([_card(model, s) for s in model.llm.engine.slots.slots.values()])


@bp.post("/slots/<slot_id>")
@documented(
    {"type": "object", "properties": {"filename": {"type": "string"}}},
    ACTION_RESULT,
    query={"action": {"enum": list(ACTIONS)}, "model": {"type": "string"}},
    summary="Save, restore or erase a slot's KV (llama.cpp)",
)
async def slot_action(slot_id: str):
    action = request.args.get("action")
    if action not in ACTIONS:
        raise ApiError(400, f"'action' must be one of {', '.join(ACTIONS)}, got {action!r}", param="action")
    model = await _model(request.args.get("model"))
    engine = model.llm.engine
    if action == "erase":
        erased = await model.engine.run(lambda: engine.slots.erase(slot_id))
        return jsonify({"id_slot": wire_id(slot_id), "n_erased": erased})
    path = _slot_file(get_str(await read_json(), "filename", required=True))
    fingerprint = _fingerprint(model)
    start = time.perf_counter()
    if action == "save":
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
        tokens, nbytes = await model.engine.run(lambda: engine.slots.save(slot_id, path, fingerprint))
        ms = (time.perf_counter() - start) * 1000
        result = {"n_saved": tokens, "n_written": nbytes, "timings": {"save_ms": round(ms, 3)}}
    else:
        if not path.is_file():
            raise ApiError(
                404, f"slot file {path.name!r} does not exist in the slot save path", param="filename"
            )
        tokens, nbytes = await model.engine.run(lambda: engine.slots.restore(slot_id, path, fingerprint))
        ms = (time.perf_counter() - start) * 1000
        result = {"n_restored": tokens, "n_read": nbytes, "timings": {"restore_ms": round(ms, 3)}}
    return jsonify({"id_slot": wire_id(slot_id), "filename": path.name} | result)


@bp.post("/api/slots")
@documented(
    {"type": "object", "properties": {"model": {"type": "string"}}},
    {"type": "object", "required": ["id", "model", "status"]},
    status=201,
    summary="Open a slot: its id keeps a conversation's KV between requests (slot_id)",
)
async def open_slot():
    body = await read_json()
    model = await _model(get_str(body, "model"))
    slot_id = uuid.uuid4().hex
    engine = model.llm.engine
    await model.engine.run(lambda: engine.slots.create(slot_id))
    return jsonify({"id": slot_id, "model": model.name, "status": "active"}), 201


@bp.get("/api/slots")
@documented(response={"type": "array", "items": SLOT}, summary="Every slot of the loaded models")
async def all_slots():
    out = []
    for model in current_state().models.loaded():
        if model.task == "generate" and hasattr(model.llm, "engine"):
            out += [_card(model, s) for s in model.llm.engine.slots.slots.values()]
    return jsonify(out)


@bp.delete("/api/slots/<slot_id>")
@documented(status=204, summary="Close a slot (404 slot_not_found)")
async def close_slot(slot_id: str):
    for model in current_state().models.loaded():
        engine = getattr(model.llm, "engine", None)
        if model.task == "generate" and engine is not None and slot_id in engine.slots.slots:
            await model.engine.run(lambda store=engine.slots: store.remove(slot_id))
            return Response(status=204)
    raise ApiError(404, f"slot {slot_id!r} does not exist", type="slot_not_found", code="slot_not_found")


def _slot_file(filename: str) -> Path:
    """The file in --slot-save-path (a bare file name: no folders), as llama.cpp validates it."""
    folder = current_state().settings.server.slot_save_path
    if not folder:
        raise ApiError(
            501,
            "slot save and restore need a folder: start the server with --slot-save-path DIR",
            type="not_supported_error",
            code="not_supported",
        )
    if not filename or filename in (".", "..") or "/" in filename or "\\" in filename or len(filename) > 255:
        raise ApiError(400, f"invalid slot file name {filename!r}: a bare file name", param="filename")
    return Path(folder).expanduser() / filename


def _fingerprint(model: LoadedModel) -> str:
    llm = model.llm
    if getattr(llm, "slot_fingerprint", None) is None:
        llm.slot_fingerprint = model_fingerprint(llm.checkpoint)
    return llm.slot_fingerprint
