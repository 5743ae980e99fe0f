"""POST /v1/responses: the OpenAI Responses API, stateless, over the chat pipeline (template, tools, <think>
reasoning), as a response object or its SSE event sequence."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from quart import Blueprint, jsonify

from blazr.server import openai_schemas as schemas
from blazr.server.chat_prompt import ChatPrompt, build_chat_prompt, tool_choice_mode
from blazr.server.errors import ApiError
from blazr.server.generation import Delta, generate_text, open_stream
from blazr.server.openai_request import load_model, prompt_param, request_params
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_dict, get_str, read_json
from blazr.server.reply_parser import ReplyParser, parse_reply
from blazr.server.responses_format import (
    chat_tools,
    input_messages,
    output_items,
    response_head,
    response_object,
    response_usage,
)
from blazr.server.responses_stream import ResponseEvents
from blazr.server.sse import sse_response
from blazr.server.state import LoadedModel
from blazr.server.structured_output import chat_constraint

bp = Blueprint("responses", __name__)
log = logging.getLogger("blazr.server")
ROUTE = "/v1/responses"


def _reject_stateful(body: dict) -> None:
    if body.get("previous_response_id"):
        raise ApiError(
            400,
            "'previous_response_id' is not supported: this server stores no responses; send the whole "
            "conversation in 'input'",
            param="previous_response_id",
        )


def _reasoning_tokens(model: LoadedModel, text: str | None) -> int:
    return len(model.llm.tokenizer.encode(text, add_special_tokens=False)) if text else 0


@bp.post(ROUTE)
@documented(
    request=schemas.RESPONSES_REQUEST, response=schemas.RESPONSES_RESPONSE, stream="text/event-stream"
)
async def responses():
    """Responses (OpenAI)"""
    body = await read_json()
    instructions = get_str(body, "instructions")
    messages = input_messages(body.get("input"), instructions)
    tools = chat_tools(body.get("tools"))
    tools = None if tool_choice_mode(body) == "none" else tools
    _reject_stateful(body)
    text_format = get_dict(body, "text", default={}).get("format")
    constraint = chat_constraint(body, tools, "text.format", fmt=text_format, schema_inside=False)
    stream = bool(get_bool(body, "stream", default=False))
    model = await load_model(body)
    params = request_params(body, model, ("max_output_tokens",), strict=True)
    params.constraint = constraint
    prompt = build_chat_prompt(model.llm, messages, tools)
    head = response_head(model.name, instructions, params, body.get("max_output_tokens"), tools)
    head["text"]["format"] = text_format or head["text"]["format"]  # echo what shaped the output
    head["tool_choice"] = body.get("tool_choice") or head["tool_choice"]
    with prompt_param("input"):
        if stream:
            deltas = await open_stream(model, prompt.ids, params, ROUTE)
            return sse_response(_response_events(model, prompt, head, deltas))
        delta = await generate_text(model, prompt.ids, params, ROUTE)
    reply = parse_reply(delta.text, prompt.options)
    usage = response_usage(
        delta.prompt_tokens,
        delta.completion_tokens,
        delta.cached_tokens,
        _reasoning_tokens(model, reply.reasoning),
    )
    output = output_items(reply.content, reply.reasoning, reply.calls)
    return jsonify(response_object(head, _status(delta), output, usage))


def _status(delta: Delta) -> str:
    return "incomplete" if delta.finish_reason == "length" else "completed"


async def _response_events(
    model: LoadedModel, prompt: ChatPrompt, head: dict, deltas: AsyncIterator[Delta]
) -> AsyncIterator[bytes]:
    events = ResponseEvents(head)
    parser = ReplyParser(prompt.options)
    reasoning, last = "", None
    try:
        for chunk in events.start():
            yield chunk
        async for delta in deltas:
            last = delta
            pieces = parser.push(delta.text) if delta.text else []
            if delta.finished:
                pieces += parser.finish()
            for piece in pieces:
                reasoning += piece.text if piece.kind == "reasoning" else ""
                for chunk in events.piece(piece):
                    yield chunk
        usage = response_usage(
            last.prompt_tokens,
            last.completion_tokens,
            last.cached_tokens,
            _reasoning_tokens(model, reasoning),
        )
        for chunk in events.finish(_status(last), usage):
            yield chunk
    except ApiError as error:
        yield events.error(error.code or error.type, error.message, error.param)
    except Exception as error:  # after the 200 went out an error can only be reported in the stream
        log.exception("responses stream failed")
        yield events.error("server_error", f"generation failed: {error}", None)
    finally:
        await deltas.aclose()
