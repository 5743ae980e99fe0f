"""Ollama's native API: GET /, /api/version, /api/tags, /api/ps; POST /api/show, /api/chat, /api/generate
(NDJSON streams by default, nanosecond timings, errors as {"error": "..."}).

Sampling defaults are the server's `generation` settings (what /api/show lists as parameters); a request's
`options` override them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from quart import Blueprint, Response, jsonify, request

from blazr import __version__, modelfile
from blazr.errors import ConfigError, TemplateError
from blazr.loaders import load_checkpoint
from blazr.model_dir import (
    ModelEntry,
    architecture_name,
    count_parameters,
    describe_model,
    find_in_model_dir,
    quantization_name,
)
from blazr.server import ollama_format as fmt
from blazr.server.chat_prompt import build_chat_prompt, parse_tools
from blazr.server.errors import ApiError
from blazr.server.generation import Delta, generate_stream, open_stream
from blazr.server.openai_request import select_adapter
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_list, get_str, read_json, sampling_params, slot_field
from blazr.server.reasoning import model_thinks
from blazr.server.reply_parser import ReplyOptions, ReplyParser, parse_reply
from blazr.server.routes.infill import find_fim_tokens, infill_prompt_ids
from blazr.server.sse import ndjson_response
from blazr.server.state import LoadedModel, current_state
from blazr.server.structured_output import format_constraint
from blazr.tokenizer import load_tokenizer
from blazr.tokenizer.chat_template import builtin_template_name, resolve_template
from blazr.tokenizer.ollama_template import cached_template

bp = Blueprint("ollama", __name__)
log = logging.getLogger("blazr.server")

_OBJ = {"type": "object"}
NDJSON = "application/x-ndjson"
CHAT_REQUEST = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": _OBJ},
        "tools": {"type": "array", "items": _OBJ},
        "stream": {"type": "boolean", "default": True},
        "options": _OBJ,
        "keep_alive": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        "think": {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["high", "medium", "low"]}]},
        "template": {
            "type": "string",
            "description": "a built-in template's name or an Ollama Go template, for this request",
        },
    },
}
GENERATE_REQUEST = {
    "type": "object",
    "properties": {
        **CHAT_REQUEST["properties"],
        "prompt": {"type": "string"},
        "suffix": {"type": "string", "description": "Fill in the middle (needs a model with FIM tokens)"},
        "system": {"type": "string"},
        "raw": {"type": "boolean"},
        "context": {"type": "array", "items": {"type": "integer"}},
    },
}
SHOW_REQUEST = {"type": "object", "properties": {"model": {"type": "string"}, "name": {"type": "string"}}}


# ---- management ----------------------------------------------------------------------------------------


@bp.get("/")
@documented(summary="Liveness text for Ollama clients (HEAD / works too)")
async def root():
    return Response("blazr is running", content_type="text/plain")


@bp.get("/api/version")
@documented(
    response={"type": "object", "properties": {"version": {"type": "string"}}},
    summary="Server version (Ollama)",
)
async def version():
    return jsonify({"version": __version__})


def loaded_entry(model: LoadedModel) -> ModelEntry:
    """A ModelEntry for a loaded model, from its checkpoint in memory (no file is read again)."""
    ckpt = model.llm.checkpoint
    return ModelEntry(
        name=model.name,
        path=model.path,
        format=ckpt.format,
        architecture=architecture_name(ckpt.config),
        size_bytes=model.size_bytes,
        quant_types=ckpt.quant_types(),
        quantization=quantization_name(ckpt.config),
        parameters=count_parameters(ckpt.tensors.values()),
    )


@bp.get("/api/tags")
@documented(
    response={"type": "object", "properties": {"models": {"type": "array"}}}, summary="Local models (Ollama)"
)
async def tags():
    state = current_state()
    entries = [e for e in await asyncio.to_thread(state.models.available) if not e.error]
    names = {e.name for e in entries}
    entries += [
        loaded_entry(m) for m in state.models.loaded() if m.name not in names
    ]  # e.g. a default by path
    return jsonify({"models": [fmt.tag_entry(e) for e in entries]})


@bp.get("/api/ps")
@documented(
    response={"type": "object", "properties": {"models": {"type": "array"}}}, summary="Loaded models (Ollama)"
)
async def ps():
    models = current_state().models.loaded()
    rows = [fmt.ps_entry(m, fmt.model_details(loaded_entry(m)), m.llm.backend.name != "cpu") for m in models]
    return jsonify({"models": rows})


def ollama_defaults() -> dict:
    """The server's sampling defaults under Ollama's option names."""
    gen = current_state().settings.generation
    names = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n")
    defaults = {name: getattr(gen, name) for name in names}
    defaults |= {"frequency_penalty": gen.frequency_penalty, "presence_penalty": gen.presence_penalty}
    defaults["num_predict"] = gen.max_tokens
    if gen.seed is not None:
        defaults["seed"] = gen.seed
    if gen.stop:
        defaults["stop"] = list(gen.stop)
    return defaults


async def _show_source(name: str) -> tuple[ModelEntry, Any, Any]:
    """(entry, checkpoint, tokenizer) of a loaded model, else of its file's headers (nothing is loaded)."""
    models = current_state().models
    path, served = models.resolve(name)  # the manager's lookup rules: 400 for unsafe names, 404 unknown
    for model in models.loaded():
        if model.path.resolve() == path.resolve():
            return loaded_entry(model), model.llm.checkpoint, model.llm.tokenizer
    entry = await asyncio.to_thread(describe_model, path, path.parent)
    if entry.error:
        raise ApiError(400, f"model '{name}' cannot be read: {entry.error}", param="model")
    if path.suffix == modelfile.SUFFIX:  # a derived model: its base's headers
        base = find_in_model_dir(modelfile.read(path).base, path.parent)
        if base is None:
            raise ApiError(
                400, f"model '{name}': its FROM model is no longer in the model directory", param="model"
            )
        path = base
    ckpt = await asyncio.to_thread(load_checkpoint, path)
    return dataclasses.replace(entry, name=served), ckpt, await asyncio.to_thread(load_tokenizer, ckpt)


