"""A Modelfile's TEMPLATE (an Ollama Go template) and MESSAGEs over HTTP: a derived model's prompts on every
route family are the template's text (the same reply as that text sent raw), /api/generate takes a request's
own `template`, /api/show gives the template, messages and capabilities, and bad templates are 400s."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio
TEMPLATE = (
    "{{ range .Messages }}<{{ .Role }}>{{ .Content }}</{{ .Role }}>{{ end }}"
    "{{ if .Tools }}<tools>{{ .Tools }}</tools>{{ end }}<assistant>"
)
OPTIONS = {"num_predict": 4, "temperature": 0}


async def _raw(client, prompt: str) -> dict:
    body = {"model": "tiny", "prompt": prompt, "raw": True, "stream": False, "options": OPTIONS}
    return await (await client.post("/api/generate", json=body)).get_json()


async def test_a_derived_models_template_makes_its_prompts_on_every_route(tiny_app):
    client = tiny_app.test_client()
    create = {
        "model": "tagged",
        "from": "tiny",
        "template": TEMPLATE,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "stream": False,
    }
    assert (await client.post("/api/create", json=create)).status_code == 200
    shown = await (await client.post("/api/show", json={"model": "tagged"})).get_json()
    assert shown["template"] == TEMPLATE and shown["messages"] == create["messages"]
    assert 'TEMPLATE """' in shown["modelfile"] and "tools" in shown["capabilities"]

    want = await _raw(
        client, "<system>Be brief.</system><user>hi</user><assistant>yo</assistant><user>ab</user><assistant>"
    )
    chat = {
        "model": "tagged",
        "messages": [{"role": "user", "content": "ab"}],
        "stream": False,
        "options": OPTIONS,
    }
    got = await (await client.post("/api/chat", json=chat)).get_json()
    assert got["message"]["content"] == want["response"]
    assert got["prompt_eval_count"] == want["prompt_eval_count"]
    generated = await (await client.post("/api/generate", json={**chat, "prompt": "ab"})).get_json()
    assert generated["response"] == want["response"]  # the prompt is the user turn after SYSTEM and MESSAGEs
    openai = {"model": "tagged", "messages": chat["messages"], "max_tokens": 4, "temperature": 0}
    reply = await (await client.post("/v1/chat/completions", json=openai)).get_json()
    assert reply["choices"][0]["message"]["content"] == want["response"]
    anthropic = {"model": "tagged", "messages": chat["messages"], "max_tokens": 4, "temperature": 0}
    answer = await (await client.post("/v1/messages", json=anthropic)).get_json()
    assert answer["content"][0]["text"] == want["response"]


async def test_tools_reach_the_template():
    """.Tools holds the request's tools in Ollama's JSON (checked through the prompt builder)."""
    from blazr.server.chat_prompt import build_chat_prompt

    class Tokenizer:
        def encode(self, text, add_special_tokens=True):
            return list(text.encode())

        def token_to_id(self, token):
            return None

    class Derived:
        tokenizer = Tokenizer()
        modelfile = None

    tools = [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    ]
    prompt = build_chat_prompt(Derived, [{"role": "user", "content": "q"}], tools, template=TEMPLATE)
    assert prompt.text == (
        '<user>q</user><tools>[{"type":"function","function":{"name":"f","description":"d",'
        '"parameters":{"type":"object","properties":{}}}}]</tools><assistant>'
    )
    assert prompt.options.parse_tools


async def test_a_requests_own_template_on_generate(tiny_client):
    body = {"model": "tiny", "prompt": "ab", "stream": False, "options": OPTIONS}
    templated = await (
        await tiny_client.post("/api/generate", json={**body, "template": "Q: {{ .Prompt }} A:"})
    ).get_json()
    assert templated["response"] == (await _raw(tiny_client, "Q: ab A:"))["response"]
    infill = {**body, "suffix": "yz", "template": "<P>{{ .Prompt }}<S>{{ .Suffix }}<M>"}
    filled = await (await tiny_client.post("/api/generate", json=infill)).get_json()
    assert filled["response"] == (await _raw(tiny_client, "<P>ab<S>yz<M>"))["response"]


@pytest.mark.parametrize(
    "template, phrase",
    [
        ("{{ .Prompt ", "'template': template line 1: unclosed action"),
        ("{{ upper .Prompt }}", 'function "upper" not defined'),
    ],
)
async def test_a_bad_request_template_is_a_400(tiny_client, template, phrase):
    body = {"model": "tiny", "prompt": "ab", "stream": False, "template": template}
    response = await tiny_client.post("/api/generate", json=body)
    assert response.status_code == 400 and phrase in (await response.get_json())["error"]


async def test_a_template_that_fails_while_rendering_is_a_400_naming_it(tiny_app):
    client = tiny_app.test_client()
    create = {
        "model": "broken",
        "from": "tiny",
        "template": "{{ range .Messages }}{{ .Nope }}{{ end }}",
        "stream": False,
    }
    assert (await client.post("/api/create", json=create)).status_code == 200
    chat = {"model": "broken", "messages": [{"role": "user", "content": "q"}], "stream": False}
    response = await client.post("/api/chat", json=chat)
    assert response.status_code == 400
    assert "can't evaluate field Nope" in (await response.get_json())["error"]
    openai = await client.post("/v1/chat/completions", json={"model": "broken", "messages": chat["messages"]})
    assert openai.status_code == 400 and (await openai.get_json())["error"]["param"] == "template"
    assert (await client.get("/health")).status_code == 200


async def test_a_builtin_templates_name_still_picks_that_template(tiny_app):
    """The original blazr's `template` held a built-in template's name: that reading stays, on chat too."""
    from blazr.server.chat_prompt import build_chat_prompt

    llm = next(iter(tiny_app.extensions["blazr"].models.loaded())).llm
    messages = [{"role": "user", "content": "ab"}]
    text = build_chat_prompt(llm, messages, None, template="chatml").text
    assert text.startswith("<|im_start|>user\nab<|im_end|>")
    client = tiny_app.test_client()
    chat = {"model": "tiny", "messages": messages, "template": "chatml", "stream": False, "options": OPTIONS}
    got = await (await client.post("/api/chat", json=chat)).get_json()
    assert got["message"]["content"] == (await _raw(client, text))["response"]


async def test_think_levels_and_a_bad_think_value(tiny_client):
    body = {
        "model": "tiny",
        "prompt": "ab",
        "stream": False,
        "options": OPTIONS,
        "template": "{{ .ThinkLevel }}:{{ .Prompt }}",
    }
    high = await (await tiny_client.post("/api/generate", json={**body, "think": "high"})).get_json()
    assert high["response"] == (await _raw(tiny_client, "high:ab"))["response"]
    bad = await tiny_client.post("/api/generate", json={**body, "think": "max"})
    assert bad.status_code == 400 and "invalid think value" in (await bad.get_json())["error"]
