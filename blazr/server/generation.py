"""The one place routes turn prompt tokens into generated tokens and text.

Every request goes through `generate_stream`: context check, max_tokens clamp, admission (429/503), the
request deadline, metrics, and an abort when the consumer stops early so the KV blocks are freed at once."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from blazr.engine.async_engine import EngineStoppedError
from blazr.engine.request import SamplingParams
from blazr.errors import BlazrError
from blazr.models.batch import ForwardBatch
from blazr.server.errors import ApiError, api_error_from_blazr
from blazr.server.state import LoadedModel


@dataclass
class Delta:
    """New output of one request since the last Delta (or all of it, from generate_text)."""

    text: str
    token_ids: list[int]
    logprobs: list | None  # TokenLogprob per token in token_ids, when requested
    finished: bool
    finish_reason: str | None  # "stop" | "length" | None while running
    prompt_tokens: int
    completion_tokens: int  # all generated so far
    cached_tokens: int  # prompt tokens served from the prefix cache
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it (None for EOS)


def check_prompt(model: LoadedModel, prompt_ids: list[int], params: SamplingParams) -> SamplingParams:
    """Raise 400 for a prompt that leaves no room in the context, or for a max_tokens the client set on an
    OpenAI-style route that does not fit beside it (params.max_tokens_field); return params with any other
    max_tokens clamped to the room left."""
    num_ctx = model.num_ctx
    if len(prompt_ids) >= num_ctx:
        raise ApiError(
            400,
            f"the prompt has {len(prompt_ids)} tokens but model '{model.name}' has a context limit of "
            f"{num_ctx} tokens (prompt plus at least one generated token); shorten the prompt",
            code="context_length_exceeded",
        )
    field = params.max_tokens_field
    if field is not None and len(prompt_ids) + params.max_tokens > num_ctx:
        raise ApiError(
            400,
            f"model '{model.name}' has a context limit of {num_ctx} tokens, but {len(prompt_ids) + params.max_tokens} "
            f"were requested ({len(prompt_ids)} in the prompt, {params.max_tokens} in '{field}'); ask for at most "
            f"{num_ctx - len(prompt_ids)} or shorten the prompt",
            param=field,
            code="context_length_exceeded",
        )
    params = dataclasses.replace(params, max_tokens=min(params.max_tokens, num_ctx - len(prompt_ids)))
    slot = params.slot_id
    if slot is not None and not slot.isdigit() and slot not in model.llm.engine.slots.slots:
        raise ApiError(  # a named slot comes from POST /api/slots; llama.cpp's numbered ones exist on first use
            404,
            f"slot {slot!r} does not exist",
            type="slot_not_found",
            param="slot_id",
            code="slot_not_found",
        )
    try:
        return params.validate(model.vocab_size)
    except BlazrError as error:
        raise api_error_from_blazr(error) from None


async def generate_stream(
    model: LoadedModel, prompt_ids: list[int], params: SamplingParams, route: str
) -> AsyncIterator[Delta]:
    """Stream a completion as Deltas. Errors before the first Delta raise ApiError (the route can still
    answer with an error status); stopping the iteration early aborts the engine request."""
    params = check_prompt(model, prompt_ids, params)
    manager = model.manager
    budget = len(prompt_ids) + params.max_tokens
    manager.admission.admit(budget)
    model.active += 1
    try:
        async for delta in _run(model, prompt_ids, params):
            yield delta
    finally:
        manager.admission.release(budget)
        await manager.release(model)


async def open_stream(
    model: LoadedModel, prompt_ids: list[int], params: SamplingParams, route: str
) -> AsyncIterator[Delta]:
    """generate_stream with its first Delta already computed, for streaming routes: every error up to the
    first token (bad params, context, 429, 503) raises here, before the response status is sent."""
    stream = generate_stream(model, prompt_ids, params, route)
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        first = None
    return PrimedStream(first, stream)


class PrimedStream:
    """An async iterator of Deltas whose first one is already computed; aclose() always reaches the
    underlying stream (an unstarted async generator's aclose would skip its cleanup)."""

    def __init__(self, first: Delta | None, rest: AsyncIterator[Delta]):
        self._first = first
        self._rest = rest

    def __aiter__(self) -> PrimedStream:
        return self

    async def __anext__(self) -> Delta:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._rest)

    async def aclose(self) -> None:
        await self._rest.aclose()


