"""Regressions for what fuzzing the routes (test_fuzz.py) found: each was a 500 or a hang before its fix."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.anyio


async def post_error(client, path: str, body: dict) -> tuple[int, dict]:
    response = await client.post(path, json=body)
    return response.status_code, await response.get_json()


async def test_chat_role_that_is_an_object_is_400(tiny_client):
    body = {"messages": [{"role": {"x": 1}, "content": "hi"}], "max_tokens": 1}
    status, error = await post_error(tiny_client, "/v1/chat/completions", body)
    assert status == 400 and error["error"]["param"] == "messages[0].role"


async def test_chat_content_part_type_that_is_an_object_is_400(tiny_client):
    body = {"messages": [{"role": "user", "content": [{"type": {}, "text": "hi"}]}], "max_tokens": 1}
    status, error = await post_error(tiny_client, "/v1/chat/completions", body)
    assert status == 400 and error["error"]["param"] == "messages[0].content[0]"


async def test_anthropic_block_type_that_is_a_list_is_400(tiny_client):
    body = {"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": ["image"]}]}]}
    status, error = await post_error(tiny_client, "/v1/messages", body)
    assert status == 400 and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("call", [{"id": "", "type": "function", "function": [None]}, "not-a-call"])
async def test_history_tool_call_without_a_function_object_is_400(tiny_client, call):
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"messages": [{"role": "user", "content": "hi"}, message], "max_tokens": 1}
    status, error = await post_error(tiny_client, "/v1/chat/completions", body)
    assert status == 400 and error["error"]["param"] == "messages[1].tool_calls[0]"


async def test_history_tool_call_arguments_must_be_text_or_object(tiny_client):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 3}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"messages": [{"role": "user", "content": "hi"}, message], "max_tokens": 1}
    status, error = await post_error(tiny_client, "/v1/chat/completions", body)
    assert status == 400 and error["error"]["param"] == "messages[1].tool_calls[0].function.arguments"


async def test_engine_thread_survives_a_request_that_fails_to_queue(tiny_app, tiny_client):
    """A non-library error while the engine thread queues a request used to kill the thread, so every
    later request hung; now that request fails (500 with its id) and the next one is served."""
    engine = tiny_app.extensions["blazr"].models.loaded()[0].llm.engine
    real_add = engine.add_request
    calls = []

    def add_once_broken(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise ValueError("simulated failure inside Engine.add_request")
        return real_add(*args, **kwargs)

    engine.add_request = add_once_broken
    body = {"prompt": "hi", "max_tokens": 2, "temperature": 0}
    first = await asyncio.wait_for(tiny_client.post("/v1/completions", json=body), 30)
    assert first.status_code == 500
    assert "ValueError" in (await first.get_json())["error"]["message"]
    second = await asyncio.wait_for(tiny_client.post("/v1/completions", json=body), 30)
    assert second.status_code == 200


async def test_openapi_describes_each_sse_event_not_a_string(tiny_client):
    spec = await (await tiny_client.get("/openapi.json")).get_json()
    content = spec["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    event = content["text/event-stream"]["schema"]
    assert event["type"] == "object" and event["properties"]["data"] == {"type": "string"}
