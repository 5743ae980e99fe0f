"""/tokenize, /detokenize, /apply-template, /v1/infill and /v1/rerank (+ /rerank, TEI shape): the real
SmolLM2 vocabulary and template where content matters, a tiny model with FIM tokens for infill."""

from __future__ import annotations

import json

import pytest

from blazr.server.errors import ApiError
from blazr.server.routes.infill import SNIPPET_SEPARATOR, FimTokens, find_fim_tokens, infill_prompt_ids
from tests.gguf_writer import write_gguf
from tests.server.conftest import TINY_TEMPLATE, byte_level_alphabet
from tests.tiny_models import tiny_config, tiny_weights

pytestmark = pytest.mark.anyio
FIM_TEXTS = {3: "<|fim_prefix|>", 4: "<|fim_suffix|>", 5: "<|fim_middle|>"}  # unused control bytes, renamed


def openai_error(body: dict) -> dict:
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# ---- tokenizer routes on SmolLM2 -----------------------------------------------------------------------


async def test_tokenizer_routes(smollm2_client):
    client = smollm2_client
    text = "The capital of France is"
    ids = (await (await client.post("/tokenize", json={"content": text})).get_json())["tokens"]
    assert len(ids) == 5 and all(isinstance(i, int) for i in ids)
    pieces = await (await client.post("/tokenize", json={"content": text, "with_pieces": True})).get_json()
    assert (
        "".join(p["piece"] for p in pieces["tokens"]) == text and [p["id"] for p in pieces["tokens"]] == ids
    )
    special = await (await client.post("/tokenize", json={"content": "<|im_start|>user"})).get_json()
    assert special["tokens"][0] == 1  # special-token text is parsed to its id
    empty = await (await client.post("/tokenize", json={"content": ""})).get_json()
    assert empty == {"tokens": []}
    back = await (await client.post("/detokenize", json={"tokens": ids})).get_json()
    assert back == {"content": text}
    bad = await client.post("/detokenize", json={"tokens": [1, 49152]})
    assert bad.status_code == 400 and openai_error(await bad.get_json())["param"] == "tokens"
    missing = await client.post("/tokenize", json={"text": text})
    assert missing.status_code == 400 and openai_error(await missing.get_json())["param"] == "content"
    await check_apply_template_and_infill_refusal(client)


async def check_apply_template_and_infill_refusal(client) -> None:
    """(Shares the SmolLM2 app of test_tokenizer_routes: one model load.)"""
    messages = [{"role": "user", "content": "Hi"}]
    prompt = (await (await client.post("/apply-template", json={"messages": messages})).get_json())["prompt"]
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    llama3 = await (
        await client.post("/apply-template", json={"messages": messages, "template": "llama3"})
    ).get_json()
    assert "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" in llama3["prompt"]
    inline = {"messages": messages, "template": "{{ messages[0].content }}!", "add_generation_prompt": False}
    assert (await (await client.post("/apply-template", json=inline)).get_json()) == {"prompt": "Hi!"}
    for template in ("/etc/hostname", "chat.jinja"):  # never a file of the server
        refused = await client.post("/apply-template", json={"messages": messages, "template": template})
        assert refused.status_code == 400 and openai_error(await refused.get_json())["param"] == "template"
    # SmolLM2's vocabulary has <repo_name> and <file_sep> but no FIM tokens
    infill = await client.post("/v1/infill", json={"input_prefix": "def f(", "input_suffix": ")"})
    error = openai_error(await infill.get_json())
    assert (
        infill.status_code == 400
        and "<fim_prefix>" in error["message"]
        and "<|fim_prefix|>" in error["message"]
    )


# ---- rerank (the routes with encoder models: tests/server/test_embedding_models.py) ---------------------


async def test_rerank_with_a_text_generation_model_is_a_400_naming_the_model(tiny_client):
    response = await tiny_client.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]})
    error = openai_error(await response.get_json())
    assert response.status_code == 400 and error["param"] == "model" and "text generation" in error["message"]