@bp.post("/api/show")
@documented(SHOW_REQUEST, {"type": "object"}, summary="Model details, template and parameters (Ollama)")
async def show():
    body = await read_json()
    name = get_str(body, "model") or get_str(body, "name")
    if not name:
        raise ApiError(400, "'model' is required: the model to show", param="model")
    entry, ckpt, tokenizer = await _show_source(name)
    spec = modelfile.read(entry.path) if entry.path.suffix == modelfile.SUFFIX else None
    template = resolve_template(current_state().settings.inference.chat_template, tokenizer)
    if spec is not None and spec.template is not None:
        template = spec.template  # a derived model's TEMPLATE is the one its prompts use
    capabilities = ["completion"]
    if "tools" in template.lower():
        capabilities.append("tools")
    if model_thinks(tokenizer, template):
        capabilities.append("thinking")
    try:
        find_fim_tokens(tokenizer, ckpt.gguf_metadata)
        capabilities.append("insert")
    except ApiError:
        if spec is not None and spec.template is not None and cached_template(spec.template).uses_suffix:
            capabilities.append("insert")  # the template renders fill-in-the-middle itself
    body = fmt.show_body(entry, ckpt.config, template, capabilities, ollama_defaults())
    if spec is not None:  # Ollama shows a derived model's own Modelfile, system, parameters and messages
        body |= {
            "modelfile": spec.render(),
            "system": spec.system or "",
            "parameters": _parameter_lines(spec),
        }
        if spec.messages:
            body["messages"] = spec.messages
        if spec.license is not None:
            body["license"] = spec.license
    return jsonify(body)


def _parameter_lines(spec: modelfile.Modelfile) -> str:
    lines = []
    for name, value in spec.parameters.items():
        lines += [f"{name} {item}" for item in (value if isinstance(value, list) else [value])]
    return "\n".join(lines)


# ---- generation ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class OllamaRun:
    """A parsed /api/chat or /api/generate request with its model."""

    model: LoadedModel
    keep_alive: float | None
    stream: bool
    timings: fmt.Timings


async def _start(body: dict) -> OllamaRun:
    """Common request fields, then the model (its load time counts as load_duration)."""
    timings = fmt.Timings()
    keep_alive = fmt.parse_keep_alive(body.get("keep_alive"))
    stream = bool(get_bool(body, "stream", default=True))
    model, adapter = await current_state().models.get_adapted(get_str(body, "model"), keep_alive)
    model.require("generate", route=request.path)
    if adapter is not None:
        select_adapter(body, adapter, ("generate",))
    timings.load_seconds = time.perf_counter() - timings.started
    return OllamaRun(model, keep_alive, stream, timings)


def _params(body: dict, model: LoadedModel):
    """SamplingParams: the server defaults overlaid with the request's options; `format` ("json" or a JSON
    Schema) constrains the output."""
    defaults = fmt.sampling_body({"options": ollama_defaults()}) | modelfile.defaults_of(model.llm)
    merged = defaults | fmt.sampling_body(body)  # a derived model's PARAMETERs over the server's defaults
    params = sampling_params(merged, vocab_size=model.vocab_size, max_tokens_keys=("max_tokens",))
    params.constraint = format_constraint(body.get("format"))
    adapter = get_str(body, "lora_adapter")  # a top-level field (or model "base:adapter"), not an option
    if adapter is not None:
        params.lora_adapter = adapter
    params.slot_id = slot_field(body)
    return params


