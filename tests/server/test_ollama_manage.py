"""Ollama's model management routes over a model directory: /api/copy, /api/delete, /api/pull (its NDJSON
progress, a model already present, a name outside the catalog), each error in Ollama's {"error"} shape."""

from __future__ import annotations

import json
import time

import pytest

from blazr.loaders import registry

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "hi"}]


async def tag_names(client) -> set[str]:
    return {m["name"] for m in (await (await client.get("/api/tags")).get_json())["models"]}


async def test_copy_then_delete_a_model(tiny_app, tiny_model_dir):
    client = tiny_app.test_client()
    assert (
        await client.post("/api/copy", json={"source": "tiny", "destination": "tiny2"})
    ).status_code == 200
    assert (tiny_model_dir / "tiny2.gguf").is_file() and any(
        n.startswith("tiny2") for n in await tag_names(client)
    )
    body = {"model": "tiny2", "messages": HI, "stream": False, "options": {"num_predict": 2}}
    assert (await client.post("/api/chat", json=body)).status_code == 200  # loads and runs under the new name
    assert (await client.delete("/api/delete", json={"model": "tiny2:latest"})).status_code == 200
    assert not (tiny_model_dir / "tiny2.gguf").exists()
    assert "tiny2" not in {m["name"] for m in (await (await client.get("/api/ps")).get_json())["models"]}
    again = await client.delete("/api/delete", json={"model": "tiny2"})
    assert again.status_code == 404 and "not found" in (await again.get_json())["error"]
    assert (tiny_model_dir / "tiny.gguf").exists()  # the source is untouched


@pytest.mark.parametrize(
    "path, method, body",
    [
        ("/api/copy", "post", {"source": "nope", "destination": "x"}),
        ("/api/copy", "post", {"source": "tiny", "destination": "../escape"}),
        ("/api/copy", "post", {"source": "tiny"}),
        ("/api/delete", "delete", {"model": "/etc/passwd"}),
        ("/api/pull", "post", {"model": "no-such-model", "stream": False}),
    ],
)
async def test_bad_management_requests_answer_in_ollamas_shape(tiny_app, path, method, body):
    response = await getattr(tiny_app.test_client(), method)(path, json=body)
    assert response.status_code in (400, 404), await response.get_data()
    assert isinstance((await response.get_json())["error"], str)


async def test_pull_streams_progress_then_success(tiny_app, tiny_model_dir, monkeypatch):
    """A download is registry.fetch (sha256-checked, as `blazr pull`); here a stand-in that grows the partial
    file in three steps, so the stream's progress lines can be read."""
    entry = registry.lookup("smollm2-135m-instruct")

    def slow_fetch(model, directory, quiet=True):
        partial = directory / (model.filename + ".partial")
        for i in range(3):
            partial.write_bytes(b"x" * (1000 * (i + 1)))
            time.sleep(0.6)
        target = directory / model.filename
        partial.replace(target)
        return target

    monkeypatch.setattr(registry, "fetch", slow_fetch)
    response = await tiny_app.test_client().post("/api/pull", json={"model": entry.name})
    lines = [json.loads(line) for line in (await response.get_data()).decode().splitlines() if line]
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    progress = [line for line in lines if line.get("digest") == f"sha256:{entry.member_sha256}"]
    assert len(progress) >= 3 and progress[-1]["total"] == progress[-1]["completed"] == 3000
    assert [line["completed"] for line in progress] == sorted(line["completed"] for line in progress)
    assert (tiny_model_dir / entry.filename).is_file()


async def test_pull_of_a_model_already_there_succeeds_at_once(make_app, tmp_path, smollm2_gguf):
    entry = registry.lookup("smollm2-135m-instruct")
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / entry.filename).symlink_to(smollm2_gguf)  # the catalog's file, sha256 and all
    app = await make_app(model=None, model_dir=directory)
    client = app.test_client()
    plain = await client.post("/api/pull", json={"name": entry.name, "stream": False})
    assert plain.status_code == 200 and await plain.get_json() == {"status": "success"}
    lines = (
        (await (await client.post("/api/pull", json={"model": entry.name})).get_data()).decode().splitlines()
    )
    assert [json.loads(x)["status"] for x in lines] == [
        "pulling manifest",
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]


