"""LoRA adapters over HTTP: serve --lora, GET/POST /v1/lora, DELETE /v1/lora/{name}, requests choosing an
adapter by lora_adapter or by model "base:adapter" on each route family, /v1/models, a reload after eviction,
and every refusal in its family's error shape. The tiny server model has the weights the adapters in
tests/golden/lora were made for, so the tokens are transformers' PeftModel's."""

from __future__ import annotations

import shutil

import pytest

from tests.tiny_lora import GOLDEN
from tests.tiny_models import PROMPT_IDS

pytestmark = pytest.mark.anyio
N = 8  # generated tokens compared


@pytest.fixture
async def lora_app(make_app, tiny_model_dir):
    shutil.copytree(GOLDEN / "llama_attn", tiny_model_dir / "adapters" / "attn")
    shutil.copytree(GOLDEN / "qwen3_patterns", tiny_model_dir / "adapters" / "qwen3")
    return await make_app(model="tiny", model_dir=tiny_model_dir, loras={"a": GOLDEN / "llama_all"})


def expected_text(app, case: str) -> str:
    import numpy as np

    ids = np.load(GOLDEN / case / "reference.npz")["ids"][:N].tolist()
    llm = app.extensions["blazr"].models.loaded()[0].llm
    return llm.tokenizer.decode(ids)


async def complete(client, **fields):
    body = {"model": "tiny", "prompt": list(PROMPT_IDS), "max_tokens": N, "temperature": 0} | fields
    return await client.post("/v1/completions", json=body)


async def test_adapter_by_field_and_by_model_name(lora_app):
    client = lora_app.test_client()
    by_field = await complete(client, lora_adapter="a")
    by_name = await complete(client, model="tiny:a")
    base = await complete(client)
    texts = [(await r.get_json())["choices"][0]["text"] for r in (by_field, by_name, base)]
    assert texts[0] == texts[1] == expected_text(lora_app, "llama_all")
    assert texts[2] != texts[0]
    ollama = await client.post(
        "/api/generate",
        json={
            "model": "tiny:a",
            "prompt": "hi",
            "stream": False,
            "options": {"num_predict": 4, "temperature": 0},
        },
    )
    assert ollama.status_code == 200
    chat = await client.post(
        "/v1/chat/completions",
        json={"model": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert chat.status_code == 200  # an adapter name alone: the default model's


async def test_list_load_use_and_delete(lora_app):
    client = lora_app.test_client()
    listing = await (await client.get("/v1/lora?model=tiny")).get_json()
    served = listing["model"]  # the default model's served name (its file name)
    assert served.startswith("tiny") and [a["name"] for a in listing["adapters"]] == ["a"]
    assert listing["adapters"][0]["format"] == "peft" and listing["adapters"][0]["rank"] == 4

    loaded = await client.post("/v1/lora", json={"model": "tiny", "name": "attn", "path": "adapters/attn"})
    assert loaded.status_code == 200, await loaded.get_data()
    body = await loaded.get_json()
    assert body["status"] == "ok" and body["model"] == served and body["adapter"]["rank"] == 8
    text = (await (await complete(client, lora_adapter="attn")).get_json())["choices"][0]["text"]
    assert text == expected_text(lora_app, "llama_attn")

    models = {m["id"]: m for m in (await (await client.get("/v1/models")).get_json())["data"]}
    assert models[f"{served}:attn"]["parent"] == served and f"{served}:a" in models

    assert (await client.delete("/v1/lora/attn?model=tiny")).status_code == 204
    gone = await complete(client, lora_adapter="attn")
    assert gone.status_code == 404
    assert (await gone.get_json())["error"]["type"] == "lora_not_found"
    again = await client.delete("/v1/lora/attn?model=tiny")
    assert again.status_code == 404 and (await again.get_json())["error"]["code"] == "lora_not_found"


async def test_adapters_come_back_after_the_model_is_unloaded(lora_app):
    client = lora_app.test_client()
    unload = await client.post("/api/generate", json={"model": "tiny", "keep_alive": 0})
    assert unload.status_code == 200
    assert lora_app.extensions["blazr"].models.loaded() == []
    text = (await (await complete(client, model="tiny:a")).get_json())["choices"][0]["text"]
    assert text == expected_text(lora_app, "llama_all")


@pytest.mark.parametrize(
    "body, status, kind",
    [
        ({"model": "tiny", "name": "x", "path": "adapters/qwen3"}, 400, "lora_load_error"),
        ({"model": "tiny", "name": "x", "path": "adapters/none"}, 400, "lora_load_error"),
        ({"model": "tiny", "name": "x", "path": "../outside"}, 400, "invalid_request_error"),
        ({"model": "tiny", "name": "x", "path": "/etc"}, 400, "invalid_request_error"),
        ({"model": "tiny", "name": "bad name", "path": "adapters/attn"}, 400, "invalid_request_error"),
        ({"model": "tiny", "name": "x"}, 400, "invalid_request_error"),
    ],
)
async def test_bad_loads_are_refused_by_name(lora_app, body, status, kind):
    response = await lora_app.test_client().post("/v1/lora", json=body)
    assert response.status_code == status
    assert (await response.get_json())["error"]["type"] == kind


async def test_unknown_adapters_in_each_family_shape(lora_app):
    client = lora_app.test_client()
    assert (await client.get("/v1/lora")).status_code == 400  # the model query is required
    openai = await complete(client, lora_adapter="nope")
    assert openai.status_code == 404 and (await openai.get_json())["error"]["param"] == "lora_adapter"
    anthropic = await client.post(
        "/v1/messages",
        json={
            "model": "tiny",
            "max_tokens": 4,
            "lora_adapter": "nope",
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert anthropic.status_code == 404
    assert (await anthropic.get_json())["error"]["type"] == "not_found_error"
    ollama = await client.post("/api/generate", json={"model": "tiny:nope", "prompt": "hi", "stream": False})
    assert ollama.status_code == 404 and "not found" in (await ollama.get_json())["error"]
    conflict = await complete(client, model="tiny:a", lora_adapter="b")
    assert conflict.status_code == 400
    embed = await client.post("/v1/embeddings", json={"model": "tiny:a", "input": "hi"})
    assert embed.status_code == 400


async def test_a_broken_serve_lora_fails_the_default_model(make_app, tiny_model_dir):
    app = await make_app(model="tiny", model_dir=tiny_model_dir, loras={"q": GOLDEN / "qwen3_patterns"})
    error = app.extensions["blazr"].models.default_error
    assert error is not None and error.status == 400 and "another base model" in error.message