async def _load_only(run: OllamaRun, line: dict) -> Response:
    """An empty request loads the model, or unloads it with keep_alive 0 (Ollama's preload/unload idiom)."""
    reason = "load"
    if run.keep_alive == 0:
        await current_state().models.unload(run.model.name)
        reason = "unload"
    return jsonify(line | {"done": True, "done_reason": reason})


def _reply_options(options: ReplyOptions, body: dict) -> ReplyOptions:
    """think: false keeps the reply as plain content; otherwise <think> blocks become `thinking`."""
    return dataclasses.replace(options, thinks=False) if body.get("think") is False else options


@bp.post("/api/chat")
@documented(
    CHAT_REQUEST, {"type": "object"}, stream=NDJSON, summary="Chat (Ollama; NDJSON stream by default)"
)
async def chat():
    body = await read_json()
    raw_messages = get_list(body, "messages", default=[])
    chat_messages = fmt.chat_messages(raw_messages)
    tools = parse_tools({"tools": body.get("tools")})
    run = await _start(body)
    if not chat_messages:
        return await _load_only(run, fmt.chat_line(run.model.name))
    prompt = build_chat_prompt(
        run.model.llm, chat_messages, tools, template=request_template(body), think=_think(body)
    )
    options = _reply_options(prompt.options, body)
    params = _params(body, run.model)
    if run.stream:
        deltas = await open_stream(run.model, prompt.ids, params, "/api/chat")
        return ndjson_response(_guarded(_chat_lines(run, deltas, options)))
    delta = await _whole(run, prompt.ids, params, "/api/chat")
    reply = parse_reply(delta.text, options)
    calls = fmt.ollama_tool_calls([(c.name, c.arguments) for c in reply.calls])
    line = fmt.chat_line(run.model.name, reply.content or "", reply.reasoning or "", calls)
    return jsonify(line | _final(run, delta))


def _final(run: OllamaRun, delta: Delta) -> dict:
    return fmt.final_fields(
        fmt.done_reason(delta.finish_reason), run.timings, delta.prompt_tokens, delta.completion_tokens
    )


async def _chat_lines(
    run: OllamaRun, deltas: AsyncIterator[Delta], options: ReplyOptions
) -> AsyncIterator[dict]:
    parser, name = ReplyParser(options), run.model.name
    async for delta in _timed(run, deltas):
        pieces = parser.push(delta.text) if delta.text else []
        pieces += parser.finish() if delta.finished else []
        for piece in pieces:
            if piece.kind == "call":
                yield fmt.chat_line(
                    name, tool_calls=fmt.ollama_tool_calls([(piece.call.name, piece.call.arguments)])
                )
            elif piece.kind == "reasoning":
                yield fmt.chat_line(name, thinking=piece.text)
            else:
                yield fmt.chat_line(name, content=piece.text)
        if delta.finished:
            yield fmt.chat_line(name) | _final(run, delta)