async def test_create_a_derived_model_and_chat_with_it(tiny_app, tiny_model_dir):
    """/api/create from Ollama's fields: the new model lists, /api/show gives its Modelfile and system, a chat
    with it gets the SYSTEM as its system message and the PARAMETERs as defaults the request may override."""
    client = tiny_app.test_client()
    body = {
        "model": "pirate",
        "from": "tiny",
        "system": "Talk like a pirate.",
        "parameters": {"num_predict": 3, "temperature": 0, "stop": ["\n\n"]},
        "stream": False,
    }
    created = await client.post("/api/create", json=body)
    assert created.status_code == 200 and (await created.get_json()) == {"status": "success"}
    assert (tiny_model_dir / "pirate.modelfile").is_file()
    assert "pirate" in await tag_names(client)
    shown = await (await client.post("/api/show", json={"model": "pirate"})).get_json()
    assert shown["system"] == "Talk like a pirate." and "FROM tiny" in shown["modelfile"]
    assert "num_predict 3" in shown["parameters"]

    state = tiny_app.extensions["blazr"]
    chat = {"model": "pirate", "messages": HI, "stream": False}
    reply = await (await client.post("/api/chat", json=chat)).get_json()
    assert reply["eval_count"] <= 3  # num_predict 3 from the Modelfile
    loaded = next(m for m in state.models.loaded() if m.name.startswith("pirate"))
    assert loaded.name == "pirate"  # served under its own name, as /api/tags lists it
    from blazr.server.chat_prompt import build_chat_prompt

    prompt = build_chat_prompt(loaded.llm, HI, None).text
    assert "Talk like a pirate." in prompt  # SYSTEM opens a conversation that has none
    own = build_chat_prompt(loaded.llm, [{"role": "system", "content": "Be brief."}, *HI], None).text
    assert "pirate" not in own  # a conversation's own system message wins
    openai = await client.post("/v1/chat/completions", json={"model": "pirate", "messages": HI})
    assert (await openai.get_json())["usage"][
        "completion_tokens"
    ] <= 3  # the OpenAI routes take the defaults too
    longer = await (await client.post("/api/chat", json=chat | {"options": {"num_predict": 6}})).get_json()
    assert 3 < longer["eval_count"] <= 6 or longer["done_reason"] == "stop"  # the request's option wins


async def test_create_with_an_adapter_serves_base_plus_adapter(tiny_app, tiny_model_dir):
    """A Modelfile's ADAPTER (inside the model directory over HTTP) applies to every request of the derived
    model: its greedy text is the adapter's (transformers' PeftModel ids), the base's stays its own."""
    import shutil

    import numpy as np

    from tests.tiny_lora import GOLDEN
    from tests.tiny_models import PROMPT_IDS

    shutil.copytree(GOLDEN / "llama_all", tiny_model_dir / "adapters" / "all")
    body = {"model": "tuned", "modelfile": "FROM tiny\nADAPTER adapters/all", "stream": False}
    assert (await tiny_app.test_client().post("/api/create", json=body)).status_code == 200
    client = tiny_app.test_client()

    async def text(model: str) -> str:
        fields = {"model": model, "prompt": list(PROMPT_IDS), "max_tokens": 8, "temperature": 0}
        return (await (await client.post("/v1/completions", json=fields)).get_json())["choices"][0]["text"]

    tuned = await text("tuned")
    llm = next(m for m in tiny_app.extensions["blazr"].models.loaded() if m.name == "tuned").llm
    want = np.load(GOLDEN / "llama_all" / "reference.npz")["ids"][:8].tolist()
    assert tuned == llm.tokenizer.decode(want)
    assert await text("tiny") != tuned
    outside = {"model": "x", "modelfile": f"FROM tiny\nADAPTER {GOLDEN / 'llama_all'}", "stream": False}
    refused = await client.post("/api/create", json=outside)
    assert refused.status_code == 400 and "inside the model directory" in (await refused.get_json())["error"]


