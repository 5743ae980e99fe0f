"""Slots over HTTP: llama.cpp's /slots listing and save / restore / erase (files in --slot-save-path), the
original blazr's /api/slots handles, and requests that run in a slot (id_slot / slot_id) keeping their KV."""

from __future__ import annotations

import pytest

from tests.tiny_models import PROMPT_IDS

pytestmark = pytest.mark.anyio
PROMPT = list(PROMPT_IDS) * 5  # 40 tokens


async def complete(client, prompt, **fields):
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0} | fields
    response = await client.post("/v1/completions", json=body)
    assert response.status_code == 200, await response.get_data()
    data = await response.get_json()
    return data["choices"][0]["text"], data["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


@pytest.fixture
async def slot_app(make_app, tiny_model_dir, tmp_path):
    return await make_app(model="tiny", model_dir=tiny_model_dir, slot_save_path=str(tmp_path / "slots"))


async def test_save_restore_erase_like_llama_cpp(slot_app):
    client = slot_app.test_client()
    text, _ = await complete(client, PROMPT, id_slot=0)
    slots = await (await client.get("/slots")).get_json()
    assert slots[0]["id"] == 0 and slots[0]["total_tokens"] > 0 and not slots[0]["is_processing"]
    held = slots[0]["total_tokens"]

    saved = await client.post("/slots/0?action=save", json={"filename": "conv.bin"})
    assert saved.status_code == 200, await saved.get_data()
    body = await saved.get_json()
    assert (
        body["id_slot"] == 0
        and body["n_saved"] == held
        and body["n_written"] > 0
        and "save_ms" in body["timings"]
    )

    erased = await (await client.post("/slots/0?action=erase")).get_json()
    assert erased == {"id_slot": 0, "n_erased": held}
    restored = await (await client.post("/slots/3?action=restore", json={"filename": "conv.bin"})).get_json()
    assert (
        restored["id_slot"] == 3
        and restored["n_restored"] == held
        and restored["n_read"] == body["n_written"]
    )
    again, cached = await complete(client, PROMPT)
    assert again == text and cached >= held - 16  # the restored KV serves the prompt (all but its last block)


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/slots/0?action=fly", {"filename": "x"}, 400),
        ("/slots/0?action=save", {"filename": "../x"}, 400),
        ("/slots/0?action=save", {"filename": "a/b"}, 400),
        ("/slots/0?action=save", {}, 400),
        ("/slots/0?action=restore", {"filename": "missing.bin"}, 404),
        ("/slots/9?action=save", {"filename": "x.bin"}, 404),  # no such slot
    ],
)
async def test_bad_slot_actions(slot_app, path, body, status):
    response = await slot_app.test_client().post(path, json=body)
    assert response.status_code == status
    assert "message" in (await response.get_json())["error"]


async def test_save_needs_a_slot_save_path(tiny_app):
    client = tiny_app.test_client()
    await complete(client, PROMPT, id_slot=1)
    response = await client.post("/slots/1?action=save", json={"filename": "x.bin"})
    assert (
        response.status_code == 501 and "--slot-save-path" in (await response.get_json())["error"]["message"]
    )


async def test_api_slots_lifecycle(slot_app):
    client = slot_app.test_client()
    opened = await client.post("/api/slots", json={"model": "tiny"})
    assert opened.status_code == 201
    slot = await opened.get_json()
    assert slot["status"] == "active" and len(slot["id"]) == 32
    await complete(client, PROMPT, slot_id=slot["id"])
    listed = {s["id"]: s for s in await (await client.get("/api/slots")).get_json()}
    assert listed[slot["id"]]["total_tokens"] > 0 and listed[slot["id"]]["idle_seconds"] >= 0
    missing = await client.post("/v1/completions", json={"prompt": "hi", "slot_id": "nope", "max_tokens": 2})
    assert missing.status_code == 404 and (await missing.get_json())["error"]["code"] == "slot_not_found"
    both = await client.post("/v1/completions", json={"prompt": "hi", "slot_id": slot["id"], "id_slot": 2})
    assert both.status_code == 400
    assert (await client.delete(f"/api/slots/{slot['id']}")).status_code == 204
    gone = await client.delete(f"/api/slots/{slot['id']}")
    assert gone.status_code == 404 and "does not exist" in (await gone.get_json())["error"]
