"""Ollama native API: keep_alive / options parsing, listings, NDJSON framing with nanosecond timings, the
load/unload idiom and {"error": ...} bodies on the tiny model; the real `ollama` client against SmolLM2."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from blazr.server import ollama_format as fmt
from blazr.server.errors import ApiError
from blazr.server.generation import Delta
from blazr.server.reply_parser import ReplyOptions
from blazr.server.routes import ollama as route
from tests.server.conftest import SMOLLM2_NAME, run_live_server, server_settings

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "hi"}]
TIMING_KEYS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


# ---- pure parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds",
    [
        (None, None),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("30s", 30.0),
        ("0", 0.0),
        (0, 0.0),
        ("-1", -1.0),
        (-5, -1.0),
        ("1.5h", 5400.0),
        (90, 90.0),
        ("500ms", 0.5),
    ],
)
def test_parse_keep_alive(value, seconds):
    assert fmt.parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "", True, [1], "5m3"])
def test_parse_keep_alive_rejects(value):
    with pytest.raises(ApiError) as info:
        fmt.parse_keep_alive(value)
    assert info.value.status == 400 and info.value.param == "keep_alive"


def test_sampling_body_maps_options():
    body = {
        "options": {"num_predict": 7, "temperature": 0, "stop": ["\n"], "top_k": 5, "num_ctx": 99, "x": 1}
    }
    assert fmt.sampling_body(body) == {"max_tokens": 7, "temperature": 0, "stop": ["\n"], "top_k": 5}
    assert fmt.sampling_body({"options": {"num_predict": -1}})["max_tokens"] == fmt.UNLIMITED_PREDICT
    with pytest.raises(ApiError):
        fmt.sampling_body({"options": "fast"})


def test_timings_are_nanoseconds():
    timings = fmt.Timings(started=10.0, load_seconds=0.5, first_token=11.0, finished=13.0)
    fields = timings.fields(prompt_tokens=4, completion_tokens=9)
    assert fields == {
        "total_duration": 3_000_000_000,
        "load_duration": 500_000_000,
        "prompt_eval_count": 4,
        "prompt_eval_duration": 500_000_000,
        "eval_count": 9,
        "eval_duration": 2_000_000_000,
    }
    assert fmt.parameter_size(134_515_008) == "134.5M" and fmt.parameter_size(7_241_732_096) == "7.2B"


def test_chat_messages_conversion():
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "content": "42", "tool_name": "f"},
    ]
    out = fmt.chat_messages(messages)
    assert out[0]["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    assert out[1] == {"role": "tool", "content": "42", "name": "f"}
    with pytest.raises(ApiError, match="vision"):
        fmt.chat_messages([{"role": "user", "content": "x", "images": ["aGk="]}])


def test_tool_calls_become_objects():
    calls = fmt.ollama_tool_calls([("f", '{"a": 1}'), ("g", "not json")])
    assert calls == [
        {"function": {"name": "f", "arguments": {"a": 1}}},
        {"function": {"name": "g", "arguments": {}}},
    ]


async def test_chat_lines_split_thinking_and_tool_calls():
    text = '<think>hm</think>ok<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'

    async def deltas():
        for i in range(0, len(text), 5):
            done = i + 5 >= len(text)
            yield Delta(text[i : i + 5], [], None, done, "stop" if done else None, 3, 7, 0)

    run = route.OllamaRun(SimpleNamespace(name="m"), None, True, fmt.Timings())
    options = ReplyOptions(thinks=True, parse_tools=True)
    lines = [line async for line in route._chat_lines(run, deltas(), options)]
    messages = [line["message"] for line in lines]
    assert "".join(m.get("thinking", "") for m in messages) == "hm"
    assert "".join(m["content"] for m in messages) == "ok"
    assert [m["tool_calls"] for m in messages if "tool_calls" in m] == [
        fmt.ollama_tool_calls([("f", '{"a": 1}')])
    ]
    assert_final(lines[-1], "stop")
    assert lines[-1]["eval_count"] == 7


# ---- routes on the tiny model --------------------------------------------------------------------------


def ndjson(text: str) -> list[dict]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def assert_final(line: dict, reason: str) -> None:
    assert line["done"] is True and line["done_reason"] == reason
    for key in TIMING_KEYS:
        assert isinstance(line[key], int) and line[key] >= 0
    assert line["total_duration"] >= line["eval_duration"]


async def test_listings(tiny_client):
    version = await (await tiny_client.get("/api/version")).get_json()
    assert isinstance(version["version"], str)
    assert (await tiny_client.head("/")).status_code == 200
    tags = (await (await tiny_client.get("/api/tags")).get_json())["models"]
    assert [m["name"] for m in tags] == ["tiny.gguf"]
    details = tags[0]["details"]
    assert (
        details["format"] == "gguf"
        and details["family"] == "llama"
        and details["quantization_level"] == "F32"
    )
    assert tags[0]["size"] > 0 and tags[0]["modified_at"].endswith("Z")
    ps = (await (await tiny_client.get("/api/ps")).get_json())["models"]
    assert [m["name"] for m in ps] == ["tiny.gguf"] and ps[0]["size_vram"] == 0
    assert ps[0]["expires_at"] is None  # the default model stays loaded


async def test_show(tiny_client):
    shown = await (await tiny_client.post("/api/show", json={"model": "tiny"})).get_json()
    info = shown["model_info"]
    assert info["general.architecture"] == "llama" and info["llama.block_count"] == 2
    assert info["llama.embedding_length"] == 64 and info["llama.context_length"] == 512
    assert shown["template"].startswith("{% for m in messages %}")
    assert "completion" in shown["capabilities"] and "insert" not in shown["capabilities"]
    assert "temperature" in shown["parameters"] and "num_predict" in shown["parameters"]
    missing = await tiny_client.post("/api/show", json={"name": "nope:latest"})
    assert missing.status_code == 404 and (await missing.get_json()) == {
        "error": "model 'nope:latest' not found"
    }


async def test_chat_stream_is_ndjson(tiny_client):
    body = {"model": "tiny:latest", "messages": HI, "options": {"num_predict": 5, "temperature": 0}}
    response = await tiny_client.post("/api/chat", json=body)  # stream defaults to true
    assert response.status_code == 200 and response.content_type == "application/x-ndjson"
    lines = ndjson(await response.get_data(as_text=True))
    assert all(line["model"] == "tiny.gguf" and line["message"]["role"] == "assistant" for line in lines)
    assert all(line["done"] is False for line in lines[:-1])
    assert_final(lines[-1], "length")
    assert lines[-1]["eval_count"] == 5 and lines[-1]["prompt_eval_count"] > 0
    streamed = "".join(line["message"]["content"] for line in lines)
    whole = await (await tiny_client.post("/api/chat", json={**body, "stream": False})).get_json()
    assert whole["message"]["content"] == streamed
    assert_final(whole, "length")


async def test_generate_context_raw_and_stream(tiny_client):
    body = {"prompt": "ab", "raw": True, "stream": False, "options": {"num_predict": 3, "temperature": 0}}
    first = await (await tiny_client.post("/api/generate", json=body)).get_json()
    assert first["context"][:2] == [97, 98] and len(first["context"]) == 5  # raw: the bytes, no template
    assert_final(first, "length")
    follow = {**body, "prompt": "c", "context": first["context"], "stream": True}
    lines = ndjson(await (await tiny_client.post("/api/generate", json=follow)).get_data(as_text=True))
    assert lines[-1]["prompt_eval_count"] == 6 and lines[-1]["context"][:6] == first["context"] + [99]
    templated = await (await tiny_client.post("/api/generate", json={**body, "raw": False})).get_json()
    assert templated["prompt_eval_count"] > 2  # the chat template wrapped the prompt


async def test_load_and_unload_idiom(make_app, tiny_model_dir):
    app = await make_app(model=None, model_dir=tiny_model_dir)
    client = app.test_client()
    loaded = await (await client.post("/api/generate", json={"model": "tiny"})).get_json()
    assert loaded["done"] is True and loaded["done_reason"] == "load" and loaded["response"] == ""
    assert len((await (await client.get("/api/ps")).get_json())["models"]) == 1
    unloaded = await (
        await client.post("/api/chat", json={"model": "tiny", "messages": [], "keep_alive": 0})
    ).get_json()
    assert unloaded["done_reason"] == "unload"
    assert (await (await client.get("/api/ps")).get_json())["models"] == []


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/api/chat", {"messages": HI, "keep_alive": "soon"}, 400),
        ("/api/chat", {"messages": HI, "format": "yaml"}, 400),
        ("/api/chat", {"messages": HI, "options": {"temperature": "hot"}}, 400),
        ("/api/chat", {"model": "nope", "messages": HI}, 404),
        ("/api/generate", {"prompt": "x", "template": "{{ .Prompt"}, 400),
        ("/api/generate", {"prompt": "x", "suffix": "y"}, 400),  # no FIM tokens in the tiny vocab
        ("/api/generate", {"prompt": "x", "context": [1, -4]}, 400),
        ("/api/show", {}, 400),
    ],
)
async def test_errors_use_the_ollama_shape(tiny_client, path, body, status):
    response = await tiny_client.post(path, json=body)
    assert response.status_code == status
    error = await response.get_json()
    assert list(error) == ["error"] and isinstance(error["error"], str) and error["error"]


async def test_malformed_json_is_an_ollama_error(tiny_client):
    response = await tiny_client.post("/api/chat", data=b"[1,", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and isinstance((await response.get_json())["error"], str)


# ---- the real ollama client against SmolLM2 ------------------------------------------------------------


@pytest.fixture
def smollm2_server(smollm2_model_dir):
    from blazr.server.app import create_app

    app = create_app(server_settings(), model=SMOLLM2_NAME, model_dir=smollm2_model_dir)
    with run_live_server(app) as server:
        yield server


def test_ollama_client(smollm2_server):
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=smollm2_server.url)
    greedy = {"temperature": 0, "num_predict": 4}
    reply = client.chat(
        model=SMOLLM2_NAME, messages=[{"role": "user", "content": "What is 2+2?"}], options=greedy
    )
    assert reply.message.content == "The answer to this" and reply.done_reason == "length"
    assert reply.eval_count == 4 and reply.total_duration > 0
    pieces = list(
        client.generate(
            model=SMOLLM2_NAME,
            prompt="The capital of France is",
            raw=True,
            options={"temperature": 0, "num_predict": 2},
            stream=True,
        )
    )
    assert "".join(p.response for p in pieces) == " Paris." and pieces[-1].done
    assert [m.model for m in client.list().models] == [SMOLLM2_NAME]
    shown = client.show(SMOLLM2_NAME)
    assert shown.details.family == "llama" and shown.details.quantization_level == "Q4_1"
    assert shown.modelinfo["llama.vocab_size"] == 49152 and "<|im_start|>" in shown.template
    assert [m.model for m in client.ps().models] == [SMOLLM2_NAME]
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="missing", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 404 and "not found" in info.value.error
