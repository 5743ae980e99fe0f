"""OpenAI request fields shared by the chat, completions and responses routes: stream flags, n, logprobs,
the model lookup, and merging the streams of n choices. Output constraints (response_format, grammar, forced
tool calls) are read by structured_output.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

from quart import request

from blazr import modelfile
from blazr.engine.request import MAX_LOGPROBS, SamplingParams
from blazr.server.errors import ApiError
from blazr.server.generation import Delta, open_stream
from blazr.server.protocol import get_bool, get_dict, get_int, get_str, sampling_params
from blazr.server.state import LoadedModel, current_state

MAX_CHOICES = 16  # n per prompt; each choice is a full generation


ANY_TASK = ("generate", "embed", "rerank")


async def load_model(body: dict[str, Any], tasks: tuple[str, ...] = ("generate",)) -> LoadedModel:
    """The model a request names (None or "" -> the served default); 400 unless it does one of `tasks`
    (an embedding model cannot chat). A "base:adapter" name picks the base model and sets the body's
    lora_adapter (generation routes only)."""
    model, adapter = await current_state().models.get_adapted(get_str(body, "model"))
    model.require(*tasks, route=request.path)
    if adapter is not None:
        select_adapter(body, adapter, tasks)
    return model


def select_adapter(body: dict[str, Any], adapter: str, tasks: tuple[str, ...]) -> None:
    """The adapter a "base:adapter" model name picked, as the body's lora_adapter (which must agree)."""
    if tasks != ("generate",):
        raise ApiError(400, f"LoRA adapter {adapter!r} applies to text generation routes only", param="model")
    given = body.get("lora_adapter")
    if given is not None and given != adapter:
        raise ApiError(
            400, f"model names adapter {adapter!r} but lora_adapter is {given!r}", param="lora_adapter"
        )
    body["lora_adapter"] = adapter


def request_params(
    body: dict[str, Any], model: LoadedModel, keys: tuple[str, ...], strict: bool = False
) -> SamplingParams:
    """SamplingParams from the body; max tokens from `keys`, defaulting to the server's generation setting.
    `strict` (OpenAI's chat, completions and responses): a max tokens the client set that does not fit beside
    the prompt is a 400 naming its field (generation.check_prompt), as OpenAI and vLLM answer."""
    default = current_state().settings.generation.max_tokens
    field = next((key for key in keys if body.get(key) is not None), None) if strict else None
    merged = _with_model_defaults(body, model, keys)
    params = sampling_params(
        merged, vocab_size=model.vocab_size, max_tokens_keys=keys, default_max_tokens=default
    )
    return dataclasses.replace(params, max_tokens_field=field) if field else params


def _with_model_defaults(body: dict[str, Any], model: LoadedModel, keys: tuple[str, ...]) -> dict[str, Any]:
    """The body over a derived model's PARAMETERs (blazr/modelfile.py): the request's own fields win; its
    num_predict stands for this route's max tokens field."""
    defaults = modelfile.defaults_of(model.llm)
    if "max_tokens" in defaults:
        defaults[keys[-1]] = defaults.pop("max_tokens")
    return defaults | body if defaults else body


@contextlib.contextmanager
def prompt_param(name: str) -> Iterator[None]:
    """Name the request field (messages, prompt, input) in a too-long-prompt error raised inside."""
    try:
        yield
    except ApiError as error:
        if error.param is None and error.code == "context_length_exceeded":
            error.param = name
        raise


def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage)."""
    stream = bool(get_bool(body, "stream", default=False))
    options = get_dict(body, "stream_options", default={})
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise ApiError(400, "'stream_options.include_usage' must be true or false", param="stream_options")
    return stream, include


def choice_count(body: dict[str, Any]) -> int:
    return get_int(body, "n", default=1, min=1, max=MAX_CHOICES)


def chat_logprobs_setting(body: dict[str, Any]) -> int | None:
    """Chat: logprobs (bool) + top_logprobs (0..20, only with logprobs) -> the engine's top-N, or None."""
    wanted = get_bool(body, "logprobs", default=False)
    top = get_int(body, "top_logprobs", min=0, max=MAX_LOGPROBS)
    if top is not None and not wanted:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return (top or 0) if wanted else None


def completion_logprobs_setting(body: dict[str, Any]) -> int | None:
    """Completions: logprobs is the number of alternatives per token (0..20), or null."""
    return get_int(body, "logprobs", min=0, max=MAX_LOGPROBS)


def seeded(params: SamplingParams, offset: int) -> SamplingParams:
    """Params for choice `offset`: seed + offset when seeded, so choices differ but stay reproducible."""
    if params.seed is None or offset == 0:
        return params
    return dataclasses.replace(params, seed=params.seed + offset)


async def open_choices(
    model: LoadedModel, prompts: list[list[int]], params: SamplingParams, n: int, route: str
) -> list[AsyncIterator[Delta]]:
    """One primed stream per (prompt, choice), so errors up to the first token raise before headers go out."""
    streams: list[AsyncIterator[Delta]] = []
    try:
        for ids in prompts:
            for i in range(n):
                streams.append(await open_stream(model, ids, seeded(params, i), route))
    except BaseException:
        for stream in streams:
            await stream.aclose()
        raise
    return streams


async def merge_streams(streams: list[AsyncIterator[Delta]]) -> AsyncIterator[tuple[int, Delta]]:
    """(stream index, Delta) from several streams as they arrive; closing this closes them all."""
    if len(streams) == 1:
        try:
            async for delta in streams[0]:
                yield 0, delta
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[Delta]) -> None:
        try:
            async for delta in stream:
                await queue.put((index, delta, None))
            await queue.put((index, None, None))
        except Exception as error:  # handed to the consumer, which reports it in the stream
            await queue.put((index, None, error))
        finally:
            await stream.aclose()

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            index, delta, error = await queue.get()
            if error is not None:
                raise error
            if delta is None:
                remaining -= 1
            else:
                yield index, delta
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