# ---- infill on a tiny model with FIM tokens ------------------------------------------------------------


@pytest.fixture(scope="module")
def fim_gguf(tmp_path_factory):
    tokens = byte_level_alphabet()
    tokens[0] = "!!"  # as conftest's tiny vocab: one merge, which the GGUF reader requires
    types = [1] * 256
    for token_id, text in FIM_TEXTS.items():
        tokens[token_id], types[token_id] = text, 3
    types[1] = types[2] = 3
    tokenizer = {"model": "gpt2", "pre": "default", "tokens": tokens, "token_type": types, "merges": ["! !"]}
    tokenizer |= {"add_bos_token": False, "chat_template": TINY_TEMPLATE}
    path = tmp_path_factory.mktemp("fim") / "fim.gguf"
    return write_gguf(path, tiny_config("llama"), tiny_weights("llama"), "F32", tokenizer=tokenizer)


@pytest.fixture
async def fim_client(make_app, fim_gguf, tmp_path):
    directory = tmp_path / "fim-models"
    directory.mkdir()
    (directory / "fim.gguf").symlink_to(fim_gguf)
    return (await make_app(model="fim", model_dir=directory)).test_client()


class ByteTokenizer:
    """Bytes as ids, FIM token texts from FIM_TEXTS: enough for the prompt layout."""

    bos_id, add_bos = 1, False

    def encode(self, text, add_special_tokens=False):
        return list(text.encode())

    def token_to_id(self, text):
        return {v: k for k, v in FIM_TEXTS.items()}.get(text)


def test_fim_tokens_and_prompt_layout():
    tok = ByteTokenizer()
    fim = find_fim_tokens(tok)
    assert fim == FimTokens(3, 4, 5)
    extra = [{"filename": "a.py", "text": "x"}]
    ids = infill_prompt_ids(tok, fim, "ab", "c", extra, "d")
    assert ids == list((SNIPPET_SEPARATOR + "x").encode()) + [3, 97, 98, 4, 99, 5, 100]
    with_sep = infill_prompt_ids(tok, FimTokens(3, 4, 5, repo=6, separator=7), "", "", extra, "")
    assert with_sep == [6, *b"myproject\n", 7, *b"a.py\n", *b"x", 7, *b"filename\n", 3, 4, 5]
    meta = {f"tokenizer.ggml.{k}_token_id": i for k, i in (("fim_pre", 10), ("fim_suf", 11), ("fim_mid", 12))}
    assert find_fim_tokens(object(), meta) == FimTokens(10, 11, 12)  # GGUF metadata wins over token texts

    class NoFim(ByteTokenizer):
        def token_to_id(self, text):
            return None

    with pytest.raises(ApiError) as info:
        find_fim_tokens(NoFim())
    assert info.value.status == 400 and "<|fim_middle|>" in info.value.message


async def test_infill_route(fim_client):
    body = {"input_prefix": "def f(", "input_suffix": "):", "max_tokens": 4, "temperature": 0, "unknown": 1}
    response = await fim_client.post("/v1/infill", json=body)
    assert response.status_code == 200
    whole = await response.get_json()
    assert (
        whole["id"].startswith("fim-")
        and whole["object"] == "text_completion"
        and whole["model"] == "fim.gguf"
    )
    assert (
        whole["choices"][0]["text"] == whole["content"] and whole["choices"][0]["finish_reason"] == "length"
    )
    assert whole["usage"]["prompt_tokens"] == len("def f(") + len("):") + 3
    streamed = await fim_client.post("/infill", json={**body, "stream": True, "prefix": "ignored"})
    events = (await streamed.get_data(as_text=True)).strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["stop"] is True
    shown = await (await fim_client.post("/api/show", json={"model": "fim"})).get_json()
    assert "insert" in shown["capabilities"]
    ollama = await fim_client.post(
        "/api/generate",
        json={
            "prompt": "def f(",
            "suffix": "):",
            "stream": False,
            "options": {"num_predict": 4, "temperature": 0},
        },
    )
    assert (await ollama.get_json())["response"] == whole["content"]
