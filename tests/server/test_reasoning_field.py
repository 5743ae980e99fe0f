"""server.reasoning_field: the key chat replies carry reasoning under ("reasoning_content" by default, or
"reasoning" as vLLM and Ollama name it); both keys are accepted on input messages."""

from __future__ import annotations

import json

import pytest

from blazr.config import Settings
from blazr.errors import ConfigError
from tests.server.conftest import TINY_TEMPLATE, server_settings

pytestmark = pytest.mark.anyio

# The generation prompt opens a <think> block, so the whole (random) reply of the tiny model is reasoning.
THINKING_TEMPLATE = "{# replies close reasoning with </think> #}" + TINY_TEMPLATE.replace(
    "<assistant>{% endif %}", "<assistant><think>{% endif %}"
)
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}


async def thinking_client(make_app, tiny_model_dir, **server):
    settings = server_settings(**server)
    settings.set("inference.chat_template", THINKING_TEMPLATE, "test")
    app = await make_app(model="tiny", model_dir=tiny_model_dir, settings=settings)
    return app.test_client()


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reply_reasoning_uses_the_configured_key(make_app, tiny_model_dir, field):
    client = await thinking_client(make_app, tiny_model_dir, reasoning_field=field)
    message = (await (await client.post("/v1/chat/completions", json=CHAT)).get_json())["choices"][0][
        "message"
    ]
    other = {"reasoning_content", "reasoning"} - {field}
    assert isinstance(message.get(field), str) and message[field]
    assert not other & set(message)


async def test_streamed_reasoning_uses_the_configured_key(make_app, tiny_model_dir):
    client = await thinking_client(make_app, tiny_model_dir, reasoning_field="reasoning")
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    body = (await response.get_data()).decode()
    deltas = [
        choice["delta"]
        for line in body.splitlines()
        if line.startswith("data: {")
        for choice in json.loads(line[6:])["choices"]
    ]
    assert "".join(d.get("reasoning") or "" for d in deltas)
    assert not any("reasoning_content" in d for d in deltas)


def test_default_is_reasoning_content():
    assert Settings().server.reasoning_field == "reasoning_content"


def test_unknown_reasoning_field_names_the_setting():
    with pytest.raises(ConfigError, match="must be one of reasoning_content, reasoning"):
        Settings().set("server.reasoning_field", "thoughts", "config file")


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
async def test_both_keys_accepted_on_input(tiny_client, key):
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", key: "they greeted me"},
        {"role": "user", "content": "again"},
    ]
    response = await tiny_client.post("/apply-template", json={"messages": history})
    assert response.status_code == 200
