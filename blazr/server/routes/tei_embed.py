"""POST /embed: text-embeddings-inference's embedding route (its /rerank shape is in rerank.py).

Request {"inputs": str | [str], "normalize": true, "truncate": false, "truncation_direction": "Right" | "Left",
"prompt_name": null, "dimensions": null}; response: an array of vectors, one per input. Embedding models only,
as TEI serves them."""

from __future__ import annotations

from quart import Blueprint, jsonify

from blazr.server.encoder_calls import encoder_vectors
from blazr.server.errors import ApiError
from blazr.server.openai_request import load_model
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, get_str, read_json
from blazr.server.routes.embeddings import string_inputs

bp = Blueprint("tei_embed", __name__)

EMBED_REQUEST = {
    "type": "object",
    "properties": {
        "inputs": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "normalize": {"type": "boolean", "default": True},
        "truncate": {"type": "boolean", "default": False},
        "truncation_direction": {"enum": ["Right", "Left"], "default": "Right"},
        "prompt_name": {"type": ["string", "null"]},
        "dimensions": {"type": ["integer", "null"], "minimum": 1},
        "model": {"type": "string", "description": "blazr: which served model (default: the served default)"},
    },
    "required": ["inputs"],
}
EMBED_RESPONSE = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
DIRECTIONS = {"right": "right", "left": "left"}  # TEI spells them Right / Left


@bp.post("/embed")
@documented(EMBED_REQUEST, EMBED_RESPONSE, summary="Embed inputs (text-embeddings-inference)")
async def embed():
    body = await read_json()
    inputs = string_inputs(body.get("inputs"), "inputs")
    direction = (get_str(body, "truncation_direction", default="Right") or "Right").lower()
    if direction not in DIRECTIONS:
        raise ApiError(400, "'truncation_direction' must be 'Right' or 'Left'", param="truncation_direction")
    model = await load_model(body, ("embed",))
    vectors, _ = await encoder_vectors(
        model,
        inputs,
        dimensions=get_int(body, "dimensions", min=1),
        truncate=bool(get_bool(body, "truncate", default=False)),
        direction=direction,
        prompt_name=get_str(body, "prompt_name"),
        normalize=bool(get_bool(body, "normalize", default=True)),
        field="inputs",
    )
    return jsonify(vectors.tolist())
