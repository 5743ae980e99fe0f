"""POST /v1/completions: raw-prompt text completion (prompt as text, texts, token ids or lists of them),
n choices per prompt, echo, logprobs, as text_completion or an SSE stream of text_completion chunks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from quart import Blueprint, jsonify

from blazr.server import openai_schemas as schemas
from blazr.server.errors import ApiError, error_body
from blazr.server.generation import Delta, generate_n
from blazr.server.openai_format import (
    completion_choice,
    completion_logprobs,
    new_id,
    text_completion,
    unix_now,
    usage_body,
)
from blazr.server.openai_request import (
    choice_count,
    completion_logprobs_setting,
    load_model,
    merge_streams,
    open_choices,
    prompt_param,
    request_params,
    stream_flags,
)
from blazr.server.openapi import documented
from blazr.server.protocol import get_bool, get_int, read_json
from blazr.server.sse import SSE_DONE, sse_event, sse_response
from blazr.server.state import LoadedModel
from blazr.server.structured_output import request_constraint

bp = Blueprint("completions", __name__)
log = logging.getLogger("blazr.server")
ROUTE = "/v1/completions"
MAX_PROMPTS = 64


@dataclass
class CompletionRun:
    model: LoadedModel
    prompts: list[list[int]]  # token ids per prompt
    n: int
    echo: bool
    logprobs: bool
    include_usage: bool
    response_id: str = field(default_factory=lambda: new_id("cmpl-"))
    created: int = field(default_factory=unix_now)

    def echo_text(self, choice: int) -> str:
        """The prompt text a choice starts with when echo is on (choice i belongs to prompt i // n)."""
        ids = self.prompts[choice // self.n]
        return self.model.llm.tokenizer.decode(ids, skip_special_tokens=True) if self.echo else ""


def _is_token_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def parse_prompts(raw: Any) -> list[str | list[int]]:
    """`prompt` as a list of prompts: each a string or a list of token ids (400 naming the field)."""
    if isinstance(raw, str):
        return [raw]
    if _is_token_list(raw):
        return [raw]
    if isinstance(raw, list) and raw and len(raw) <= MAX_PROMPTS:
        for i, item in enumerate(raw):
            if not (isinstance(item, str) or _is_token_list(item)):
                raise ApiError(
                    400, f"'prompt[{i}]' must be a string or a non-empty array of token ids", param="prompt"
                )
        return raw
    raise ApiError(
        400,
        f"'prompt' must be a string, an array of up to {MAX_PROMPTS} strings, an array of token ids, "
        "or an array of such arrays",
        param="prompt",
    )


def _reject_unsupported_fields(body: dict[str, Any], n: int) -> None:
    if body.get("suffix"):
        raise ApiError(
            400, "'suffix' is not supported here; use POST /v1/infill for fill-in-the-middle", param="suffix"
        )
    best_of = get_int(body, "best_of", min=1)
    if best_of is not None and best_of != n:
        raise ApiError(
            400,
            f"'best_of'={best_of} is not supported; it must equal n ({n}) or be left out",
            param="best_of",
        )


@bp.post(ROUTE)
@documented(
    request=schemas.COMPLETION_REQUEST, response=schemas.COMPLETION_RESPONSE, stream="text/event-stream"
)
async def completions():
    """Text completion (OpenAI legacy)"""
    body = await read_json()
    raw_prompts = parse_prompts(body.get("prompt"))
    constraint = request_constraint(body)
    stream, include_usage = stream_flags(body)
    n = choice_count(body)
    _reject_unsupported_fields(body, n)
    echo = bool(get_bool(body, "echo", default=False))
    top = completion_logprobs_setting(body)
    if echo and top is not None:
        raise ApiError(
            400,
            "'echo' with 'logprobs' needs prompt logprobs, which this server does not compute",
            param="echo",
        )
    model = await load_model(body)
    params = request_params(body, model, ("max_tokens",), strict=True)
    params.logprobs = top
    params.constraint = constraint
    tokenizer = model.llm.tokenizer
    prompts = [tokenizer.encode(p) if isinstance(p, str) else _checked_ids(p, model) for p in raw_prompts]
    run = CompletionRun(model, prompts, n, echo, top is not None, include_usage)
    with prompt_param("prompt"):
        if stream:
            streams = await open_choices(model, prompts, params, n, ROUTE)
            return sse_response(_completion_events(run, streams))
        deltas = [d for ids in prompts for d in await generate_n(model, ids, params, n, ROUTE)]
    return jsonify(_completion_body(run, deltas))


def _checked_ids(ids: list[int], model: LoadedModel) -> list[int]:
    bad = [t for t in ids if not 0 <= t < model.vocab_size]
    if bad:
        raise ApiError(
            400,
            f"'prompt' token id {bad[0]} is outside the vocabulary [0, {model.vocab_size})",
            param="prompt",
        )
    return ids


def _finish(reason: str | None) -> str:
    return reason if reason in ("stop", "length") else "stop"


def _usage(run: CompletionRun, finals: list[Delta]) -> dict:
    """Each prompt counts once however many choices it has; every choice's tokens count."""
    prompt = sum(len(ids) for ids in run.prompts)
    cached = sum(finals[i * run.n].cached_tokens for i in range(len(run.prompts)) if i * run.n < len(finals))
    return usage_body(prompt, sum(d.completion_tokens for d in finals), cached)


def _completion_body(run: CompletionRun, deltas: list[Delta]) -> dict:
    tokenizer = run.model.llm.tokenizer
    choices = []
    for index, delta in enumerate(deltas):
        logprobs = completion_logprobs(tokenizer, delta.logprobs or [], 0) if run.logprobs else None
        text = run.echo_text(index) + delta.text
        choices.append(completion_choice(index, text, _finish(delta.finish_reason), logprobs))
    return text_completion(run.response_id, run.created, run.model.name, choices, _usage(run, deltas))


async def _completion_events(run: CompletionRun, streams: list[AsyncIterator[Delta]]) -> AsyncIterator[bytes]:
    tokenizer = run.model.llm.tokenizer
    usage_field = None if run.include_usage else False
    offsets = [0] * len(streams)  # text offset of each choice, for logprobs
    finals: list[Delta | None] = [None] * len(streams)

    def chunk(choices: list[dict], usage=usage_field) -> bytes:
        return sse_event(text_completion(run.response_id, run.created, run.model.name, choices, usage))

    try:
        if run.echo:
            for index in range(len(streams)):
                yield chunk([completion_choice(index, run.echo_text(index), None, None)])
        async for index, delta in merge_streams(streams):
            finals[index] = delta
            logprobs = None
            if run.logprobs:
                logprobs = completion_logprobs(tokenizer, delta.logprobs or [], offsets[index])
                offsets[index] += len(delta.text)
            if delta.text or delta.finished or logprobs:
                reason = _finish(delta.finish_reason) if delta.finished else None
                yield chunk([completion_choice(index, delta.text, reason, logprobs)])
        if run.include_usage:
            yield chunk([], _usage(run, [d for d in finals if d is not None]))
        yield SSE_DONE
    except ApiError as error:
        yield sse_event(error_body(error, "openai"))
    except Exception as error:  # after the 200 went out an error can only be reported in the stream
        log.exception("completion stream failed")
        yield sse_event(
            error_body(ApiError(500, f"generation failed: {error}", type="server_error"), "openai")
        )
    finally:
        for stream in streams:  # a client gone before the first token still frees its requests
            await stream.aclose()
