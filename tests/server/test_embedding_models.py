"""Embedding models and rerankers behind the server: /v1/embeddings, /v1/rerank and /rerank, Ollama's /api/embed
and /api/embeddings, against sentence-transformers' outputs for the tiny encoders (tests/golden/encoders/), their
request batching, and the 400s for a model asked for what it does not do."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from tests.server.conftest import run_live_server, server_settings
from tests.test_embed import golden
from tests.tiny_encoders import QUERY, SENTENCES, write_case

pytestmark = pytest.mark.anyio

EMBEDDER, RERANKER = "bert_mean_normalize", "bert_reranker"


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("encoder-models")
    for case in (EMBEDDER, RERANKER):
        write_case(case, directory)
    return directory


@pytest.fixture
async def client(make_app, encoder_dir):
    app = await make_app(model=EMBEDDER, model_dir=encoder_dir)
    return app.test_client()


def close(got, want, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, rtol=1e-4, atol=atol)


async def test_openai_embeddings_equal_sentence_transformers(client):
    want = golden(EMBEDDER)
    body = await (await client.post("/v1/embeddings", json={"input": list(SENTENCES)})).get_json()
    assert body["object"] == "list" and body["model"] == EMBEDDER
    close([item["embedding"] for item in body["data"]], want["vectors"])
    assert body["usage"]["prompt_tokens"] == sum(len(ids) for ids in want["ids"])
    encoded = {"input": list(SENTENCES[:2]), "encoding_format": "base64", "dimensions": 16}
    body = await (await client.post("/v1/embeddings", json=encoded)).get_json()
    rows = [np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4") for item in body["data"]]
    close(rows, want["vectors_16"][:2])
    prompted = await client.post("/v1/embeddings", json={"input": list(SENTENCES), "prompt_name": "query"})
    close([item["embedding"] for item in (await prompted.get_json())["data"]], want["query_vectors"])


async def test_concurrent_requests_share_forward_passes(make_app, encoder_dir):
    app = await make_app(model=EMBEDDER, model_dir=encoder_dir)
    client = app.test_client()
    model = app.extensions["blazr"].models.loaded()[0]
    calls = []
    original = model.llm.embed_ids
    model.llm.embed_ids = lambda ids, *a, **k: calls.append(len(ids)) or original(ids, *a, **k)
    replies = await asyncio.gather(*(client.post("/v1/embeddings", json={"input": s}) for s in SENTENCES * 2))
    want = golden(EMBEDDER)["vectors"]
    for i, reply in enumerate(replies):
        close((await reply.get_json())["data"][0]["embedding"], want[i % len(SENTENCES)])
    assert sum(calls) == 2 * len(SENTENCES) and len(calls) < 2 * len(SENTENCES), calls  # merged batches


async def test_reranker_scores_in_both_rerank_shapes(make_app, encoder_dir):
    want = golden(RERANKER)
    client = (await make_app(model=RERANKER, model_dir=encoder_dir)).test_client()
    body = await (
        await client.post("/v1/rerank", json={"query": QUERY, "documents": list(SENTENCES), "truncate": True})
    ).get_json()
    order = np.argsort(-want["scores"], kind="stable")
    assert [r["index"] for r in body["results"]] == order.tolist()
    close([r["relevance_score"] for r in body["results"]], want["scores"][order], atol=1e-4)
    tei = await client.post(
        "/rerank", json={"query": QUERY, "texts": list(SENTENCES), "raw_scores": True, "truncate": True}
    )
    items = sorted(await tei.get_json(), key=lambda item: item["index"])
    close([item["score"] for item in items], want["logits"], atol=1e-4)


async def test_an_embedding_model_reranks_by_cosine(client):
    vectors = golden(EMBEDDER)["vectors"]
    query = await (await client.post("/v1/embeddings", json={"input": QUERY})).get_json()
    q = np.asarray(query["data"][0]["embedding"])
    body = await (
        await client.post("/v1/rerank", json={"query": QUERY, "documents": list(SENTENCES[:3])})
    ).get_json()
    scores = {r["index"]: r["relevance_score"] for r in body["results"]}
    close([scores[i] for i in range(3)], vectors[:3] @ q, atol=1e-4)


async def test_ollama_embed_routes(client):
    want = golden(EMBEDDER)["vectors"]
    body = await (
        await client.post("/api/embed", json={"model": EMBEDDER, "input": list(SENTENCES[:3])})
    ).get_json()
    assert body["model"] == EMBEDDER and body["prompt_eval_count"] > 0 and body["total_duration"] > 0
    close(body["embeddings"], want[:3])
    legacy = await (
        await client.post("/api/embeddings", json={"model": EMBEDDER, "prompt": SENTENCES[0]})
    ).get_json()
    close(legacy["embedding"], want[0])


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/embeddings", {"input": ["fine", ""]}, "input"),
        ("/v1/embeddings", {"input": "x", "dimensions": 65}, "dimensions"),
        ("/v1/embeddings", {"input": SENTENCES[-1], "truncate": False}, "input"),
        ("/v1/embeddings", {"input": [[1, 2, 99999]]}, "input"),
        ("/v1/embeddings", {"input": "x", "prompt_name": "nope"}, "prompt_name"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ("/v1/completions", {"prompt": "hi"}, "model"),
    ],
)
async def test_openai_errors_name_the_field(client, path, body, param):
    response = await client.post(path, json=body)
    error = (await response.get_json())["error"]
    assert response.status_code == 400 and error["param"] == param, error


async def test_wrong_task_errors_in_each_route_family(make_app, encoder_dir):
    client = (await make_app(model=RERANKER, model_dir=encoder_dir)).test_client()
    response = await client.post("/v1/embeddings", json={"input": "x"})
    assert response.status_code == 400 and "reranker" in (await response.get_json())["error"]["message"]
    response = await client.post(
        "/api/chat", json={"model": RERANKER, "messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status_code == 400 and "reranker" in (await response.get_json())["error"]
    response = await client.post(
        "/v1/messages",
        json={"model": RERANKER, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]},
    )
    body = await response.get_json()
    assert response.status_code == 400 and body["type"] == "error" and "reranker" in body["error"]["message"]


def test_openai_sdk_embeddings_base64(encoder_dir):
    openai = pytest.importorskip("openai")
    from blazr.server.app import create_app

    app = create_app(server_settings(), model=EMBEDDER, model_dir=encoder_dir)
    with run_live_server(app) as server:
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        result = sdk.embeddings.create(model=EMBEDDER, input=list(SENTENCES[:4]))  # the SDK asks for base64
    close([item.embedding for item in result.data], golden(EMBEDDER)["vectors"][:4])


async def test_tei_embed_route(client):
    want = golden(EMBEDDER)["vectors"]
    body = await (
        await client.post("/embed", json={"inputs": list(SENTENCES[:3]), "truncate": True})
    ).get_json()
    close(body, want[:3])
    raw = await client.post("/embed", json={"inputs": SENTENCES[0], "normalize": False})
    vector = np.asarray((await raw.get_json())[0])
    assert abs(np.linalg.norm(vector) - 1.0) > 1e-3  # the mean-pooled vector before Normalize
    close(vector / np.linalg.norm(vector), want[0])
    too_long = await client.post("/embed", json={"inputs": SENTENCES[-1]})  # TEI: truncate is off by default
    assert too_long.status_code == 400 and (await too_long.get_json())["error"]["param"] == "inputs"


async def test_the_input_limit_is_a_setting(make_app, encoder_dir):
    client = (await make_app(model=EMBEDDER, model_dir=encoder_dir, max_embedding_inputs=3)).test_client()
    assert (await client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})).status_code == 200
    for path, body, field in (
        ("/v1/embeddings", {"input": ["a"] * 4}, "input"),
        ("/embed", {"inputs": ["a"] * 4}, "inputs"),
    ):
        response = await client.post(path, json=body)
        error = (await response.get_json())["error"]
        assert response.status_code == 400 and error["param"] == field and "limit is 3" in error["message"]
    response = await client.post("/api/embed", json={"model": EMBEDDER, "input": ["a"] * 4})
    assert response.status_code == 400 and "limit is 3" in (await response.get_json())["error"]


async def test_a_bi_encoder_reranks_in_both_shapes(client):
    documents = list(SENTENCES[:4])
    body = {"query": QUERY, "documents": [documents[0], {"text": documents[1]}, *documents[2:]]}
    jina = await (await client.post("/v1/rerank", json=body)).get_json()
    assert jina["object"] == "list" and jina["model"] == EMBEDDER
    results = jina["results"]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in results) == [0, 1, 2, 3]
    assert all(r["document"]["text"] == documents[r["index"]] for r in results)
    vectors = await (await client.post("/v1/embeddings", json={"input": [QUERY, *documents]})).get_json()
    emb = np.array([d["embedding"] for d in vectors["data"]], dtype=np.float64)
    for r in results:
        assert r["relevance_score"] == pytest.approx(float(emb[r["index"] + 1] @ emb[0]), abs=1e-5)
    assert jina["usage"]["total_tokens"] == vectors["usage"]["total_tokens"]
    top = await (
        await client.post("/rerank", json={**body, "top_n": 1, "return_documents": False})
    ).get_json()
    assert top["results"] == [{"index": results[0]["index"], "relevance_score": scores[0]}]
    tei = await (
        await client.post("/rerank", json={"query": QUERY, "texts": documents, "return_text": True})
    ).get_json()
    assert [t["index"] for t in tei] == [r["index"] for r in results]
    assert tei[0] == {
        "index": results[0]["index"],
        "score": scores[0],
        "text": documents[results[0]["index"]],
    }


@pytest.mark.parametrize("model", [EMBEDDER, RERANKER])
@pytest.mark.parametrize(
    "body, param",
    [
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "", "documents": ["a"]}, "query"),
        ({"documents": ["a"]}, "query"),
        ({"query": "q", "documents": [3]}, "documents"),
        ({"query": "q", "documents": ["a", ""]}, "documents"),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
        ({"query": "q", "documents": [SENTENCES[-1]]}, "documents"),  # over the 32-token limit, no truncate
        ({"query": "q", "texts": [SENTENCES[-1]]}, "texts"),
    ],
)
async def test_rerank_errors_name_the_field(make_app, encoder_dir, model, body, param):
    client = (await make_app(model=model, model_dir=encoder_dir)).test_client()
    response = await client.post("/v1/rerank", json=body)
    error = (await response.get_json())["error"]
    assert response.status_code == 400 and error["param"] == param, error


async def test_rerank_truncates_when_asked_and_openapi_says_how_it_scores(client):
    body = {"query": QUERY, "texts": [SENTENCES[-1], "b"], "truncate": True}
    response = await client.post("/rerank", json=body)
    assert response.status_code == 200 and len(await response.get_json()) == 2
    spec = await (await client.get("/openapi.json")).get_json()
    operation = spec["paths"]["/v1/rerank"]["post"]
    assert "reranker" in operation["summary"] and "cosine similarity" in operation["summary"]
    jina = operation["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"][0]
    score = jina["properties"]["results"]["items"]["properties"]["relevance_score"]
    assert "sigmoid" in score["description"] and "cosine similarity" in score["description"]


async def test_a_decoder_reranker_takes_an_instruction_and_other_models_refuse_it(make_app, client, tmp_path):
    """`instruction` is Qwen3-Reranker's task text (its <Instruct>): the scores transformers gives with it; a
    bi-encoder (or a cross-encoder) asked with one is a 400 naming the field."""
    from tests.test_embed_decoder import INSTRUCTION
    from tests.test_embed_decoder import golden as decoder_golden
    from tests.tiny_decoder_embedders import write_case as write_decoder_case

    write_decoder_case("qwen3_reranker", tmp_path)
    settings = server_settings()
    settings.set("inference.task", "rerank", "test")
    app = await make_app(model="qwen3_reranker", model_dir=tmp_path, settings=settings)
    body = {"query": QUERY, "documents": list(SENTENCES), "instruction": INSTRUCTION}
    got = await (await app.test_client().post("/v1/rerank", json=body)).get_json()
    scores = [r["relevance_score"] for r in sorted(got["results"], key=lambda r: r["index"])]
    close(scores, decoder_golden("qwen3_reranker")["instruction_scores"], atol=1e-4)
    response = await client.post("/v1/rerank", json=body)  # the bi-encoder
    assert response.status_code == 400 and (await response.get_json())["error"]["param"] == "instruction"


async def test_inference_task_names_the_default_model_only(make_app, tmp_path):
    """serve --task rerank --model qwen3-reranker: the default loads as a yes/no reranker, while another model a
    request names (a chat model here) loads as its own checkpoint says."""
    from tests.server.conftest import write_tiny_gguf
    from tests.tiny_decoder_embedders import write_case as write_decoder_case

    write_decoder_case("qwen3_reranker", tmp_path)
    write_tiny_gguf(tmp_path / "tiny.gguf")
    settings = server_settings()
    settings.set("inference.task", "rerank", "test")
    app = await make_app(model="qwen3_reranker", model_dir=tmp_path, settings=settings)
    client = app.test_client()
    rerank = await client.post("/v1/rerank", json={"query": QUERY, "documents": list(SENTENCES[:2])})
    assert rerank.status_code == 200
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    chat = await client.post("/v1/chat/completions", json=body)
    assert chat.status_code == 200, await chat.get_data()
