"""POST /v1/rerank and /rerank: order documents by relevance to a query (wire-formats.md §10).

The score depends on the model served: a reranker (a cross-encoder such as BertForSequenceClassification, or
a decoder loaded with task=rerank) scores each query/document pair, sigmoid of its logit in [0, 1] (TEI's
`raw_scores: true` gives the logit); an embedding model scores by the cosine similarity of the query's and the
document's sentence vectors. A text generation model has no relevance head: asking it is a 400 naming the
model. Two shapes: Jina/Cohere (`documents`) and TEI (`texts`).
"""

from __future__ import annotations

import numpy as np
from quart import Blueprint, jsonify

from blazr.server.encoder_calls import encoder_scores
from blazr.server.errors import ApiError
from blazr.server.openai_request import load_model
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, get_list, get_str, read_json

bp = Blueprint("rerank", __name__)

SCORE_NOTE = (
    "a reranker model's relevance (sigmoid of its logit, in [0, 1]; the logit itself with TEI's raw_scores); "
    "for an embedding model the cosine similarity in [-1, 1] of the query's and the document's vectors"
)
RERANK_REQUEST = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "query": {"type": "string", "minLength": 1},
        "documents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "object",
                        "required": ["text"],
                        "properties": {"text": {"type": "string", "minLength": 1}},
                    },
                ]
            },
            "description": "Jina/Cohere shape",
        },
        "top_n": {"type": "integer", "minimum": 1},
        "return_documents": {"type": "boolean", "default": True},
        "texts": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "minLength": 1},
            "description": "TEI shape (answers a bare array)",
        },
        "truncate": {"type": "boolean", "default": False, "description": "TEI: cut inputs to the context"},
        "raw_scores": {"type": "boolean", "default": False, "description": "TEI: a reranker's logits"},
        "return_text": {"type": "boolean", "default": False, "description": "TEI: echo each text"},
        "instruction": {
            "type": "string",
            "minLength": 1,
            "description": "a decoder reranker's task (Qwen3-Reranker's <Instruct>); a 400 for other models",
        },
    },
    "required": ["query"],
}
RERANK_RESPONSE = {
    "oneOf": [
        {
            "type": "object",
            "description": "Jina/Cohere shape: results sorted by relevance_score, highest first",
            "properties": {
                "model": {"type": "string"},
                "object": {"const": "list"},
                "usage": {"type": "object"},
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "index": {"type": "integer"},
                            "relevance_score": {"type": "number", "description": SCORE_NOTE},
                            "document": {"type": "object", "properties": {"text": {"type": "string"}}},
                        },
                    },
                },
            },
        },
        {
            "type": "array",
            "description": "TEI shape, sorted by score, highest first",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "score": {"type": "number", "description": SCORE_NOTE},
                    "text": {"type": "string"},
                },
            },
        },
    ]
}
SUMMARY = "Rerank documents: a reranker's scores, else the cosine similarity of embeddings"


@bp.post("/v1/rerank")
@bp.post("/rerank")
@documented(RERANK_REQUEST, RERANK_RESPONSE, summary=SUMMARY)
async def rerank():
    """Rerank documents by the served model's relevance scores (see SCORE_NOTE)."""
    body = await read_json()
    query = get_str(body, "query", required=True)
    tei = "texts" in body
    documents = _texts(body, "texts") if tei else _texts(body, "documents")
    top_n = get_int(body, "top_n", min=1)
    truncate = bool(get_bool(body, "truncate", default=False))
    return_text = get_bool(body, "return_text" if tei else "return_documents", default=not tei)
    model = await load_model(body, ("rerank", "embed"))
    raw = bool(get_bool(body, "raw_scores", default=False))
    field = "texts" if tei else "documents"
    instruction = get_str(body, "instruction")
    scores, tokens = await encoder_scores(model, query, documents, truncate, raw, field, instruction)  # (N,)
    order = [int(i) for i in np.argsort(-scores, kind="stable")][: top_n or len(documents)]
    if tei:
        return jsonify([_tei_item(i, float(scores[i]), documents[i], return_text) for i in order])
    results = [_jina_item(i, float(scores[i]), documents[i], return_text) for i in order]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return jsonify({"model": model.name, "object": "list", "usage": usage, "results": results})


def _texts(body: dict, name: str) -> list[str]:
    """Documents as strings ({"text": ...} objects are accepted in the Jina/Cohere shape)."""
    items = get_list(body, name, required=True)
    if not items:
        raise ApiError(400, f"'{name}' must not be empty", param=name)
    texts = []
    for i, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) and name == "documents" else item
        if not isinstance(text, str):
            raise ApiError(400, f"'{name}[{i}]' must be a string or {{\"text\": string}}", param=name)
        texts.append(text)
    return texts


def _jina_item(index: int, score: float, text: str, with_document: bool) -> dict:
    item: dict = {"index": index, "relevance_score": score}
    if with_document:
        item["document"] = {"text": text}
    return item


def _tei_item(index: int, score: float, text: str, with_text: bool) -> dict:
    item: dict = {"index": index, "score": score}
    if with_text:
        item["text"] = text
    return item
