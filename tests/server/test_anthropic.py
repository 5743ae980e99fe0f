"""Anthropic Messages API: request conversion, the response body, the SSE event sequence, error shapes
and auth on the tiny model; the real `anthropic` SDK (create, stream, count_tokens) against SmolLM2."""

from __future__ import annotations

import json

import pytest

from blazr.server import anthropic_format as fmt
from blazr.server.chat_prompt import ChatPrompt
from blazr.server.errors import ApiError
from blazr.server.generation import Delta
from blazr.server.reply_parser import ReplyOptions
from blazr.server.routes import anthropic as route
from tests.server.conftest import SMOLLM2_NAME, run_live_server, server_settings

pytestmark = pytest.mark.anyio
GREEDY = {"temperature": 0}  # this SDK version takes sampling fields only through extra_body
HI = [{"role": "user", "content": "hi"}]
EVENT_TYPES = {
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
}


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """(event name, data) per SSE event; asserts each event's name equals its data's type."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        events.append((lines["event"], data))
    return events


# ---- pure conversion -----------------------------------------------------------------------------------


def test_chat_messages_tool_round_trip_and_system_blocks():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": ""},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "20C"}],
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    out = fmt.chat_messages(messages, [{"type": "text", "text": "Be brief."}])
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[1] == {"role": "user", "content": "weather?"}
    call = out[2]["tool_calls"][0]
    assert out[2]["content"] == "Let me check." and call["id"] == "toolu_1"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert out[3] == {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "20C"}
    assert out[4] == {"role": "user", "content": "thanks"}


@pytest.mark.parametrize(
    "messages, where",
    [
        ([], "messages"),
        ([{"role": "system", "content": "x"}], "messages[0]"),
        ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "messages[0].content[0]"),
        (
            [{"role": "user", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
            "messages[0].content[0]",
        ),
        ([{"role": "user", "content": 5}], "messages[0].content"),
    ],
)
def test_chat_messages_rejects_with_the_field(messages, where):
    with pytest.raises(ApiError) as info:
        fmt.chat_messages(messages)
    assert info.value.status == 400 and info.value.message.startswith(where + ":")


def test_tools_and_tool_choice():
    tools = [
        {"name": "a", "description": "A", "input_schema": {"type": "object", "properties": {"x": {}}}},
        {"name": "b", "input_schema": {"type": "object"}},
    ]
    converted = fmt.openai_tools(tools, None)
    assert converted[0] == {
        "type": "function",
        "function": {"name": "a", "description": "A", "parameters": tools[0]["input_schema"]},
    }
    assert fmt.openai_tools(tools, {"type": "none"}) is None
    assert fmt.openai_tools(None, {"type": "auto"}) is None
    assert fmt.forced_tool({"type": "any"}) == (True, None)
    assert fmt.forced_tool({"type": "tool", "name": "a"}) == (True, "a")
    assert fmt.forced_tool({"type": "auto"}) == (False, None)
    for bad in ({"type": "tool"}, {"type": "sometimes"}):
        with pytest.raises(ApiError) as info:
            fmt.forced_tool(bad)
        assert info.value.param == "tool_choice"
    with pytest.raises(ApiError, match="web_search"):
        fmt.openai_tools([{"type": "web_search_20250305", "name": "web_search"}], None)


def test_stop_fields():
    assert fmt.stop_fields("stop", None, False) == ("end_turn", None)
    assert fmt.stop_fields("length", None, False) == ("max_tokens", None)
    assert fmt.stop_fields("stop", "\n\n", False) == ("stop_sequence", "\n\n")
    assert fmt.stop_fields("stop", None, True) == ("tool_use", None)


def test_event_sequence_thinking_text_tool():
    events = fmt.MessageEvents("msg_1", "m", input_tokens=7)
    chunks = events.start() + events.thinking("plan") + events.text("Hi") + events.text(" there")
    chunks += events.tool_use("f", '{"x": 1}') + events.finish(("tool_use", None), 9)
    parsed = parse_sse(b"".join(chunks).decode())
    names = [name for name, _ in parsed]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = parsed[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] == 7
    assert parsed[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    assert parsed[6][1]["delta"] == {"type": "text_delta", "text": "Hi"} and parsed[6][1]["index"] == 1
    tool = parsed[9][1]["content_block"]
    assert tool["type"] == "tool_use" and tool["id"].startswith("toolu_") and tool["input"] == {}
    assert parsed[10][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"x": 1}'}
    assert parsed[12][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert parsed[12][1]["usage"] == {"output_tokens": 9}


def test_empty_reply_still_has_a_text_block():
    events = fmt.MessageEvents("msg_1", "m", 3)
    names = [
        n for n, _ in parse_sse(b"".join(events.start() + events.finish(("end_turn", None), 0)).decode())
    ]
    assert names[1:4] == ["content_block_start", "ping", "content_block_stop"]


def fake_prompt(thinks: bool = False, tools: bool = False) -> ChatPrompt:
    return ChatPrompt("", [1, 2, 3], ReplyOptions(thinks=thinks, parse_tools=tools))


def delta(text: str, finished: bool = True, reason: str | None = "stop", tokens: int = 9) -> Delta:
    return Delta(text, [], None, finished, reason if finished else None, 3, tokens, 0)


CALL_TEXT = '<think>use the tool</think><tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'


def test_message_with_thinking_and_tool_use():
    body = route._message(delta(CALL_TEXT), "msg_1", "m", fake_prompt(thinks=True, tools=True))
    thinking, tool = body["content"]
    assert thinking == {"type": "thinking", "thinking": "use the tool", "signature": ""}
    assert tool["type"] == "tool_use" and tool["name"] == "f" and tool["input"] == {"x": 1}
    assert body["stop_reason"] == "tool_use" and body["usage"]["output_tokens"] == 9


async def test_stream_with_thinking_and_tool_use():
    async def deltas():
        for i in range(0, len(CALL_TEXT), 7):  # arbitrary split points, as a tokenizer would make
            yield delta(CALL_TEXT[i : i + 7], finished=i + 7 >= len(CALL_TEXT))

    chunks = [c async for c in route._events(deltas(), "msg_1", "m", fake_prompt(True, True), 3)]
    parsed = parse_sse(b"".join(chunks).decode())
    blocks = [d["content_block"]["type"] for n, d in parsed if n == "content_block_start"]
    assert blocks == ["thinking", "tool_use"]
    json_delta = next(d["delta"] for n, d in parsed if d.get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(json_delta["partial_json"]) == {"x": 1}
    assert parsed[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_stream_error_after_start_is_an_error_event():
    async def deltas():
        yield delta("Hel", finished=False)
        raise ApiError(503, "model unloaded")

    chunks = [c async for c in route._events(deltas(), "msg_1", "m", fake_prompt(), 3)]
    name, data = parse_sse(b"".join(chunks).decode())[-1]
    assert name == "error" and data == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "model unloaded"},
    }


async def test_client_leaving_closes_the_generation():
    closed = []

    async def deltas():
        try:
            while True:
                yield delta("x", finished=False)
        finally:
            closed.append(True)  # generate_stream's finally aborts the engine request here

    events = route._events(deltas(), "msg_1", "m", fake_prompt(), 3)
    assert [await anext(events) for _ in range(4)][-1].startswith(b"event: content_block_delta")
    await events.aclose()  # what Quart does when the client disconnects
    assert closed == [True]


# ---- routes on the tiny model --------------------------------------------------------------------------


async def test_message_body_and_count_tokens(tiny_client):
    body = {
        "model": "tiny",
        "max_tokens": 3,
        "temperature": 0,
        "messages": HI,
        "metadata": {"user_id": "u"},
        "unknown": 1,
    }
    response = await tiny_client.post("/v1/messages", json=body)
    assert response.status_code == 200
    message = await response.get_json()
    assert (
        message["id"].startswith("msg_") and message["type"] == "message" and message["role"] == "assistant"
    )
    assert message["model"] == "tiny.gguf" and message["stop_reason"] == "max_tokens"
    assert message["stop_sequence"] is None and message["content"][0]["type"] == "text"
    assert message["usage"]["output_tokens"] == 3
    count = await tiny_client.post("/v1/messages/count_tokens", json={"model": "tiny", "messages": HI})
    assert (await count.get_json()) == {"input_tokens": message["usage"]["input_tokens"]}
    with_system = await tiny_client.post(
        "/v1/messages/count_tokens", json={"messages": HI, "system": "You are terse."}
    )
    assert (await with_system.get_json())["input_tokens"] > message["usage"]["input_tokens"]


async def test_stream_event_order(tiny_client):
    body = {"max_tokens": 4, "stream": True, "messages": HI, "temperature": 0}
    response = await tiny_client.post("/v1/messages", json=body)
    assert response.status_code == 200 and response.content_type.startswith("text/event-stream")
    parsed = parse_sse(await response.get_data(as_text=True))
    names = [name for name, _ in parsed]
    assert set(names) <= EVENT_TYPES and "error" not in names
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(n == "content_block_delta" for n in names[3:-3])
    final = parsed[-2][1]
    assert final["delta"]["stop_reason"] == "max_tokens" and final["usage"]["output_tokens"] == 4
    text = "".join(d["delta"]["text"] for n, d in parsed if n == "content_block_delta")
    greedy = await (await tiny_client.post("/v1/messages", json={**body, "stream": False})).get_json()
    assert text == greedy["content"][0]["text"]  # stream and non-stream agree


@pytest.mark.parametrize(
    "body, status, kind",
    [
        ({"messages": HI}, 400, "invalid_request_error"),  # no max_tokens
        ({"max_tokens": 0, "messages": HI}, 400, "invalid_request_error"),
        ({"max_tokens": 5, "messages": []}, 400, "invalid_request_error"),
        ({"max_tokens": 5, "messages": HI, "temperature": 9}, 400, "invalid_request_error"),
        ({"max_tokens": 5, "messages": HI, "model": "nope"}, 404, "not_found_error"),
        ({"max_tokens": 5, "messages": HI, "thinking": {"type": "maybe"}}, 400, "invalid_request_error"),
    ],
)
async def test_errors_use_the_anthropic_shape(tiny_client, body, status, kind):
    response = await tiny_client.post("/v1/messages", json=body)
    assert response.status_code == status
    error = await response.get_json()
    assert error["type"] == "error" and error["error"]["type"] == kind and error["error"]["message"]


async def test_malformed_json_and_context_limit(tiny_client):
    response = await tiny_client.post(
        "/v1/messages", data=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and (await response.get_json())["type"] == "error"
    long = [{"role": "user", "content": "x" * 600}]  # the tiny model's context is 512 tokens
    response = await tiny_client.post(
        "/v1/messages", json={"max_tokens": 5, "messages": long, "stream": True}
    )
    error = await response.get_json()
    assert response.status_code == 400 and "context limit" in error["error"]["message"]


async def test_x_api_key_and_bearer(make_app, tiny_model_dir):
    app = await make_app(model="tiny", model_dir=tiny_model_dir, api_keys=["sekrit"])
    client = app.test_client()
    body = {"messages": HI}
    missing = await client.post("/v1/messages/count_tokens", json=body)
    assert missing.status_code == 401
    assert (await missing.get_json())["error"]["type"] == "authentication_error"
    wrong = await client.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "nope"})
    assert wrong.status_code == 401
    for headers in ({"x-api-key": "sekrit"}, {"Authorization": "Bearer sekrit"}):
        ok = await client.post("/v1/messages/count_tokens", json=body, headers=headers)
        assert ok.status_code == 200


# ---- the real SDK against SmolLM2 ----------------------------------------------------------------------


@pytest.fixture
def smollm2_server(smollm2_model_dir):
    from blazr.server.app import create_app

    app = create_app(server_settings(), model=SMOLLM2_NAME, model_dir=smollm2_model_dir, api_keys=["k"])
    with run_live_server(app) as server:
        yield server


def test_anthropic_sdk(smollm2_server):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=smollm2_server.url, api_key="k", max_retries=0)
    question = [{"role": "user", "content": "What is 2+2?"}]
    message = client.messages.create(model=SMOLLM2_NAME, max_tokens=7, messages=question, extra_body=GREEDY)
    assert message.content[0].type == "text"
    assert message.content[0].text == "The answer to this classic math problem"
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 7

    with client.messages.stream(
        model=SMOLLM2_NAME, max_tokens=4, messages=question, extra_body=GREEDY
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.content[0].text == "The answer to this"
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 4

    stopped = client.messages.create(
        model=SMOLLM2_NAME, max_tokens=6, messages=question, stop_sequences=[" classic"], extra_body=GREEDY
    )
    assert stopped.content[0].text == "The answer to this"
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", " classic")

    counted = client.messages.count_tokens(model=SMOLLM2_NAME, messages=question)
    assert counted.input_tokens == message.usage.input_tokens

    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="missing-model", max_tokens=4, messages=question)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=smollm2_server.url, api_key="wrong", max_retries=0
        ).messages.count_tokens(model=SMOLLM2_NAME, messages=question)
