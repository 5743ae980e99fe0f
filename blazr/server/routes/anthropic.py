"""Anthropic Messages API: POST /v1/messages (JSON or the SSE event stream) and /v1/messages/count_tokens.

Auth (x-api-key or Bearer) and the {"type": "error", ...} error body come from the app; replies go through
the same reasoning / tool-call parser as the OpenAI chat route, so thinking and tool_use blocks agree."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from quart import Blueprint, jsonify

from blazr import modelfile
from blazr.server import anthropic_format as fmt
from blazr.server.chat_prompt import ChatPrompt, build_chat_prompt
from blazr.server.errors import ApiError
from blazr.server.generation import Delta, generate_text, open_stream
from blazr.server.openai_request import load_model
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, get_list, read_json, sampling_params
from blazr.server.reply_parser import ReplyParser, parse_reply
from blazr.server.sse import sse_response
from blazr.server.state import LoadedModel
from blazr.server.structured_output import tool_call_constraint

bp = Blueprint("anthropic", __name__)
log = logging.getLogger("blazr.server")
ROUTE = "/v1/messages"

_TEXT_BLOCK = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
_TOOL_USE_BLOCK = {
    "type": "object",
    "required": ["type", "id", "name", "input"],
    "properties": {
        "type": {"const": "tool_use"},
        "id": {"type": "string"},
        "name": {"type": "string"},
        "input": {"type": "object"},
    },
}
_TOOL_RESULT_BLOCK = {
    "type": "object",
    "required": ["type", "tool_use_id"],
    "properties": {
        "type": {"const": "tool_result"},
        "tool_use_id": {"type": "string"},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]},
    },
}
_MESSAGES = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["user", "assistant"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"anyOf": [_TEXT_BLOCK, _TOOL_USE_BLOCK, _TOOL_RESULT_BLOCK]}},
                ]
            },
        },
    },
}
_COMMON = {
    "model": {"type": "string"},
    "messages": _MESSAGES,
    "system": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]},
    "tools": {"type": "array", "items": {"type": "object", "required": ["name"]}},
    # "any" and "tool" force a call (constrained decoding of {"name", "arguments"})
    "tool_choice": {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": ["auto", "any", "tool", "none"]}, "name": {"type": "string"}},
    },
    "thinking": {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"enum": ["enabled", "disabled", "adaptive"]},
            "budget_tokens": {"type": "integer"},
        },
    },
}
MESSAGES_REQUEST = {
    "type": "object",
    "required": ["messages", "max_tokens"],
    "properties": {
        **_COMMON,
        "max_tokens": {"type": "integer", "minimum": 1},
        "stop_sequences": {"type": "array", "items": {"type": "string"}},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
        "top_p": {"type": "number"},
        "top_k": {"type": "integer"},
    },
}
MESSAGES_RESPONSE = {
    "type": "object",
    "required": ["id", "type", "role", "content", "model", "stop_reason", "usage"],
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "content": {"type": "array", "items": {"type": "object"}},
        "model": {"type": "string"},
        "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": {"type": "object"},
    },
}
COUNT_REQUEST = {"type": "object", "required": ["messages"], "properties": _COMMON}
COUNT_RESPONSE = {"type": "object", "properties": {"input_tokens": {"type": "integer"}}}


async def _prompt(body: dict) -> tuple[LoadedModel, ChatPrompt]:
    """The model and the rendered prompt of a Messages (or count_tokens) body."""
    messages = fmt.chat_messages(get_list(body, "messages", required=True), body.get("system"))
    tools = fmt.openai_tools(get_list(body, "tools"), body.get("tool_choice"))
    fmt.thinking_enabled(body.get("thinking"))  # validated; a thinking model's <think> is always split
    model = await load_model(body)
    return model, build_chat_prompt(model.llm, messages, tools)


@bp.post(ROUTE)
@documented(
    MESSAGES_REQUEST, MESSAGES_RESPONSE, stream="text/event-stream", summary="Create a message (Anthropic)"
)
async def messages():
    body = await read_json()
    if get_int(body, "max_tokens", min=1) is None:
        raise ApiError(400, "max_tokens: field required", param="max_tokens")
    stream = bool(get_bool(body, "stream", default=False))
    model, prompt = await _prompt(body)
    params = sampling_params(
        modelfile.defaults_of(model.llm) | fmt.sampling_body(body),  # the request's fields win
        vocab_size=model.vocab_size,
        max_tokens_keys=("max_tokens",),
    )
    forced, name = fmt.forced_tool(body.get("tool_choice"))
    if forced:  # the reply becomes one {"name", "arguments"} call of the tool, parsed into a tool_use block
        tools = fmt.openai_tools(get_list(body, "tools"), body.get("tool_choice"))
        params.constraint = tool_call_constraint(tools, name, "tool_choice")
    msg_id = fmt.message_id()
    if stream:
        deltas = await open_stream(model, prompt.ids, params, ROUTE)
        return sse_response(_events(deltas, msg_id, model.name, prompt, len(prompt.ids)))
    delta = await generate_text(model, prompt.ids, params, ROUTE)
    return jsonify(_message(delta, msg_id, model.name, prompt))


@bp.post("/v1/messages/count_tokens")
@documented(COUNT_REQUEST, COUNT_RESPONSE, summary="Count a message's input tokens (Anthropic)")
async def count_tokens():
    _, prompt = await _prompt(await read_json())
    return jsonify({"input_tokens": len(prompt.ids)})


def _stop_string(delta: Delta) -> str | None:
    """The stop sequence that ended generation (a stop token id or EOS is not one)."""
    return delta.stop_reason if isinstance(delta.stop_reason, str) else None


def _message(delta: Delta, msg_id: str, model: str, prompt: ChatPrompt) -> dict:
    reply = parse_reply(delta.text, prompt.options)
    content = [fmt.thinking_block(reply.reasoning)] if reply.reasoning else []
    if reply.content:
        content.append(fmt.text_block(reply.content))
    content += [fmt.tool_use_block(call.name, call.arguments) for call in reply.calls]
    stop = fmt.stop_fields(delta.finish_reason, _stop_string(delta), bool(reply.calls))
    usage = fmt.usage(delta.prompt_tokens, delta.completion_tokens, delta.cached_tokens)
    return fmt.message_body(msg_id, model, content, stop, usage)


async def _events(
    deltas: AsyncIterator[Delta], msg_id: str, model: str, prompt: ChatPrompt, input_tokens: int
) -> AsyncIterator[bytes]:
    """message_start, the blocks as the parser releases them, message_delta and message_stop; an error
    after the 200 is an `event: error` (the SDK raises it)."""
    parser, events = ReplyParser(prompt.options), fmt.MessageEvents(msg_id, model, input_tokens)
    last, used_tools = None, False
    try:
        async for delta in deltas:
            if last is None:
                events.cached_tokens = delta.cached_tokens
                for chunk in events.start():
                    yield chunk
            last = delta
            pieces = parser.push(delta.text) if delta.text else []
            pieces += parser.finish() if delta.finished else []
            for piece in pieces:
                used_tools |= piece.kind == "call"
                for chunk in _piece_events(events, piece):
                    yield chunk
        for chunk in events.start() if last is None else []:
            yield chunk
        reason, tokens = (last.finish_reason, last.completion_tokens) if last else (None, 0)
        stop = fmt.stop_fields(reason, _stop_string(last) if last else None, used_tools)
        for chunk in events.finish(stop, tokens):
            yield chunk
    except ApiError as error:
        yield events.error(error)
    except Exception as error:  # the 200 is already sent: report in the stream
        log.exception("messages stream failed")
        yield events.error(ApiError(500, f"generation failed: {error}", type="api_error"))
    finally:
        await deltas.aclose()  # a client that left: abort the engine request now


def _piece_events(events: fmt.MessageEvents, piece) -> list[bytes]:
    if piece.kind == "call":
        return events.tool_use(piece.call.name, piece.call.arguments)
    if piece.kind == "reasoning":
        return events.thinking(piece.text)
    return events.text(piece.text)
