"""POST /v1/chat/completions: the model's chat template, n choices, logprobs, tools (calls parsed from the
reply, streamed as tool-call deltas) and <think> reasoning, as chat.completion or an SSE chunk stream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from quart import Blueprint, jsonify

from blazr.server import openai_schemas as schemas
from blazr.server.chat_prompt import ChatPrompt, build_chat_prompt, parse_messages, parse_tools
from blazr.server.chat_stream import ChoiceStream, finish_reason_for
from blazr.server.errors import ApiError, error_body
from blazr.server.generation import Delta, generate_n
from blazr.server.openai_format import (
    chat_choice,
    chat_chunk,
    chat_completion,
    chat_logprobs,
    chat_message,
    new_id,
    unix_now,
    usage_body,
)
from blazr.server.openai_request import (
    chat_logprobs_setting,
    choice_count,
    load_model,
    merge_streams,
    open_choices,
    prompt_param,
    request_params,
    stream_flags,
)
from blazr.server.openapi import documented
from blazr.server.protocol import get_list, read_json
from blazr.server.reasoning import REASONING_FIELD
from blazr.server.reply_parser import parse_reply
from blazr.server.sse import SSE_DONE, sse_event, sse_response
from blazr.server.state import LoadedModel, current_state
from blazr.server.structured_output import chat_constraint

bp = Blueprint("chat", __name__)
log = logging.getLogger("blazr.server")
ROUTE = "/v1/chat/completions"
MAX_TOKENS_KEYS = ("max_completion_tokens", "max_tokens")


@dataclass
class ChatRun:
    """A parsed chat request, ready to generate."""

    model: LoadedModel
    prompt: ChatPrompt
    n: int
    include_usage: bool
    logprobs: bool
    reasoning_field: str = REASONING_FIELD  # server.reasoning_field: "reasoning_content" or "reasoning"
    response_id: str = field(default_factory=lambda: new_id("chatcmpl-"))
    created: int = field(default_factory=unix_now)


@bp.post(ROUTE)
@documented(request=schemas.CHAT_REQUEST, response=schemas.CHAT_RESPONSE, stream="text/event-stream")
async def chat_completions():
    """Chat completion (OpenAI)"""
    body = await read_json()
    messages = parse_messages(get_list(body, "messages", required=True))
    tools = parse_tools(body)
    constraint = chat_constraint(body, tools)
    stream, include_usage = stream_flags(body)
    n = choice_count(body)
    top_logprobs = chat_logprobs_setting(body)
    model = await load_model(body)
    params = request_params(body, model, MAX_TOKENS_KEYS, strict=True)
    params.logprobs = top_logprobs
    params.constraint = constraint
    prompt = build_chat_prompt(model.llm, messages, tools)
    field_name = current_state().settings.server.reasoning_field
    run = ChatRun(model, prompt, n, include_usage, top_logprobs is not None, field_name)
    with prompt_param("messages"):
        if stream:
            streams = await open_choices(model, [prompt.ids], params, n, ROUTE)
            return sse_response(_chat_events(run, streams))
        deltas = await generate_n(model, prompt.ids, params, n, ROUTE)
    return jsonify(_chat_body(run, deltas))


def _reasoning_tokens(tokenizer, text: str | None) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


def _chat_body(run: ChatRun, deltas: list[Delta]) -> dict:
    tokenizer = run.model.llm.tokenizer
    choices, reasoning_tokens = [], 0
    for index, delta in enumerate(deltas):
        reply = parse_reply(delta.text, run.prompt.options)
        reasoning_tokens += _reasoning_tokens(tokenizer, reply.reasoning)
        message = chat_message(reply.content, reply.calls, reply.reasoning, run.reasoning_field)
        logprobs = chat_logprobs(tokenizer, delta.logprobs or []) if run.logprobs else None
        finish = finish_reason_for(delta.finish_reason, bool(reply.calls))
        choices.append(chat_choice(index, message, finish, logprobs))
    completion = sum(d.completion_tokens for d in deltas)
    usage = usage_body(deltas[0].prompt_tokens, completion, deltas[0].cached_tokens, reasoning_tokens)
    return chat_completion(run.response_id, run.created, run.model.name, choices, usage)


async def _chat_events(run: ChatRun, streams: list[AsyncIterator[Delta]]) -> AsyncIterator[bytes]:
    """The SSE body: role chunks, deltas as they come, the usage chunk if asked, then [DONE]."""
    tokenizer = run.model.llm.tokenizer
    usage_field = None if run.include_usage else False
    choices = [
        ChoiceStream(i, run.prompt.options, tokenizer, run.reasoning_field, run.logprobs)
        for i in range(run.n)
    ]

    def chunk(choice_list: list[dict], usage=usage_field) -> bytes:
        return sse_event(chat_chunk(run.response_id, run.created, run.model.name, choice_list, usage))

    try:
        for choice in choices:
            yield chunk([choice.start()])
        async for index, delta in merge_streams(streams):
            for choice_delta in choices[index].feed(delta):
                yield chunk([choice_delta])
        if run.include_usage:
            yield chunk([], _stream_usage(choices, tokenizer))
        yield SSE_DONE
    except ApiError as error:
        yield sse_event(error_body(error, "openai"))
    except Exception as error:  # after the 200 went out an error can only be reported in the stream
        log.exception("chat stream failed")
        yield sse_event(
            error_body(ApiError(500, f"generation failed: {error}", type="server_error"), "openai")
        )
    finally:
        for stream in streams:  # a client gone before the first token still frees its requests
            await stream.aclose()


def _stream_usage(choices: list[ChoiceStream], tokenizer) -> dict:
    finals = [c.last for c in choices if c.last is not None]
    prompt = finals[0].prompt_tokens if finals else 0
    cached = finals[0].cached_tokens if finals else 0
    reasoning = sum(_reasoning_tokens(tokenizer, c.reasoning_text) for c in choices)
    return usage_body(prompt, sum(d.completion_tokens for d in finals), cached, reasoning)