async def _run(model: LoadedModel, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[Delta]:
    metrics = model.manager.metrics
    timeout = model.manager.settings.server.request_timeout_secs
    deadline = time.monotonic() + timeout
    outputs = model.engine.generate(prompt_ids, params, request_id=uuid.uuid4().hex)
    start = last = time.monotonic()
    first, completion, cached = True, 0, 0
    metrics.tokens_in_total.labels(model.name).inc(len(prompt_ids))
    try:
        while True:
            if time.monotonic() >= deadline:
                raise TimeoutError  # a slow consumer of already-queued outputs never waits inside timeout_at
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    out = await anext(outputs)
            except StopAsyncIteration:
                metrics.slo.record("e2e", time.monotonic() - start)  # a request that ran to its end
                return
            now = time.monotonic()
            if out.token_ids:
                latency = now - (start if first else last)
                (metrics.ttft_seconds if first else metrics.itl_seconds).observe(latency)
                metrics.slo.record("ttft" if first else "itl", latency)
                first, last = False, now
            completion = out.completion_tokens
            delta = _delta(out)
            cached = max(cached, delta.cached_tokens)
            yield delta
    except TimeoutError:
        raise ApiError(
            408, f"the request did not finish within request_timeout_secs={timeout}", type="timeout_error"
        ) from None
    except EngineStoppedError:
        raise ApiError(
            503, f"model '{model.name}' was unloaded during the request; retry", headers={"Retry-After": "1"}
        ) from None
    except BlazrError as error:
        raise api_error_from_blazr(error) from None
    finally:
        await outputs.aclose()  # aborts the engine request if it had not finished
        metrics.tokens_out_total.labels(model.name).inc(completion)
        metrics.note_generated(completion)
        metrics.cached_tokens_total.labels(model.name).inc(cached)
        (metrics.prefix_hits if cached else metrics.prefix_misses).labels(model.name).inc()


def _loop_time(deadline: float) -> float:
    """A time.monotonic() deadline on the event loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (deadline - time.monotonic())


def _delta(out) -> Delta:
    reason = out.finish_reason.value if out.finish_reason is not None else None
    return Delta(
        text=out.text,
        token_ids=list(out.token_ids),
        logprobs=list(out.logprobs) if out.logprobs else None,
        finished=out.finished,
        finish_reason=reason,
        prompt_tokens=out.prompt_tokens,
        completion_tokens=out.completion_tokens,
        cached_tokens=getattr(out, "cached_tokens", 0),  # set once the prefix cache lands
        stop_reason=out.stop_reason,
    )


async def generate_text(
    model: LoadedModel, prompt_ids: list[int], params: SamplingParams, route: str
) -> Delta:
    """The whole completion as one Delta."""
    total = Delta("", [], None, False, None, len(prompt_ids), 0, 0)
    async for delta in generate_stream(model, prompt_ids, params, route):
        total.text += delta.text
        total.token_ids += delta.token_ids
        if delta.logprobs:
            total.logprobs = (total.logprobs or []) + delta.logprobs
        total.finished, total.finish_reason = delta.finished, delta.finish_reason
        total.stop_reason = delta.stop_reason
        total.prompt_tokens, total.completion_tokens = delta.prompt_tokens, delta.completion_tokens
        total.cached_tokens = max(total.cached_tokens, delta.cached_tokens)
    return total


async def generate_n(
    model: LoadedModel, prompt_ids: list[int], params: SamplingParams, n: int, route: str
) -> list[Delta]:
    """n independent completions of one prompt (choice i uses seed + i when a seed is given)."""
    runs = []
    for i in range(n):
        seed = params.seed + i if params.seed is not None else None
        runs.append(generate_text(model, prompt_ids, dataclasses.replace(params, seed=seed), route))
    return list(await asyncio.gather(*runs))


def check_local(model: LoadedModel) -> None:
    """400 for a model whose weights are on a swarm's replicas: its hidden states are not here to pool."""
    if getattr(model.llm, "remote", False):
        raise ApiError(
            400,
            f"model '{model.name}' runs on a swarm's replicas, which serve generation only: embed with an "
            "embedding model (serve one beside it) instead",
            param="model",
        )


async def embed(model: LoadedModel, texts: list[list[int]]) -> np.ndarray:
    """(N, D) L2-normalised mean of the final hidden states of each token list, computed on the engine
    thread so it never overlaps a decode step of the same model."""
    check_local(model)
    for i, ids in enumerate(texts):
        if not ids:
            raise ApiError(400, f"input {i} is empty; every input needs at least one token", param="input")
        if len(ids) > model.num_ctx:
            raise ApiError(
                400,
                f"input {i} has {len(ids)} tokens but model '{model.name}' has a context limit of "
                f"{model.num_ctx} tokens",
                param="input",
                code="context_length_exceeded",
            )
        bad = [t for t in ids if not 0 <= int(t) < model.vocab_size]
        if bad:
            raise ApiError(400, f"input {i}: token id {bad[0]} is outside the vocabulary", param="input")
    try:
        return await model.engine.run(lambda: np.stack([_embed_one(model.llm, ids) for ids in texts]))
    except EngineStoppedError:
        raise ApiError(
            503, "the model was unloaded during the request; retry", headers={"Retry-After": "1"}
        ) from None


def _embed_one(llm, ids: list[int]) -> np.ndarray:
    """One forward pass over `ids` with a private KV cache; returns the (D,) normalised mean state."""
    block_size = 16
    num_blocks = -(-len(ids) // block_size)
    cache = llm.model.make_cache(num_blocks, block_size)  # private: never touches the engine's pool
    batch = ForwardBatch.single(ids, 0, list(range(num_blocks)), block_size)
    hidden = llm.backend.download(llm.model.hidden(batch, cache)).astype(np.float32)  # (T, D)
    mean = hidden.mean(axis=0)  # (D,)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else mean
