"""OpenAI routes through Quart's test client: /v1/chat/completions, /v1/completions, /v1/embeddings and
/v1/responses, streaming and not. Shapes come from the tiny random-weight model; content from SmolLM2."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.gguf_writer import write_gguf
from tests.server.conftest import TINY_TEMPLATE, byte_level_alphabet, server_settings
from tests.tiny_models import tiny_config, tiny_weights

pytestmark = pytest.mark.anyio

HI = [{"role": "user", "content": "hi"}]
CALL_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CALL_TOKEN = 255  # in the tool model this one token is the whole call text
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# Forces the tool model's reply: the call token, then the stop string cuts it at </tool_call>.
FORCE_CALL = {"logit_bias": {str(CALL_TOKEN): 100}, "stop": ["</tool_call>"], "temperature": 0}


def write_tool_call_gguf(path: Path) -> Path:
    """The tiny Llama with a byte-level vocab whose token 255 decodes to CALL_TEXT, so logit_bias can force a
    real generation to emit a tool call."""
    alphabet = byte_level_alphabet()
    tokens = list(alphabet)
    tokens[0] = "!!"  # the GGUF reader wants a non-empty merge list (see conftest.write_tiny_gguf)
    tokens[CALL_TOKEN] = "".join(alphabet[b] for b in CALL_TEXT.encode())
    types = [1] * 256
    types[1] = types[2] = 3
    tokenizer = {
        "model": "gpt2",
        "pre": "default",
        "tokens": tokens,
        "token_type": types,
        "merges": ["! !"],
        "add_bos_token": False,
        "chat_template": TINY_TEMPLATE,
    }
    return write_gguf(path, tiny_config("llama"), tiny_weights("llama"), "F32", tokenizer=tokenizer)


@pytest.fixture
async def tool_client(make_app, tmp_path):
    directory = tmp_path / "tool-models"
    directory.mkdir()
    write_tool_call_gguf(directory / "tool.gguf")
    app = await make_app(model="tool.gguf", model_dir=directory)
    return app.test_client()


async def post(client, path, body):
    response = await client.post(path, json=body)
    return response.status_code, await response.get_data(as_text=True), response


def sse_events(raw: str) -> list[str]:
    """The data payloads of an OpenAI SSE body, checking the framing byte for byte on the way."""
    assert raw.endswith("data: [DONE]\n\n")
    blocks = raw.split("\n\n")
    assert blocks[-1] == ""
    payloads = []
    for block in blocks[:-1]:
        assert block.startswith("data: ") and "\n" not in block, block  # no event: lines, one line each
        payloads.append(block[len("data: ") :])
    assert payloads[-1] == "[DONE]"
    for payload in payloads[:-1]:
        assert payload == json.dumps(json.loads(payload), ensure_ascii=False, separators=(",", ":"))
    return payloads[:-1]


def assert_openai_error(status, raw, param, expected_status=400):
    assert status == expected_status, raw
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    assert error["message"]
    return error


# ---- chat ---------------------------------------------------------------------------------------------


async def test_chat_completion_shape(tiny_client):
    status, raw, response = await post(
        tiny_client,
        "/v1/chat/completions",
        {"messages": HI, "max_tokens": 4, "temperature": 0, "junk": {"x": 1}},
    )
    assert status == 200 and response.content_type == "application/json"
    body = json.loads(raw)
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "tiny.gguf" and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    usage = body["usage"]
    assert usage["completion_tokens"] <= 4 and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0


async def test_chat_stream_framing_and_usage_chunk(tiny_client):
    body = {"messages": HI, "max_tokens": 5, "temperature": 0, "stream": True}
    status, raw, response = await post(
        tiny_client, "/v1/chat/completions", body | {"stream_options": {"include_usage": True}}
    )
    assert status == 200 and response.content_type == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    chunks = [json.loads(p) for p in sse_events(raw)]
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    *content, final, usage_chunk = chunks
    assert all(c["usage"] is None for c in chunks[:-1])
    assert final["choices"][0]["delta"] == {} and final["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] <= 5
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in content)
    status, plain, _ = await post(tiny_client, "/v1/chat/completions", body | {"stream": False})
    assert text == json.loads(plain)["choices"][0]["message"]["content"]  # greedy: same reply either way
    _, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    assert all("usage" not in json.loads(p) for p in sse_events(raw))  # no include_usage: no usage key


async def test_chat_n_choices_and_logprobs(tiny_client):
    body = {"messages": HI, "max_tokens": 3, "n": 3, "seed": 7, "logprobs": True, "top_logprobs": 2}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    assert status == 200, raw
    choices = json.loads(raw)["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    for choice in choices:
        entries = choice["logprobs"]["content"]
        assert choice["logprobs"]["refusal"] is None and 1 <= len(entries) <= 3
        for entry in entries:
            assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
            assert entry["logprob"] <= 0 and isinstance(entry["bytes"], list)
            assert len(entry["top_logprobs"]) == 2
            assert set(entry["top_logprobs"][0]) == {"token", "logprob", "bytes"}
    _, raw, _ = await post(tiny_client, "/v1/chat/completions", body | {"stream": True})
    chunks = [json.loads(p) for p in sse_events(raw)]
    finished = {c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"]}
    assert finished == {0, 1, 2}
    tokens = sum(len(c["choices"][0]["logprobs"]["content"]) for c in chunks)
    assert 3 <= tokens <= 9


BAD_CHAT = [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ({"messages": HI, "temperature": 3}, "temperature"),
    ({"messages": HI, "top_p": 0}, "top_p"),
    ({"messages": HI, "n": 0}, "n"),
    ({"messages": HI, "n": 17}, "n"),
    ({"messages": HI, "max_tokens": 0}, "max_tokens"),
    ({"messages": HI, "max_completion_tokens": "ten"}, "max_completion_tokens"),
    ({"messages": HI, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": HI, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": HI, "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"messages": HI, "logit_bias": {"99999": 1}}, "logit_bias"),
    ({"messages": HI, "stop": 5}, "stop"),
    ({"messages": HI, "response_format": {"type": "xml"}}, "response_format"),
    (
        {
            "messages": HI,
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "x"}}},
        },
        "response_format",
    ),
    ({"messages": HI, "grammar": "root ::= missing_rule"}, "grammar"),
    ({"messages": HI, "grammar": "root ::= [a-z]+", "guided_regex": "[0-9]+"}, "guided_regex"),
    ({"messages": HI, "tool_choice": "required"}, "tool_choice"),
    (
        {
            "messages": HI,
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "x"}},
        },
        "tool_choice",
    ),
    ({"messages": HI, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"messages": HI, "stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
]


@pytest.mark.parametrize("body, param", BAD_CHAT, ids=[p for _, p in BAD_CHAT])
async def test_chat_bad_fields_are_400_naming_the_param(tiny_client, body, param):
    error = assert_openai_error(*(await post(tiny_client, "/v1/chat/completions", body))[:2], param)
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
async def test_prompt_longer_than_context_is_400_naming_the_limit(tiny_client, stream):
    body = {"messages": [{"role": "user", "content": "x" * 600}], "stream": stream}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    error = assert_openai_error(status, raw, "messages")
    assert "512" in error["message"] and error["code"] == "context_length_exceeded"
    status, raw, _ = await post(tiny_client, "/v1/completions", {"prompt": "y" * 600, "stream": stream})
    assert_openai_error(status, raw, "prompt")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_max_tokens_past_the_context_is_a_400_naming_it(tiny_client, stream):
    """OpenAI's and vLLM's rule: a max tokens the client set that does not fit beside the prompt in the tiny
    model's 512-token context is a 400 naming the field and the room left (the request is not run to the end
    of the context); one that fits runs."""
    for path, field, body in [
        ("/v1/chat/completions", "max_tokens", {"messages": HI}),
        ("/v1/chat/completions", "max_completion_tokens", {"messages": HI}),
        ("/v1/completions", "max_tokens", {"prompt": "hi"}),
        ("/v1/responses", "max_output_tokens", {"input": "hi"}),
    ]:
        status, raw, _ = await post(tiny_client, path, body | {field: 10**9, "stream": stream})
        error = assert_openai_error(status, raw, field)
        assert error["code"] == "context_length_exceeded" and "512" in error["message"], error
    body = {"messages": HI, "max_tokens": 3, "temperature": 0, "stream": stream}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    assert status == 200, raw


async def test_a_default_max_tokens_and_other_families_are_clamped_to_the_context(tiny_client):
    """Without max_tokens the server's default is clamped to the room left; Ollama's num_predict and
    Anthropic's max_tokens keep their own routes' clamping (their clients send large values)."""
    body = {"messages": HI, "temperature": 0, "logit_bias": {"2": -100}}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    assert status == 200, raw
    body = {
        "model": "tiny",
        "messages": HI,
        "stream": False,
        "options": {"num_predict": 10**6, "temperature": 0},
    }
    response = await tiny_client.post("/api/chat", json=body)
    assert response.status_code == 200
    body = {"model": "tiny", "messages": HI, "max_tokens": 10**6, "temperature": 0}
    response = await tiny_client.post("/v1/messages", json=body)
    assert response.status_code == 200, await response.get_data()


# ---- tool calls ---------------------------------------------------------------------------------------


async def test_chat_tool_call_parsed_and_streamed(tool_client):
    body = {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        **FORCE_CALL,
    }
    status, raw, _ = await post(tool_client, "/v1/chat/completions", body)
    assert status == 200, raw
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {
        "city": "Paris"
    }
    _, raw, _ = await post(tool_client, "/v1/chat/completions", body | {"stream": True})
    chunks = [json.loads(p) for p in sse_events(raw)]
    parts = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert parts[0]["function"] == {"name": "get_weather", "arguments": ""} and parts[0]["index"] == 0
    assert json.loads("".join(p["function"]["arguments"] for p in parts)) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    plain = body | {"tool_choice": "none"}  # no tools offered: the same text stays content
    _, raw, _ = await post(tool_client, "/v1/chat/completions", plain)
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"].startswith("<tool_call>")


# ---- completions --------------------------------------------------------------------------------------


async def test_completions_shape_logprobs_echo_and_stop(tiny_client):
    body = {"prompt": "abc", "max_tokens": 6, "temperature": 0, "logprobs": 2}
    status, raw, _ = await post(tiny_client, "/v1/completions", body)
    assert status == 200, raw
    reply = json.loads(raw)
    assert reply["object"] == "text_completion" and reply["id"].startswith("cmpl-")
    (choice,) = reply["choices"]
    lp = choice["logprobs"]
    n = reply["usage"]["completion_tokens"]
    assert (
        len(lp["tokens"])
        == len(lp["token_logprobs"])
        == len(lp["top_logprobs"])
        == len(lp["text_offset"])
        == n
    )
    assert all(len(top) <= 2 for top in lp["top_logprobs"]) and lp["text_offset"][0] == 0
    text = choice["text"]
    _, raw, _ = await post(
        tiny_client, "/v1/completions", {"prompt": "abc", "max_tokens": 6, "temperature": 0, "echo": True}
    )
    assert json.loads(raw)["choices"][0]["text"] == "abc" + text
    stop_at = next(i for i, ch in enumerate(text) if i > 0 and ch.isascii() and ch.isprintable())
    body = {"prompt": "abc", "max_tokens": 6, "temperature": 0, "stop": [text[stop_at]]}
    _, raw, _ = await post(tiny_client, "/v1/completions", body)
    choice = json.loads(raw)["choices"][0]
    assert choice["text"] == text[: text.index(text[stop_at])] and choice["finish_reason"] == "stop"


async def test_completions_stream_prompts_and_n(tiny_client):
    body = {"prompt": ["abc", [5, 6, 7]], "n": 2, "max_tokens": 3, "stream": True, "seed": 1}
    status, raw, _ = await post(
        tiny_client, "/v1/completions", body | {"stream_options": {"include_usage": True}}
    )
    assert status == 200
    chunks = [json.loads(p) for p in sse_events(raw)]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert {c["choices"][0]["index"] for c in chunks[:-1]} == {0, 1, 2, 3}
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 6  # each prompt counted once
    status, raw, _ = await post(tiny_client, "/v1/completions", body | {"stream": False})
    assert [c["index"] for c in json.loads(raw)["choices"]] == [0, 1, 2, 3]


BAD_COMPLETIONS = [
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, 99999]}, "prompt"),
    ({"prompt": "a", "suffix": "b"}, "suffix"),
    ({"prompt": "a", "best_of": 3}, "best_of"),
    ({"prompt": "a", "echo": True, "logprobs": 1}, "echo"),
    ({"prompt": "a", "logprobs": 30}, "logprobs"),
    ({"prompt": "a", "frequency_penalty": 5}, "frequency_penalty"),
]


@pytest.mark.parametrize("body, param", BAD_COMPLETIONS, ids=[p for _, p in BAD_COMPLETIONS])
async def test_completions_bad_fields(tiny_client, body, param):
    assert_openai_error(*(await post(tiny_client, "/v1/completions", body))[:2], param)


# ---- embeddings ---------------------------------------------------------------------------------------


async def test_embeddings_float_base64_and_token_ids(tiny_client):
    body = {"input": ["hello", "world"], "encoding_format": "float"}
    status, raw, _ = await post(tiny_client, "/v1/embeddings", body)
    assert status == 200, raw
    floats = json.loads(raw)
    assert floats["object"] == "list" and [d["index"] for d in floats["data"]] == [0, 1]
    assert floats["usage"] == {"prompt_tokens": 10, "total_tokens": 10}
    vectors = np.array([d["embedding"] for d in floats["data"]], dtype=np.float32)  # (2, 64)
    assert vectors.shape == (2, 64) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    _, raw, _ = await post(tiny_client, "/v1/embeddings", body | {"encoding_format": "base64"})
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in json.loads(raw)["data"]]
    assert np.array_equal(np.stack(decoded), vectors)
    ids = [ord(c) for c in "hello"]  # the byte-level vocab: token id == byte
    _, raw, _ = await post(tiny_client, "/v1/embeddings", {"input": ids})
    assert np.allclose(json.loads(raw)["data"][0]["embedding"], vectors[0], atol=1e-6)


BAD_EMBEDDINGS = [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": [{"text": "x"}]}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "dimensions": 8}, "dimensions"),
    ({"input": "x" * 600}, "input"),
]


@pytest.mark.parametrize("body, param", BAD_EMBEDDINGS, ids=[str(i) for i in range(len(BAD_EMBEDDINGS))])
async def test_embeddings_bad_fields(tiny_client, body, param):
    assert_openai_error(*(await post(tiny_client, "/v1/embeddings", body))[:2], param)


# ---- responses ----------------------------------------------------------------------------------------


async def test_responses_object_and_stream_events(tiny_client):
    body = {"input": "hello", "instructions": "Be brief.", "max_output_tokens": 3, "temperature": 0}
    status, raw, _ = await post(tiny_client, "/v1/responses", body)
    assert status == 200, raw
    reply = json.loads(raw)
    assert reply["object"] == "response" and reply["id"].startswith("resp_")
    assert reply["status"] == "incomplete" and reply["incomplete_details"] == {"reason": "max_output_tokens"}
    (item,) = reply["output"]
    assert item["type"] == "message" and item["content"][0]["type"] == "output_text"
    assert reply["usage"]["output_tokens"] == 3 and reply["instructions"] == "Be brief."
    status, raw, response = await post(tiny_client, "/v1/responses", body | {"stream": True})
    assert status == 200 and response.content_type == "text/event-stream"
    blocks = raw.split("\n\n")[:-1]
    types, events = [], []
    for block in blocks:
        event_line, data_line = block.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {event['type']}"
        types.append(event["type"])
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [t for t in types if t == "response.output_text.delta"]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == text == item["content"][0]["text"]


async def test_responses_tool_call_round_trip_items(tool_client):
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["function"]["parameters"]}
    body = {"input": "Weather in Paris?", "tools": [tool], **FORCE_CALL}
    _, raw, _ = await post(tool_client, "/v1/responses", body)
    (call,) = json.loads(raw)["output"]
    assert (
        call["type"] == "function_call"
        and call["name"] == "get_weather"
        and call["call_id"].startswith("call_")
    )
    follow = [
        {"role": "user", "content": "Weather in Paris?"},
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
    ]
    status, raw, _ = await post(tool_client, "/v1/responses", {"input": follow, "max_output_tokens": 2})
    assert status == 200, raw
    status, raw, _ = await post(tool_client, "/v1/responses", body | {"stream": True})
    types = [b.split("\n")[0].removeprefix("event: ") for b in raw.split("\n\n")[:-1]]
    assert (
        "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    )


BAD_RESPONSES = [
    ({}, "input"),
    ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0]"),
]


@pytest.mark.parametrize("body, param", BAD_RESPONSES, ids=[p for _, p in BAD_RESPONSES])
async def test_responses_bad_fields(tiny_client, body, param):
    assert_openai_error(*(await post(tiny_client, "/v1/responses", body))[:2], param)


# ---- the real model -----------------------------------------------------------------------------------


@pytest.mark.registry
async def test_smollm2_answers(smollm2_client):
    chat = {"messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0, "max_tokens": 16}
    status, raw, _ = await post(smollm2_client, "/v1/chat/completions", chat)
    assert status == 200, raw
    answer = json.loads(raw)["choices"][0]["message"]["content"]
    assert "4" in answer
    # The first request computed the prompt cold; the next two find it in the prefix cache and compute only its
    # tail: the same text, since a token's int8 matmuls round the same alone and inside a prompt
    # (blazr.quant.cpu_int8_lanes; before them this prompt's near-tie after "4." flipped on an Intel Xeon).
    _, raw, _ = await post(smollm2_client, "/v1/chat/completions", chat)
    assert json.loads(raw)["choices"][0]["message"]["content"] == answer
    _, raw, _ = await post(smollm2_client, "/v1/chat/completions", chat | {"stream": True})
    streamed = "".join(json.loads(p)["choices"][0]["delta"].get("content", "") for p in sse_events(raw))
    assert streamed == answer
    body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0}
    _, raw, _ = await post(smollm2_client, "/v1/completions", body)
    assert json.loads(raw)["choices"][0]["text"].startswith(" Paris.")


async def test_llama_cpp_sampler_extras_are_accepted_and_checked(tiny_client):
    """mirostat, typical_p, dynatemp, XTC and top-n-sigma by llama.cpp's names: a seeded request repeats; a value
    out of range is a 400 naming it; Ollama's options carry mirostat and typical_p."""
    extras = {"mirostat": 2, "mirostat_tau": 3.0, "typical_p": 0.9, "dynatemp_range": 0.3, "seed": 4}
    body = {"messages": HI, "max_tokens": 8, "xtc_probability": 0.5, "top_n_sigma": 1.5, **extras}
    first = json.loads((await post(tiny_client, "/v1/chat/completions", body))[1])
    second = json.loads((await post(tiny_client, "/v1/chat/completions", body))[1])
    assert first["choices"][0]["message"] == second["choices"][0]["message"]
    dry = {"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_sequence_breakers": ["\n"]}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", {"messages": HI, "max_tokens": 6, **dry})
    assert status == 200, raw
    bad = [("mirostat", 3), ("typical_p", 0), ("xtc_probability", 2), ("mirostat_eta", -1)]
    bad += [("dry_base", 0.5), ("dry_allowed_length", 0), ("dry_sequence_breakers", [""])]
    for field, value in bad:
        status, raw, _ = await post(tiny_client, "/v1/chat/completions", {"messages": HI, field: value})
        assert_openai_error(status, raw, field)
    options = {"mirostat": 1, "mirostat_tau": 4.0, "typical_p": 0.8, "num_predict": 4, "seed": 2}
    response = await tiny_client.post(
        "/api/chat", json={"model": "tiny", "messages": HI, "stream": False, "options": options}
    )
    assert response.status_code == 200, await response.get_data()


