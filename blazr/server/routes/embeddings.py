"""POST /v1/embeddings: an embedding model's sentence vectors (its sentence-transformers pipeline: pooling,
Dense, Normalize; `dimensions` shortens Matryoshka vectors; `truncate`, `truncation_direction` and
`prompt_name` as text-embeddings-inference takes them), or for a text generation model the L2-normalised mean
of its last hidden states; as floats or as base64 little-endian float32 (what the openai Python client asks
for by default)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, jsonify

from blazr.server import openai_schemas as schemas
from blazr.server.encoder_calls import encoder_vectors
from blazr.server.errors import ApiError
from blazr.server.generation import check_local, embed
from blazr.server.openai_format import embeddings_body
from blazr.server.openai_request import load_model
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, get_str, read_json
from blazr.server.state import LoadedModel, current_state

bp = Blueprint("embeddings", __name__)


def max_inputs() -> int:
    """Inputs one embedding request may hold: server.max_embedding_inputs (2048 by default, as OpenAI)."""
    return current_state().settings.server.max_embedding_inputs


ENCODINGS = ("float", "base64")


def string_inputs(raw: Any, field: str) -> list[str]:
    """Ollama's and TEI's `input(s)`: a non-empty string or array of strings, within the server's limit."""
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) for x in inputs):
        raise ApiError(400, f"'{field}' must be a non-empty string or array of strings", param=field)
    if len(inputs) > max_inputs():
        raise ApiError(400, f"'{field}' has {len(inputs)} items; the limit is {max_inputs()}", param=field)
    return inputs


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def parse_inputs(raw: Any) -> list[str | list[int]]:
    """`input`: a string, strings, token ids or lists of token ids -> a list of inputs."""
    if isinstance(raw, str) or (_is_ids(raw) and raw):
        return [raw]
    if isinstance(raw, list) and raw:
        if len(raw) > max_inputs():
            raise ApiError(400, f"'input' has {len(raw)} items; the limit is {max_inputs()}", param="input")
        for i, item in enumerate(raw):
            if not (isinstance(item, str) or _is_ids(item)):
                raise ApiError(400, f"'input[{i}]' must be a string or an array of token ids", param="input")
        return raw
    raise ApiError(
        400,
        "'input' must be a non-empty string, array of strings, array of token ids, or array of those",
        param="input",
    )


def _token_ids(model: LoadedModel, inputs: list[str | list[int]]) -> list[list[int]]:
    tokenizer = model.llm.tokenizer
    out = []
    for i, item in enumerate(inputs):
        if isinstance(item, str) and not item:
            raise ApiError(400, f"'input[{i}]' is an empty string", param="input")
        out.append(tokenizer.encode(item) if isinstance(item, str) else list(item))
    return out


@bp.post("/v1/embeddings")
@documented(request=schemas.EMBEDDING_REQUEST, response=schemas.EMBEDDING_RESPONSE)
async def embeddings():
    """Embeddings (OpenAI)"""
    body = await read_json()
    inputs = parse_inputs(body.get("input"))
    encoding = get_str(body, "encoding_format", default="float")
    if encoding not in ENCODINGS:
        raise ApiError(
            400, f"'encoding_format' must be 'float' or 'base64', got {encoding!r}", param="encoding_format"
        )
    dimensions = get_int(body, "dimensions", min=1)
    model = await load_model(body, ("generate", "embed"))
    if model.task == "embed":  # an embedding model: its own pipeline, batched with other requests
        vectors, tokens = await encoder_vectors(
            model,
            inputs,
            dimensions=dimensions,
            truncate=bool(get_bool(body, "truncate", default=True)),
            direction=get_str(body, "truncation_direction", default="right"),
            prompt_name=get_str(body, "prompt_name"),
        )
        return jsonify(embeddings_body(model.name, vectors, encoding, tokens))
    check_local(model)
    width = model.llm.model.args.hidden_size
    if dimensions is not None and dimensions != width:
        raise ApiError(
            400,
            f"'dimensions'={dimensions} is not supported: model '{model.name}' makes {width}-dimensional "
            "embeddings and cannot shorten them",
            param="dimensions",
        )
    ids = _token_ids(model, inputs)
    vectors = await embed(model, ids)  # (N, D)
    return jsonify(embeddings_body(model.name, vectors, encoding, sum(len(x) for x in ids)))
