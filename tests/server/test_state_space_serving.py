"""A hybrid state-space model served over HTTP: the Bamba tiny checkpoint (Mamba2 and attention layers) as llama.cpp's
converter wrote it, with a byte-level vocabulary added, through the OpenAI routes: concurrent choices and streams
answer as one request alone does (each sequence in its own state slot), and a slot save is a 400 that says why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.server.conftest import TINY_TEMPLATE, byte_level_alphabet
from tests.server.test_openai_routes import HI, post, sse_events
from tests.test_parity import GOLDEN

pytestmark = pytest.mark.anyio


def with_vocab(src: Path, dst: Path) -> Path:
    """Copy GGUF src to dst with the 256-token byte-level vocabulary and chat template of the tiny server model."""
    import gguf

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith(("GGUF.", "tokenizer.")) or field.name == "general.architecture":
            continue
        sub = field.types[-1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub)
    tokens = byte_level_alphabet()
    tokens[0] = "!!"  # byte 0 gives way to one merge: the GGUF reader wants a non-empty merge list
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in (1, 2) else 1 for i in range(256)])
    writer.add_token_merges(["! !"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TINY_TEMPLATE)
    for t in reader.tensors:
        shape = list(reversed(t.shape.tolist()))
        writer.add_tensor(t.name, np.array(t.data), raw_shape=shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


@pytest.fixture
async def hybrid_client(make_app, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    with_vocab(GOLDEN / "gguf" / "bamba_f32.gguf", models / "hybrid.gguf")
    app = await make_app(model="hybrid", model_dir=models, slot_save_path=str(tmp_path / "slots"))
    return app.test_client()


async def test_choices_and_streams_of_a_hybrid_answer_as_one_alone(hybrid_client):
    body = {"messages": HI, "max_tokens": 6, "temperature": 0}
    status, raw, _ = await post(hybrid_client, "/v1/chat/completions", body)
    assert status == 200, raw
    alone = json.loads(raw)["choices"][0]["message"]["content"]
    assert len(alone) >= 4  # six tokens of a byte-level vocabulary
    status, raw, _ = await post(hybrid_client, "/v1/chat/completions", body | {"n": 3})
    assert status == 200, raw
    assert [c["message"]["content"] for c in json.loads(raw)["choices"]] == [alone] * 3
    status, raw, _ = await post(hybrid_client, "/v1/chat/completions", body | {"stream": True})
    chunks = [json.loads(p) for p in sse_events(raw)]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == alone
    usage = json.loads((await post(hybrid_client, "/v1/chat/completions", body))[1])["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0  # no prefix reuse for a recurrent state


async def test_a_slot_save_of_a_hybrid_is_a_400_that_says_why(hybrid_client):
    status, raw, _ = await post(
        hybrid_client, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "id_slot": 0}
    )
    assert status == 200, raw
    response = await hybrid_client.post("/slots/0?action=save", json={"filename": "x.bin"})
    assert response.status_code == 400
    assert "state-space" in (await response.get_json())["error"]["message"]
