"""Concurrent requests over a real server (tiny model, greedy): batched decoding gives every request exactly
the text it gets alone, streaming and non-streaming requests mix, and every KV block is free afterwards."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

PROMPTS = [f"Tell me about item {i}, please." for i in range(8)]
MAX_TOKENS = 24


def chat_body(prompt: str, stream: bool) -> dict:
    messages = [{"role": "user", "content": prompt}]
    return {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}


async def stream_chat(client: httpx.AsyncClient, url: str, prompt: str, stop_after: int | None = None) -> str:
    """The streamed reply's text; with `stop_after` the client hangs up after that many chunks."""
    text, chunks = "", 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=chat_body(prompt, True)) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            for choice in event["choices"]:
                text += choice["delta"].get("content") or ""
            chunks += 1
            if stop_after is not None and chunks >= stop_after:
                break
    return text


async def plain_chat(client: httpx.AsyncClient, url: str, prompt: str) -> str:
    response = await client.post(f"{url}/v1/chat/completions", json=chat_body(prompt, False))
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def record_batch_sizes(app) -> list[int]:
    """Wrap the engine's step to record how many sequences each step decoded together."""
    engine = app.extensions["blazr"].models.loaded()[0].llm.engine
    sizes: list[int] = []
    real_step = engine.step

    def step():
        sizes.append(len(engine.scheduler.running))
        return real_step()

    engine.step = step
    return sizes


def wait_pool_free(app, timeout: float = 10.0) -> tuple[int, int]:
    """(free blocks, all blocks) once the engine has nothing left to do (or the timeout passed)."""
    engine = app.extensions["blazr"].models.loaded()[0].llm.engine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (
        engine.has_unfinished() or engine.pool.num_free < engine.pool.num_blocks
    ):
        time.sleep(0.02)
    return engine.pool.num_free, engine.pool.num_blocks


def test_eight_concurrent_streams_each_match_their_solo_run(live_server):
    with live_server(max_concurrent_requests=8) as server:

        async def main():
            async with httpx.AsyncClient(timeout=120) as client:
                solo = [await stream_chat(client, server.url, p) for p in PROMPTS]
                sizes = record_batch_sizes(server.app)
                together = await asyncio.gather(*(stream_chat(client, server.url, p) for p in PROMPTS))
                return solo, list(together), sizes

        solo, together, sizes = asyncio.run(main())
        assert together == solo
        assert len(set(solo)) > 1  # the prompts really lead to different replies
        assert max(sizes) >= 4, f"the streams were never decoded together: batch sizes {sizes}"
        free, total = wait_pool_free(server.app)
        assert free == total


def test_streaming_plain_and_abandoned_requests_mix(live_server):
    """Streams, non-streaming requests and clients that hang up mid-stream run at once; the finished ones
    match their solo replies and the abandoned ones give their KV blocks back."""
    with live_server(max_concurrent_requests=8) as server:

        async def main():
            async with httpx.AsyncClient(timeout=120) as client:
                solo = [await plain_chat(client, server.url, p) for p in PROMPTS[:6]]
                runs = [
                    *(stream_chat(client, server.url, p) for p in PROMPTS[:3]),
                    *(plain_chat(client, server.url, p) for p in PROMPTS[3:6]),
                    *(stream_chat(client, server.url, p, stop_after=2) for p in PROMPTS[6:]),
                ]
                results = await asyncio.gather(*runs)
                return solo, list(results)

        solo, results = asyncio.run(main())
        assert results[:6] == solo
        free, total = wait_pool_free(server.app)
        assert free == total
        engine = server.app.extensions["blazr"].models.loaded()[0].llm.engine
        assert not engine.has_unfinished()