async def test_speculative_decoding_in_serve_keeps_the_greedy_text_and_reports_acceptance(
    make_app, tiny_model_dir
):
    """inference.speculative_method=ngram (serve --speculative ngram): greedy replies equal the plain server's,
    /metrics reports drafted and accepted tokens, and a request with "speculative": false drafts nothing."""
    body = {"prompt": "a b c d " * 12, "max_tokens": 40, "temperature": 0}
    plain_app = await make_app(model="tiny", model_dir=tiny_model_dir)
    want = json.loads((await post(plain_app.test_client(), "/v1/completions", body))[1])["choices"][0]["text"]
    settings = server_settings()
    settings.set("inference.speculative_method", "ngram", "test")
    settings.set("inference.speculative_num_speculative_tokens", 4, "test")
    app = await make_app(model="tiny", model_dir=tiny_model_dir, settings=settings)
    client = app.test_client()
    got = json.loads((await post(client, "/v1/completions", body))[1])["choices"][0]["text"]
    assert got == want

    def drafted(text: str) -> float:
        match = re.search(r'blazr_spec_decode_draft_tokens\{model="tiny.gguf"\} ([0-9.]+)', text)
        assert match, text
        return float(match.group(1))

    text = (await (await client.get("/metrics")).get_data()).decode()
    before = drafted(text)
    assert before > 0 and "blazr_spec_decode_acceptance_ratio" in text
    off = json.loads((await post(client, "/v1/completions", body | {"speculative": False}))[1])
    assert off["choices"][0]["text"] == want
    assert drafted((await (await client.get("/metrics")).get_data()).decode()) == before
