"""A bounded soak over a real server (the tiny model): 16 clients for SECONDS mix full and cut streams, plain
requests in the OpenAI, Anthropic and Ollama shapes, and bad requests. Nothing may answer 5xx, every stream is
well formed up to its end (or to where the client hung up), every bad request is a 4xx with its family's
error body, and afterwards every KV block is free and the pool's books balance."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

from tests.server.test_concurrency import wait_pool_free

SECONDS = 12.0
CLIENTS = 16
HI = [{"role": "user", "content": "Tell me a story about a dog."}]


async def full_stream(client: httpx.AsyncClient, url: str, rng: random.Random, cut: bool) -> None:
    body = {"messages": HI, "max_tokens": rng.randint(1, 40), "temperature": 0.8, "stream": True}
    events = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        done = False
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                assert line == "", line  # SSE: data lines and the blank lines between events only
                continue
            if line == "data: [DONE]":
                done = True
                break
            event = json.loads(line[6:])
            assert "error" not in event and event["object"] == "chat.completion.chunk", event
            events += 1
            if cut and events >= 2:
                return  # hang up mid-stream: the server must abort the request and free its blocks
        assert done, "the stream ended without [DONE]"


async def plain(client: httpx.AsyncClient, url: str, rng: random.Random) -> None:
    kind = rng.randrange(3)
    if kind == 0:
        body = {"prompt": "Once upon a time", "max_tokens": rng.randint(1, 30)}
        response = await client.post(f"{url}/v1/completions", json=body)
        assert response.status_code == 200 and response.json()["object"] == "text_completion", response.text
    elif kind == 1:
        body = {"model": "tiny", "messages": HI, "max_tokens": rng.randint(1, 30)}
        response = await client.post(f"{url}/v1/messages", json=body)
        assert response.status_code == 200 and response.json()["type"] == "message", response.text
    else:
        body = {
            "model": "tiny",
            "messages": HI,
            "stream": True,
            "options": {"num_predict": rng.randint(1, 30)},
        }
        async with client.stream("POST", f"{url}/api/chat", json=body) as response:
            assert response.status_code == 200, await response.aread()
            lines = [json.loads(line) async for line in response.aiter_lines() if line]
        assert lines and lines[-1]["done"] is True and all("error" not in x for x in lines), lines


# (path, raw body, the error's shape: the key its family puts the message under)
BAD = [
    ("/v1/chat/completions", b'{"messages": [', "error"),  # malformed JSON
    ("/v1/chat/completions", json.dumps({"messages": "hi"}).encode(), "error"),
    ("/v1/chat/completions", json.dumps({"messages": HI, "max_tokens": 10**9}).encode(), "error"),
    ("/v1/completions", json.dumps({"prompt": "x", "temperature": 9}).encode(), "error"),
    ("/v1/messages", json.dumps({"model": "tiny", "messages": HI}).encode(), "error"),  # no max_tokens
    ("/api/chat", json.dumps({"model": "tiny", "messages": 5}).encode(), "error"),
    ("/v1/chat/completions", json.dumps({"model": "no-such-model", "messages": HI}).encode(), "error"),
]


async def bad(client: httpx.AsyncClient, url: str, rng: random.Random) -> None:
    path, raw, key = rng.choice(BAD)
    response = await client.post(url + path, content=raw, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (path, raw, response.status_code, response.text)
    assert key in response.json(), response.text


async def one_client(url: str, index: int, deadline: float, failures: list[str], counts: dict) -> None:
    rng = random.Random(index)
    async with httpx.AsyncClient(timeout=60) as client:
        while time.monotonic() < deadline:
            kind = rng.choice(("stream", "cut", "plain", "bad"))
            try:
                if kind in ("stream", "cut"):
                    await full_stream(client, url, rng, cut=kind == "cut")
                elif kind == "plain":
                    await plain(client, url, rng)
                else:
                    await bad(client, url, rng)
                counts[kind] = counts.get(kind, 0) + 1
            except (AssertionError, httpx.HTTPError, ValueError) as error:
                failures.append(f"client {index} {kind}: {error!r}"[:500])


def test_soak_no_5xx_well_formed_streams_and_every_block_free(live_server):
    with live_server(max_concurrent_requests=8) as server:
        failures: list[str] = []
        counts: dict[str, int] = {}

        async def main():
            deadline = time.monotonic() + SECONDS
            await asyncio.gather(
                *(one_client(server.url, i, deadline, failures, counts) for i in range(CLIENTS))
            )

        asyncio.run(main())
        assert not failures, "\n".join(failures[:20])
        assert all(counts.get(k, 0) >= 5 for k in ("stream", "cut", "plain", "bad")), counts
        free, total = wait_pool_free(server.app)
        assert free == total, f"{total - free} KV blocks still held after the soak"
        engine = server.app.extensions["blazr"].models.loaded()[0].llm.engine
        engine.pool.check_consistent({})
        health = httpx.get(server.url + "/health", timeout=10)
        assert health.status_code == 200
