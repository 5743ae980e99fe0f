"""Ollama's embedding routes: POST /api/embed (inputs -> L2-normalised vectors) and the older
POST /api/embeddings (one prompt -> one vector). An embedding model answers with its own sentence-transformers
pipeline, batched with other requests; a text generation model with its mean-pooled hidden states."""

from __future__ import annotations

import time

import numpy as np
from quart import Blueprint, jsonify, request

from blazr.server import ollama_format as fmt
from blazr.server.encoder_calls import encoder_vectors
from blazr.server.errors import ApiError
from blazr.server.generation import embed
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, get_str, read_json
from blazr.server.routes.embeddings import string_inputs
from blazr.server.state import LoadedModel, current_state

bp = Blueprint("ollama_embed", __name__)

EMBED_REQUEST = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "truncate": {"type": "boolean", "default": True},
        "dimensions": {"type": "integer", "minimum": 1},
        "keep_alive": {"type": ["string", "number"]},
    },
    "required": ["model", "input"],
}
EMBED_RESPONSE = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "embeddings": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "total_duration": {"type": "integer"},
        "load_duration": {"type": "integer"},
        "prompt_eval_count": {"type": "integer"},
    },
}
LEGACY_REQUEST = {
    "type": "object",
    "properties": {"model": {"type": "string"}, "prompt": {"type": "string"}, "keep_alive": {}},
    "required": ["model", "prompt"],
}
LEGACY_RESPONSE = {
    "type": "object",
    "properties": {"embedding": {"type": "array", "items": {"type": "number"}}},
}


@bp.post("/api/embed")
@documented(EMBED_REQUEST, EMBED_RESPONSE, summary="Embed inputs (Ollama)")
async def embed_inputs():
    body = await read_json()
    started = time.perf_counter()
    inputs = string_inputs(body.get("input"), "input")
    truncate = bool(get_bool(body, "truncate", default=True))
    dimensions = get_int(body, "dimensions", min=1)
    model, loaded = await _model(body)
    vectors, tokens = await _vectors(model, inputs, truncate, dimensions)  # unit rows, as Ollama gives them
    return jsonify(
        {
            "model": get_str(body, "model") or model.name,
            "embeddings": vectors.astype(np.float32).tolist(),
            "total_duration": _ns(time.perf_counter() - started),
            "load_duration": _ns(loaded - started),
            "prompt_eval_count": tokens,
        }
    )


@bp.post("/api/embeddings")
@documented(LEGACY_REQUEST, LEGACY_RESPONSE, summary="Embed one prompt (Ollama, older route)")
async def embed_prompt():
    body = await read_json()
    prompt = get_str(body, "prompt", required=True)
    if not prompt:
        raise ApiError(400, "'prompt' is empty", param="prompt")
    model, _ = await _model(body)
    vectors, _ = await _vectors(model, [prompt], True, None)
    return jsonify({"embedding": vectors[0].astype(np.float32).tolist()})


def _ns(seconds: float) -> int:
    return max(0, int(seconds * fmt.NS_PER_SECOND))


async def _model(body: dict) -> tuple[LoadedModel, float]:
    keep_alive = fmt.parse_keep_alive(body.get("keep_alive"))
    model = await current_state().models.get(get_str(body, "model"), keep_alive)
    model.require("generate", "embed", route=request.path)
    return model, time.perf_counter()


async def _vectors(model: LoadedModel, inputs: list[str], truncate: bool, dimensions: int | None):
    """((N, D) unit vectors, tokens used) from an embedding model's pipeline, or a text model's mean states."""
    if model.task == "embed":
        return await encoder_vectors(model, inputs, dimensions=dimensions, truncate=truncate, normalize=True)
    if dimensions is not None:
        raise ApiError(
            400, f"'dimensions' is not supported by text generation model '{model.name}'", param="dimensions"
        )
    tokenizer, limit = model.llm.tokenizer, model.num_ctx
    ids = []
    for i, text in enumerate(inputs):
        tokens = tokenizer.encode(text)
        if len(tokens) > limit and not truncate:
            raise ApiError(
                400, f"input {i} has {len(tokens)} tokens, over the context of {limit}", param="input"
            )
        ids.append(tokens[:limit] or [0])
    return await embed(model, ids), sum(len(x) for x in ids)
