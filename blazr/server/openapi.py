"""OpenAPI 3 description of the server, built from the app's registered routes.

Route modules declare each view's request and response schemas with `@documented(...)`; `build_spec(app)`
walks app.url_map so every registered route appears, documented or not (undocumented ones get a generic
operation), and adds the error responses in the route family's own shape."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from blazr import __version__
from blazr.server.errors import family_for_path

OPENAPI_VERSION = "3.1.0"
DOC_ATTR = "__blazr_openapi__"
AUTH_FREE_PATHS = ("/health", "/metrics")

ERROR_SCHEMAS: dict[str, dict] = {
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
            }
        },
    },
    "AnthropicError": {
        "type": "object",
        "required": ["type", "error"],
        "properties": {
            "type": {"const": "error"},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "OllamaError": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
}
# One Server-Sent Event (OpenAPI before 3.2 has a text/event-stream `schema` describe each event).
SSE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
}
FAMILY_ERROR = {"openai": "OpenAIError", "anthropic": "AnthropicError", "ollama": "OllamaError"}
ERROR_STATUSES = {
    "400": "Malformed JSON or a bad field (the message names it)",
    "401": "Missing or wrong API key",
    "404": "Unknown model or route",
    "413": "Request body too large",
    "429": "Queue full; retry after Retry-After seconds",
    "503": "Model loading or server shutting down; retry after Retry-After seconds",
}


@dataclass
class RouteDoc:
    """What `@documented` records on a view function."""

    request: dict | None = None  # JSON Schema of the JSON request body
    response: dict | None = None  # JSON Schema of the 200 JSON response
    stream: str | None = None  # content type of a streamed 200 response (text/event-stream, ...)
    summary: str | None = None
    query: dict[str, dict] = field(default_factory=dict)  # query parameter name -> JSON Schema
    status: int = 200  # the success status
    request_type: str = "application/json"  # the request body's content type (multipart/form-data: uploads)
    other_types: tuple[str, ...] = ()  # more 200 content types, each a string (text, subtitles)


def documented(
    request: dict | None = None,
    response: dict | None = None,
    *,
    stream: str | None = None,
    summary: str | None = None,
    query: dict[str, dict] | None = None,
    status: int = 200,
    request_type: str = "application/json",
    other_types: tuple[str, ...] = (),
):
    """Declare a view's request/response JSON Schemas for /openapi.json. Apply it to the view function,
    above or below the blueprint's route decorator."""

    def mark(view):
        doc = RouteDoc(
            request, response, stream, summary, dict(query or {}), status, request_type, other_types
        )
        setattr(view, DOC_ATTR, doc)
        return view

    return mark


def build_spec(app) -> dict[str, Any]:
    """The OpenAPI document for every rule in app.url_map (static files excluded)."""
    paths: dict[str, dict] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        view = app.view_functions[rule.endpoint]
        path, params = _openapi_path(rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}) or ["head"]:
            operation = _operation(rule, view, method, params)
            paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "blazr",
            "version": __version__,
            "description": "OpenAI, Anthropic and Ollama APIs",
        },
        "paths": paths,
        "components": {
            "schemas": ERROR_SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
        "security": [{"bearer": []}, {"apiKeyHeader": []}],
    }


def _openapi_path(rule: str) -> tuple[str, list[str]]:
    """'/v1/models/<path:model_id>' -> ('/v1/models/{model_id}', ['model_id'])."""
    params = re.findall(r"<(?:[^:<>]+:)?([^<>]+)>", rule)
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule), params


def _operation(rule, view, method: str, params: list[str]) -> dict[str, Any]:
    doc: RouteDoc = getattr(view, DOC_ATTR, None) or RouteDoc()
    summary = doc.summary or ((view.__doc__ or "").strip().splitlines() or [rule.endpoint])[0]
    operation: dict[str, Any] = {
        "operationId": f"{rule.endpoint}_{method.lower()}",
        "summary": summary,
        "responses": _responses(rule.rule, doc),
    }
    parameters = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params]
    parameters += [{"name": n, "in": "query", "required": False, "schema": s} for n, s in doc.query.items()]
    if parameters:
        operation["parameters"] = parameters
    if doc.request is not None and method in ("POST", "PUT", "PATCH", "DELETE"):
        operation["requestBody"] = {
            "required": True,
            "content": {doc.request_type: {"schema": doc.request}},
        }
    if rule.rule in AUTH_FREE_PATHS:
        operation["security"] = []
    return operation


def _responses(path: str, doc: RouteDoc) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if doc.response is not None:
        content["application/json"] = {"schema": doc.response}
    for content_type in doc.other_types:
        content[content_type] = {"schema": {"type": "string"}}
    if doc.stream is not None:
        stream_schema = SSE_EVENT_SCHEMA if doc.stream == "text/event-stream" else {"type": "string"}
        content[doc.stream] = {"schema": stream_schema}
    ok: dict[str, Any] = {"description": "Success"}
    if content:
        ok["content"] = content
    error_ref = {"$ref": f"#/components/schemas/{FAMILY_ERROR[family_for_path(path)]}"}
    responses = {str(doc.status): ok}
    for status, why in ERROR_STATUSES.items():
        responses[status] = {"description": why, "content": {"application/json": {"schema": error_ref}}}
    return responses
