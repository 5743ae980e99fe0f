"""The real `openai` Python SDK against a real server on 127.0.0.1: chat and completions (streaming and not,
include_usage), embeddings with the SDK's default base64 encoding, errors as SDK exceptions, and a tool-call
round trip through a tiny model whose reply logit_bias forces to be a tool call."""

from __future__ import annotations

import json

import pytest

from tests.server.conftest import run_live_server, server_settings, write_tiny_gguf
from tests.server.test_openai_routes import FORCE_CALL, WEATHER_TOOL, write_tool_call_gguf

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One server for the module: tiny.gguf is the default model, tool.gguf is served by name."""
    from blazr.server.app import create_app

    directory = tmp_path_factory.mktemp("sdk-models")
    write_tiny_gguf(directory / "tiny.gguf")
    write_tool_call_gguf(directory / "tool.gguf")
    app = create_app(server_settings(), model="tiny", model_dir=directory)
    with run_live_server(app) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_chat_completion(client):
    reply = client.chat.completions.create(
        model="tiny.gguf", messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0
    )
    assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 4
    stream = client.chat.completions.create(
        model="tiny.gguf",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == reply.usage.total_tokens


def test_completions(client):
    reply = client.completions.create(
        model="tiny.gguf", prompt="abc", max_tokens=3, temperature=0, n=2, seed=3
    )
    assert [c.index for c in reply.choices] == [0, 1]
    stream = client.completions.create(
        model="tiny.gguf",
        prompt="abc",
        max_tokens=3,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reply.choices[0].text
    assert chunks[-1].usage.prompt_tokens == 3


def test_embeddings_default_base64(client):
    result = client.embeddings.create(model="tiny.gguf", input=["hello", "world"])  # SDK sends base64
    assert [len(d.embedding) for d in result.data] == [64, 64]
    assert abs(sum(x * x for x in result.data[0].embedding) - 1.0) < 1e-4
    floats = client.embeddings.create(model="tiny.gguf", input="hello", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(result.data[0].embedding, abs=1e-6)


def test_errors_raise_sdk_exceptions(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny.gguf", messages=[], max_tokens=2)
    assert caught.value.body["param"] == "messages"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])


def test_tool_call_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    extra = {"logit_bias": FORCE_CALL["logit_bias"]}
    first = client.chat.completions.create(
        model="tool.gguf",
        messages=messages,
        tools=[WEATHER_TOOL],
        stop=FORCE_CALL["stop"],
        temperature=0,
        **extra,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 21}'},
    ]
    # the tiny model's 512-token context has no room for the tool list again: the history alone must render
    second = client.chat.completions.create(model="tool.gguf", messages=messages, max_tokens=3)
    assert second.choices[0].message.role == "assistant" and second.choices[0].finish_reason in (
        "stop",
        "length",
    )
    stream = client.chat.completions.create(
        model="tool.gguf",
        messages=messages[:1],
        tools=[WEATHER_TOOL],
        stop=FORCE_CALL["stop"],
        temperature=0,
        stream=True,
        **extra,
    )
    chunks = list(stream)
    parts = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert parts[0].function.name == "get_weather" and parts[0].id.startswith("call_")
    assert json.loads("".join(p.function.arguments or "" for p in parts)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_responses_api(client):
    reply = client.responses.create(model="tiny.gguf", input="hello", max_output_tokens=3, temperature=0)
    assert reply.status == "incomplete" and reply.output[0].type == "message"
    events = list(
        client.responses.create(
            model="tiny.gguf", input="hello", max_output_tokens=3, temperature=0, stream=True
        )
    )
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == reply.output_text