@pytest.mark.parametrize(
    "body, phrase",
    [
        ({"model": "x", "from": "tiny", "template": "{{ .Prompt "}, "'template': template line 1: unclosed"),
        ({"model": "x", "from": "tiny", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
        ({"model": "x", "from": "tiny", "adapters": {"a": "sha256:1"}}, "adapters"),
        ({"model": "x", "from": "nowhere"}, "nowhere"),
        ({"model": "x", "modelfile": "FROM tiny\nTEMPLATE {{ end }}"}, "line 2: TEMPLATE"),
        ({"model": "x", "from": "tiny", "parameters": {"num_gpu": 1}}, "num_gpu"),
        ({"model": "x", "from": "tiny", "parameters": {"top_k": 1.5}}, "top_k"),
    ],
)
async def test_create_refuses_what_it_cannot_take(tiny_app, body, phrase):
    """Each refusal names what it refuses, in Ollama's {"error"} shape."""
    response = await tiny_app.test_client().post("/api/create", json=body | {"stream": False})
    assert response.status_code in (400, 404), await response.get_data()
    assert phrase in (await response.get_json())["error"]
    assert isinstance((await response.get_json())["error"], str)


def test_the_ollama_client_manages_models(live_server, tiny_model_dir, smollm2_gguf):
    """The real ollama Python client's pull, copy, create and delete against blazr, unmodified."""
    ollama = pytest.importorskip("ollama")
    entry = registry.lookup("smollm2-135m-instruct")
    (tiny_model_dir / entry.filename).symlink_to(smollm2_gguf)  # the catalog's file: pull finds it there
    with live_server(model="tiny") as server:
        client = ollama.Client(host=server.url)
        assert client.pull(entry.name).status == "success"
        progress = [p.status for p in client.pull(entry.name, stream=True)]
        assert progress[0] == "pulling manifest" and progress[-1] == "success"
        with pytest.raises(ollama.ResponseError) as missing:
            client.pull("no-such-model")
        assert missing.value.status_code == 404

        assert client.copy("tiny", "tiny-copy").status == "success"
        created = client.create(
            model="pirate", from_="tiny", system="Talk like a pirate.", parameters={"num_predict": 3}
        )
        assert created.status == "success"
        template = "{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}<assistant>"
        shaped = client.create(
            model="shaped", from_="tiny", template=template, messages=[{"role": "user", "content": "hi"}]
        )
        assert shaped.status == "success" and client.show("shaped").template == template
        names = [m.model for m in client.list().models]  # a copied file keeps its suffix: tiny-copy.gguf
        assert any(n.startswith("tiny-copy") for n in names) and "pirate" in names
        reply = client.chat(model="pirate", messages=[{"role": "user", "content": "hi"}])
        assert reply.eval_count <= 3  # the derived model's num_predict
        assert client.delete("tiny-copy").status == "success"
        with pytest.raises(ollama.ResponseError) as gone:
            client.delete("tiny-copy")
        assert gone.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as blobs:
            client.create(model="x", from_="tiny", adapters={"lora.gguf": "sha256:00"})
        assert blobs.value.status_code == 400 and "adapter" in blobs.value.error


async def test_pull_of_a_hub_repo_names_the_repo_when_the_hub_is_out_of_reach(tiny_app, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    client = tiny_app.test_client()
    plain = await client.post("/api/pull", json={"model": "someone/tiny-model", "stream": False})
    assert plain.status_code == 502
    assert "someone/tiny-model" in (await plain.get_json())["error"]
    lines = [
        json.loads(x)
        for x in (await (await client.post("/api/pull", json={"model": "someone/x"})).get_data())
        .decode()
        .splitlines()
    ]
    assert lines[0] == {"status": "pulling manifest"} and "someone/x" in lines[-1]["error"]


async def test_pull_of_a_hub_repo_with_a_quant_tag(tiny_app, tiny_model_dir, monkeypatch):
    """Ollama's <hub host>/owner/name:QUANT picks that GGUF of the repo (the Hub's answers stand in here)."""
    from blazr.loaders import hub

    fetched = []

    def fake_call(repo_id, call, file=None):
        if file is None:  # the file listing
            return ["README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf"]
        fetched.append(file)
        cached = tiny_model_dir.parent / file
        cached.write_bytes(b"GGUF" + bytes(60))
        return str(cached)

    monkeypatch.setattr(hub, "_hub_call", fake_call)
    client = tiny_app.test_client()
    body = {"model": "hf.example/someone/m-GGUF:q8_0", "stream": False}
    assert (await client.post("/api/pull", json=body)).status_code == 200
    assert fetched == ["m-Q8_0.gguf"] and (tiny_model_dir / "m-GGUF" / "m-Q8_0.gguf").is_file()
    wrong = await client.post("/api/pull", json=body | {"model": "someone/m-GGUF:IQ1_S"})
    assert wrong.status_code == 404 and "m-Q4_K_M.gguf" in (await wrong.get_json())["error"]