async def _timed(run: OllamaRun, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    """Deltas with the timings marked; an error after the 200 becomes one {"error": ...} line's cause."""
    try:
        async for delta in deltas:
            run.timings.mark_token()
            if delta.finished:
                run.timings.finished = time.perf_counter()
            yield delta
    finally:
        await deltas.aclose()


async def _whole(run: OllamaRun, ids: list[int], params, route: str) -> Delta:
    """The whole completion as one Delta, timed token by token for Ollama's durations."""
    total = Delta("", [], None, False, None, len(ids), 0, 0)
    async for delta in _timed(run, generate_stream(run.model, ids, params, route)):
        total.text += delta.text
        total.token_ids += delta.token_ids
        total.finished, total.finish_reason = delta.finished, delta.finish_reason
        total.prompt_tokens, total.completion_tokens = delta.prompt_tokens, delta.completion_tokens
    return total


def _error_line(error: Exception) -> dict:
    if isinstance(error, ApiError):
        return {"error": error.message}
    log.exception("ollama stream failed", exc_info=error)
    return {"error": f"generation failed: {error}"}


async def _guarded(lines: AsyncIterator[dict]) -> AsyncIterator[dict]:
    """Mid-stream errors as one NDJSON {"error": ...} line (the status is already sent)."""
    try:
        async for line in lines:
            yield line
    except Exception as error:  # noqa: BLE001 - reported to the client, logged above
        yield _error_line(error)


def _context_ids(body: dict, model: LoadedModel) -> list[int]:
    context = get_list(body, "context", default=[])
    for i, token in enumerate(context):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < model.vocab_size:
            raise ApiError(
                400, f"'context[{i}]' = {token!r} is not a token id of this model", param="context"
            )
    return list(context)


def _generate_prompt(body: dict, model: LoadedModel) -> tuple[list[int], ReplyOptions]:
    """Prompt ids for /api/generate: FIM when `suffix` is given, the text as is when `raw`, else the chat
    template over an optional system message and the prompt as the user turn. A request's `template` (an
    Ollama Go template) replaces the model's for this request, as a derived model's TEMPLATE does; a Go
    template that reads .Suffix renders fill-in-the-middle itself."""
    if body.get("images"):
        raise ApiError(400, "'images': this server has no vision model support", param="images")
    text, suffix, tokenizer = (
        get_str(body, "prompt", default=""),
        get_str(body, "suffix"),
        model.llm.tokenizer,
    )
    template = request_template(body)
    go_source = template or modelfile.template_of(model.llm)
    if go_source is not None and builtin_template_name(go_source):
        go_source = None
    if suffix is not None:
        if go_source is not None and cached_template(go_source).uses_suffix:
            try:
                infill = cached_template(go_source).render_infill(text, suffix)
            except TemplateError as error:
                raise ApiError(400, f"the model's template failed: {error}", param="template") from None
            return tokenizer.encode(infill, add_special_tokens=True), ReplyOptions()
        fim = find_fim_tokens(tokenizer, model.llm.checkpoint.gguf_metadata)
        return infill_prompt_ids(tokenizer, fim, text, suffix, [], ""), ReplyOptions()
    if get_bool(body, "raw", default=False):
        return tokenizer.encode(text, add_special_tokens=True), ReplyOptions()
    system = get_str(body, "system")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    prompt = build_chat_prompt(model.llm, messages, None, template=template, think=_think(body))
    return prompt.ids, _reply_options(prompt.options, body)


def request_template(body: dict) -> str | None:
    """A request's `template`: a built-in template's name (chatml, llama3, ...) or an Ollama Go template,
    parsed now so that a bad one is a 400 naming Go's reason."""
    template = get_str(body, "template")
    if not template or builtin_template_name(template):
        return template or None
    try:
        return modelfile.check_template(template)
    except ConfigError as error:
        raise ApiError(400, f"'template': {error}", param="template") from None


THINK_LEVELS = ("high", "medium", "low")


def _think(body: dict) -> bool | str | None:
    """Ollama's `think`: true/false, or a level ("high", "medium", "low") for models that take one."""
    think = body.get("think")
    if think is None or isinstance(think, bool):
        return think
    if think not in THINK_LEVELS:
        raise ApiError(
            400, f"invalid think value: {think!r} (must be high, medium, low, true or false)", param="think"
        )
    return think


@bp.post("/api/generate")
@documented(
    GENERATE_REQUEST,
    {"type": "object"},
    stream=NDJSON,
    summary="Completion (Ollama; NDJSON stream by default)",
)
async def generate():
    body = await read_json()
    run = await _start(body)
    if not get_str(body, "prompt") and get_str(body, "suffix") is None:
        return await _load_only(run, fmt.generate_line(run.model.name))
    ids, options = _generate_prompt(body, run.model)
    ids = _context_ids(body, run.model) + ids
    params = _params(body, run.model)
    if run.stream:
        deltas = await open_stream(run.model, ids, params, "/api/generate")
        return ndjson_response(_guarded(_generate_lines(run, deltas, options, ids)))
    delta = await _whole(run, ids, params, "/api/generate")
    reply = parse_reply(delta.text, options)
    line = fmt.generate_line(run.model.name, reply.content or "", reply.reasoning or "")
    return jsonify(line | _final(run, delta) | {"context": ids + delta.token_ids})


async def _generate_lines(
    run: OllamaRun, deltas: AsyncIterator[Delta], options: ReplyOptions, ids: list[int]
) -> AsyncIterator[dict]:
    parser, name, generated = ReplyParser(options), run.model.name, list(ids)
    async for delta in _timed(run, deltas):
        generated += delta.token_ids
        pieces = parser.push(delta.text) if delta.text else []
        pieces += parser.finish() if delta.finished else []
        for piece in pieces:
            if piece.kind == "reasoning":
                yield fmt.generate_line(name, thinking=piece.text)
            else:
                yield fmt.generate_line(name, response=piece.text)
        if delta.finished:
            yield fmt.generate_line(name) | _final(run, delta) | {"context": generated}
