"""Structured outputs through the server: response_format json_object / json_schema, grammar, regex and
guided_choice, forced tool calls (OpenAI tool_choice "required" / named, Anthropic any / tool), the Responses
API's text.format and Ollama's format. The tiny random-weight model writes noise, so only the constraint can
make its output valid; the real SmolLM2 is driven through the openai SDK on a live socket."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("llguidance")

from tests.server.conftest import SMOLLM2_NAME, run_live_server, server_settings  # noqa: E402
from tests.server.test_openai_routes import assert_openai_error, post, sse_events  # noqa: E402

pytestmark = pytest.mark.anyio

HI = [{"role": "user", "content": "hi"}]
PICK = {
    "type": "object",
    "properties": {
        "size": {"enum": ["S", "M", "L"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "gift": {"type": "boolean"},
    },
    "required": ["size", "count", "gift"],
    "additionalProperties": False,
}
# Short tools: the tiny model's byte vocabulary spends a token per character of the tool prompt.
RATE_TOOL = {
    "type": "function",
    "function": {
        "name": "rate",
        "parameters": {
            "properties": {"s": {"enum": [1, 2, 3]}},
            "required": ["s"],
            "additionalProperties": False,
        },
    },
}
OK_TOOL = {
    "type": "function",
    "function": {
        "name": "ok",
        "parameters": {
            "properties": {"v": {"type": "boolean"}},
            "required": ["v"],
            "additionalProperties": False,
        },
    },
}


def check_schema(instance, schema) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(instance, schema)


async def chat(client, **fields):
    status, raw, _ = await post(client, "/v1/chat/completions", {"messages": HI, "temperature": 0} | fields)
    assert status == 200, raw
    return json.loads(raw)["choices"][0]


# ---- the tiny model --------------------------------------------------------------------------------------


async def test_response_format_json_schema_and_json_object(tiny_client):
    schema_format = {"type": "json_schema", "json_schema": {"name": "pick", "schema": PICK, "strict": True}}
    choice = await chat(tiny_client, response_format=schema_format, max_tokens=120)
    assert choice["finish_reason"] == "stop"
    check_schema(json.loads(choice["message"]["content"]), PICK)
    shaped = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    seeded = await chat(tiny_client, json_schema=shaped, max_tokens=60, temperature=1.0, seed=4)
    assert isinstance(json.loads(seeded["message"]["content"])["ok"], bool)


async def test_grammar_regex_and_choice_fields(tiny_client):
    gbnf = await chat(tiny_client, grammar='root ::= ("on" | "off") "-" [0-9] [0-9]', max_tokens=20)
    assert re.fullmatch(r"(on|off)-[0-9]{2}", gbnf["message"]["content"])
    regex = await chat(tiny_client, guided_regex=r"[xyz]{3}\.", max_tokens=20)
    assert re.fullmatch(r"[xyz]{3}\.", regex["message"]["content"])
    choice = await chat(tiny_client, structured_outputs={"choice": ["alpha", "beta"]}, max_tokens=20)
    assert choice["message"]["content"] in ("alpha", "beta")
    status, raw, _ = await post(
        tiny_client, "/v1/completions", {"prompt": "x", "grammar": 'root ::= "A"+ "!"'}
    )
    assert re.fullmatch(r"A+!", json.loads(raw)["choices"][0]["text"]), raw


async def test_streamed_chat_with_a_schema_parses_when_joined(tiny_client):
    body = {"messages": HI, "stream": True, "max_tokens": 120, "temperature": 0.8, "seed": 2}
    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": PICK}}
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", body)
    assert status == 200, raw
    chunks = [json.loads(e) for e in sse_events(raw)]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    check_schema(json.loads(text), PICK)


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "rate"}}])
async def test_forced_tool_call_arguments_validate(tiny_client, tool_choice):
    choice = await chat(tiny_client, tools=[RATE_TOOL], tool_choice=tool_choice, max_tokens=60)
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "rate"
    check_schema(json.loads(call["function"]["arguments"]), RATE_TOOL["function"]["parameters"])


def test_required_tool_choice_picks_one_of_several_tools():
    """The anyOf over several tools, on the engine directly (two tool prompts overflow the tiny server's
    512-token context); the reply parser must turn the output into a valid call of one of them."""
    from blazr.backends import get_backend
    from blazr.engine import Engine, SamplingParams
    from blazr.models.llama import Model, ModelArgs
    from blazr.server.reply_parser import ReplyOptions, parse_reply
    from blazr.server.structured_output import tool_call_constraint
    from tests.test_constraints import PROMPT, byte_tokenizer, run
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))
    constraint = tool_call_constraint([RATE_TOOL, OK_TOOL], None, "tool_choice")
    params = SamplingParams(max_tokens=80, temperature=1.0, seed=1, n=4, constraint=constraint)
    got = run(Engine(model, byte_tokenizer(), model.be, num_ctx=128), [("t", PROMPT, params)])
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in (RATE_TOOL, OK_TOOL)}
    for index in range(4):
        (call,) = parse_reply(got[("t", index)]["text"], ReplyOptions(parse_tools=True)).calls
        check_schema(json.loads(call.arguments), tools[call.name])


async def test_responses_text_format_and_named_tool(tiny_client):
    fmt = {"type": "json_schema", "name": "pick", "schema": PICK, "strict": True}
    status, raw, _ = await post(
        tiny_client, "/v1/responses", {"input": "hi", "text": {"format": fmt}, "max_output_tokens": 120}
    )
    assert status == 200, raw
    body = json.loads(raw)
    check_schema(json.loads(body["output"][0]["content"][0]["text"]), PICK)
    assert body["text"]["format"]["type"] == "json_schema"
    tool = {"type": "function", "name": "rate", "parameters": RATE_TOOL["function"]["parameters"]}
    forced = {"input": "hi", "tools": [tool], "tool_choice": {"type": "function", "name": "rate"}}
    status, raw, _ = await post(tiny_client, "/v1/responses", forced | {"max_output_tokens": 60})
    call = json.loads(raw)["output"][0]
    assert call["type"] == "function_call" and call["name"] == "rate", raw
    check_schema(json.loads(call["arguments"]), tool["parameters"])


async def test_anthropic_tool_choice_any_and_tool(tiny_client):
    tools = [{"name": "rate", "input_schema": RATE_TOOL["function"]["parameters"]}]
    for choice in ({"type": "any"}, {"type": "tool", "name": "rate"}):
        body = {"messages": HI, "max_tokens": 60, "tools": tools, "tool_choice": choice, "temperature": 0}
        response = await tiny_client.post("/v1/messages", json=body)
        message = await response.get_json()
        assert response.status_code == 200 and message["stop_reason"] == "tool_use", message
        block = message["content"][-1]
        assert block["type"] == "tool_use" and block["name"] == "rate"
        check_schema(block["input"], tools[0]["input_schema"])


async def test_ollama_format_schema(tiny_client):
    # "json" lets the noise model write endless keys; it is checked on SmolLM2 below
    options = {"temperature": 0, "num_predict": 120}
    body = {"messages": HI, "stream": False, "format": PICK, "options": options}
    reply = await (await tiny_client.post("/api/chat", json=body)).get_json()
    check_schema(json.loads(reply["message"]["content"]), PICK)
    bad = {"prompt": "x", "stream": False, "format": "yaml"}
    response = await tiny_client.post("/api/generate", json=bad)
    assert response.status_code == 400 and "format" in (await response.get_json())["error"]


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 7}}}}, "response_format"),
    ({"guided_choice": []}, "guided_choice"),
    ({"structured_outputs": {"yaml": "x"}}, "structured_outputs.yaml"),
    ({"tools": [OK_TOOL], "tool_choice": "required", "grammar": 'root ::= "a"'}, "tool_choice"),
    ({"guided_regex": "(", "json_schema": {}}, "guided_regex"),
    ({"guided_regex": "("}, "guided_regex"),
]


@pytest.mark.parametrize("fields, param", BAD, ids=[p for _, p in BAD])
async def test_bad_constraints_are_400_naming_the_field(tiny_client, fields, param):
    status, raw, _ = await post(tiny_client, "/v1/chat/completions", {"messages": HI} | fields)
    assert_openai_error(status, raw, param)


# ---- the real SmolLM2 through the openai SDK ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_server(smollm2_gguf, tmp_path_factory):
    from blazr.server.app import create_app

    directory = tmp_path_factory.mktemp("smollm2-structured")
    (directory / SMOLLM2_NAME).symlink_to(smollm2_gguf)
    app = create_app(server_settings(), model=SMOLLM2_NAME, model_dir=directory)
    with run_live_server(app, timeout=120) as server:
        yield server


@pytest.mark.registry
def test_smollm2_sdk_json_schema_and_required_tool_call(smollm2_server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=smollm2_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    person = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "city": {"enum": ["Paris", "London", "Tokyo"]},
        },
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model=SMOLLM2_NAME,
        messages=[{"role": "user", "content": "Invent a person: name, age and city, as JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": person, "strict": True},
        },
        temperature=0,
        max_tokens=80,
    )
    assert reply.choices[0].finish_reason == "stop"
    check_schema(json.loads(reply.choices[0].message.content), person)

    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["C", "F"]}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
    called = client.chat.completions.create(
        model=SMOLLM2_NAME,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[weather],
        tool_choice="required",
        temperature=0,
        max_tokens=80,
    )
    assert called.choices[0].finish_reason == "tool_calls"
    (call,) = called.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    check_schema(json.loads(call.function.arguments), weather["function"]["parameters"])


@pytest.mark.registry
def test_smollm2_ollama_format_json(smollm2_server):
    import httpx

    body = {
        "model": SMOLLM2_NAME,
        "messages": [
            {"role": "user", "content": "Give a JSON object with the keys fruit and color for a banana."}
        ],
        "format": "json",
        "stream": False,
        "options": {"temperature": 0, "num_predict": 200},
    }
    reply = httpx.post(smollm2_server.url + "/api/chat", json=body, timeout=300).json()
    assert reply["done_reason"] == "stop", reply  # a complete object ends the reply
    assert isinstance(json.loads(reply["message"]["content"]), dict)
