"""Server core: error shapes per route family, auth, /health, /v1/models, /metrics, /openapi.json, request
parsing, model lookup (no escaping the model directory, broken files) and the generation helpers."""

from __future__ import annotations

import asyncio
import re
import shutil
import threading

import numpy as np
import pytest
from quart import jsonify

from blazr.engine.request import SamplingParams
from blazr.server import protocol
from blazr.server.app import create_app
from blazr.server.errors import ApiError, error_body, family_for_path
from blazr.server.generation import embed, generate_n, generate_stream, generate_text, open_stream
from blazr.server.state import current_state, load_for_serving
from tests.server.conftest import server_settings, wait_ready

pytestmark = pytest.mark.anyio
OPENAI_KEYS = {"message", "type", "param", "code"}


def add_probe_route(app) -> None:
    """A test-only POST route: parse the body, get the named model, generate a few tokens."""

    async def probe():
        body = await protocol.read_json()
        model = await current_state().models.get(protocol.get_str(body, "model"))
        params = protocol.sampling_params(body, vocab_size=model.vocab_size, default_max_tokens=4)
        prompt = protocol.get_list(body, "prompt_ids", default=[1, 17, 99])
        out = await generate_text(model, prompt, params, "probe")
        return jsonify({"model": model.name, "text": out.text, "completion_tokens": out.completion_tokens})

    app.add_url_rule("/v1/probe", "probe", probe, methods=["POST"])


@pytest.fixture
async def probe_app(tiny_model_dir):
    app = create_app(server_settings(), model="tiny", model_dir=tiny_model_dir)
    add_probe_route(app)
    await app.startup()
    await wait_ready(app)
    yield app
    await app.shutdown()


# ---- error shapes --------------------------------------------------------------------------------------


def test_family_for_path():
    assert family_for_path("/v1/messages") == "anthropic"
    assert family_for_path("/v1/messages/count_tokens") == "anthropic"
    assert family_for_path("/api/tags") == "ollama"
    assert family_for_path("/v1/chat/completions") == "openai"
    assert family_for_path("/v1/messagesx") == "openai"


def test_error_bodies_per_family():
    err = ApiError(429, "queue full", code="queue_full")
    assert error_body(err, "openai") == {
        "error": {"message": "queue full", "type": "rate_limit_error", "param": None, "code": "queue_full"}
    }
    assert error_body(err, "anthropic") == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "queue full"},
    }
    assert error_body(err, "ollama") == {"error": "queue full"}
    for status, kind in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (500, "api_error"),
        (503, "overloaded_error"),
    ]:
        assert error_body(ApiError(status, "x"), "anthropic")["error"]["type"] == kind


async def test_unknown_route_404_in_each_family(tiny_client):
    r = await tiny_client.get("/v1/nothing")
    assert r.status_code == 404 and set((await r.get_json())["error"]) == OPENAI_KEYS
    r = await tiny_client.post("/v1/messages/nothing", json={})
    assert r.status_code == 404
    assert (await r.get_json())["type"] == "error"
    assert (await r.get_json())["error"]["type"] == "not_found_error"
    r = await tiny_client.get("/api/nothing")
    assert r.status_code == 404 and isinstance((await r.get_json())["error"], str)


async def test_wrong_method_405(tiny_client):
    r = await tiny_client.post("/v1/models")
    assert r.status_code == 405
    assert "POST" in (await r.get_json())["error"]["message"]


async def test_malformed_json_and_bad_fields_are_400_naming_the_field(probe_app):
    client = probe_app.test_client()
    r = await client.post("/v1/probe", data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in (await r.get_json())["error"]["message"]
    r = await client.post("/v1/probe", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in (await r.get_json())["error"]["message"]
    for body, field in [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
        ({"model": 7}, "model"),
    ]:
        r = await client.post("/v1/probe", json=body)
        error = (await r.get_json())["error"]
        assert r.status_code == 400, body
        assert error["param"] == field and field in error["message"], (body, error)


async def test_huge_max_tokens_is_clamped_and_long_prompt_names_the_limit(probe_app):
    client = probe_app.test_client()
    r = await client.post("/v1/probe", json={"max_tokens": 10**12, "temperature": 0, "prompt_ids": [1] * 500})
    assert r.status_code == 200
    assert (await r.get_json())["completion_tokens"] == 12  # the tiny model's 512-token context
    r = await client.post("/v1/probe", json={"prompt_ids": [5] * 600})
    error = (await r.get_json())["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "600 tokens" in error["message"] and "512" in error["message"]
    assert (await client.get("/health")).status_code == 200  # and it keeps serving


# ---- auth --------------------------------------------------------------------------------------------


async def test_api_keys(make_app, tiny_model_dir):
    app = await make_app(model="tiny", model_dir=tiny_model_dir, api_keys=["k-one", "k-two"])
    client = app.test_client()
    r = await client.get("/v1/models")
    assert r.status_code == 401 and (await r.get_json())["error"]["code"] == "invalid_api_key"
    r = await client.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and (await r.get_json())["error"]["message"] == "invalid API key"
    assert (await client.get("/v1/models", headers={"Authorization": "Bearer k-two"})).status_code == 200
    assert (await client.get("/v1/models", headers={"x-api-key": "k-one"})).status_code == 200
    assert (await client.get("/v1/models", headers={"authorization": "bearer k-one"})).status_code == 200
    r = await client.post("/v1/messages/x", headers={"x-api-key": "nope"})
    assert r.status_code == 401 and (await r.get_json())["error"]["type"] == "authentication_error"
    assert (await client.get("/health")).status_code == 200  # probes need no key
    assert (await client.get("/metrics")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 401


def test_api_key_compare_is_constant_time():
    import inspect

    from blazr.server import app as app_module

    source = inspect.getsource(app_module.check_api_key)
    assert "hmac.compare_digest" in source and "break" not in source


# ---- service routes ------------------------------------------------------------------------------------


async def test_health_and_models(tiny_client, tiny_model_dir):
    body = await (await tiny_client.get("/health")).get_json()
    assert body["status"] == "ok" and body["loaded_models"] == ["tiny.gguf"]
    (tiny_model_dir / "other").mkdir()
    (tiny_model_dir / "other" / "model.gguf").write_bytes(b"GGUF")
    listed = await (await tiny_client.get("/v1/models")).get_json()
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == ["tiny.gguf", "other"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in listed["data"])
    one = await tiny_client.get("/v1/models/tiny.gguf")
    assert one.status_code == 200 and (await one.get_json())["id"] == "tiny.gguf"
    missing = await tiny_client.get("/v1/models/nope")
    assert missing.status_code == 404 and (await missing.get_json())["error"]["code"] == "model_not_found"


async def test_metrics_after_a_request(probe_app):
    client = probe_app.test_client()
    assert (await client.post("/v1/probe", json={"temperature": 0, "max_tokens": 3})).status_code == 200
    text = (await (await client.get("/metrics")).get_data()).decode()
    assert 'blazr_requests_total{route="/v1/probe",status="200"} 1.0' in text
    assert 'blazr_tokens_prompted_total{model="tiny.gguf"} 3.0' in text
    assert 'blazr_tokens_generated_total{model="tiny.gguf"} 3.0' in text
    assert "blazr_time_to_first_token_seconds_count 1.0" in text
    assert "blazr_inter_token_latency_seconds_count 2.0" in text
    assert "blazr_models_loaded 1.0" in text and "blazr_queue_depth 0.0" in text
    assert "blazr_scheduler_models_available 1.0" in text  # tiny.gguf in the model directory
    # the request finished: its KV blocks are free again (kept only as prefix cache), nothing runs or waits
    assert 'blazr_kv_cache_blocks_used{model="tiny.gguf"} 0.0' in text
    assert 'blazr_kv_cache_utilization_ratio{model="tiny.gguf"} 0.0' in text
    assert 'blazr_num_requests_running{model="tiny.gguf"} 0.0' in text
    assert 'blazr_num_requests_waiting{model="tiny.gguf"} 0.0' in text
    assert re.search(r'blazr_kv_cache_blocks\{model="tiny.gguf"\} [1-9]', text)
    # features.md §1.10's operational series: nothing in flight now but this scrape, the 3 tokens in the rolling
    # rate, the first prompt a prefix-cache miss; no budget set, so no budget ratio
    assert "blazr_requests_active 1.0" in text and "blazr_inflight_tokens 0.0" in text
    assert "blazr_active_decode_slots 0.0" in text
    assert re.search(r"blazr_tokens_per_second 0\.[1-9]", text), text
    assert 'blazr_prefix_cache_misses_total{model="tiny.gguf"} 1.0' in text
    assert "blazr_token_budget_utilization_ratio 0.0" in text  # described, set only with a budget
    body = {"temperature": 0, "max_tokens": 3, "prompt_ids": [7] * 40}
    for _ in range(2):  # the same 40-token prompt twice: the second starts in the prefix cache
        assert (await client.post("/v1/probe", json=body)).status_code == 200
    text = (await (await client.get("/metrics")).get_data()).decode()
    assert 'blazr_prefix_cache_hits_total{model="tiny.gguf"} 1.0' in text


def test_engine_gauges_follow_the_kv_pool_and_the_queues():
    """Metrics.observe_engines mid-generation: a running sequence's blocks count as used, a request beyond
    max_seqs waits, and an unloaded model's series disappear."""
    from blazr.backends import get_backend
    from blazr.engine import Engine, SamplingParams
    from blazr.models.llama import Model, ModelArgs
    from blazr.server.metrics import Metrics
    from tests.test_batching_invariants import IdTokenizer
    from tests.tiny_models import tiny_config, tiny_weights

    model = Model(ModelArgs.from_dict(tiny_config("llama")), get_backend("cpu"), "f32")
    model.load_weights(model.sanitize(tiny_weights("llama")))
    engine = Engine(model, IdTokenizer(), model.be, num_ctx=64, max_seqs=1, block_size=16)
    params = SamplingParams(max_tokens=4, temperature=0.0)
    engine.add_request("a", list(range(1, 21)), params)  # 20 tokens: two blocks of 16
    engine.add_request("b", [1, 2, 3], params)
    engine.step()
    metrics = Metrics()
    metrics.observe_engines({"tiny": engine})
    text = metrics.render().decode()
    total = engine.pool.num_blocks
    assert f'blazr_kv_cache_blocks{{model="tiny"}} {float(total)}' in text
    assert 'blazr_kv_cache_blocks_used{model="tiny"} 2.0' in text
    assert f'blazr_kv_cache_utilization_ratio{{model="tiny"}} {2 / total}' in text
    assert 'blazr_num_requests_running{model="tiny"} 1.0' in text
    assert 'blazr_num_requests_waiting{model="tiny"} 1.0' in text
    metrics.observe_engines({})
    assert 'model="tiny"' not in metrics.render().decode()


async def test_openapi_lists_every_route(probe_app):
    spec = await (await probe_app.test_client().get("/openapi.json")).get_json()
    assert spec["openapi"].startswith("3.")
    for rule in probe_app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)  # <path:model_id> -> {model_id}
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            operation = spec["paths"][path][method.lower()]
            success = [code for code in operation["responses"] if code.startswith("2")]
            assert success and "400" in operation["responses"], (path, method)
    health = spec["paths"]["/health"]["get"]
    assert health["security"] == []
    assert health["responses"]["200"]["content"]["application/json"]["schema"]["required"]
    assert spec["paths"]["/v1/models/{model_id}"]["get"]["parameters"][0]["name"] == "model_id"
    _check_refs(spec, spec)


def _check_refs(node, spec) -> None:
    """Every $ref resolves inside the document."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = spec
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
        for value in node.values():
            _check_refs(value, spec)
    elif isinstance(node, list):
        for value in node:
            _check_refs(value, spec)


# ---- models: lookup, loading, broken files -------------------------------------------------------------


async def test_model_names_never_escape_the_model_directory(probe_app, tiny_model_dir, tmp_path):
    (tmp_path / "outside.gguf").symlink_to((tiny_model_dir / "tiny.gguf").resolve())
    client = probe_app.test_client()
    for name in ["../outside.gguf", "/etc/passwd", str(tmp_path / "outside.gguf"), "a\\b", "~/x"]:
        r = await client.post("/v1/probe", json={"model": name})
        error = (await r.get_json())["error"]
        assert r.status_code == 400 and error["param"] == "model", (name, error)
    r = await client.post("/v1/probe", json={"model": "missing-model"})
    assert r.status_code == 404 and (await r.get_json())["error"]["code"] == "model_not_found"


async def test_broken_model_file_is_an_error_and_the_server_keeps_serving(probe_app, tiny_model_dir):
    (tiny_model_dir / "broken.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    client = probe_app.test_client()
    r = await client.post("/v1/probe", json={"model": "broken"})
    assert r.status_code in (400, 500)
    assert "broken" in (await r.get_json())["error"]["message"]
    r = await client.post("/v1/probe", json={"model": "tiny", "temperature": 0})
    assert r.status_code == 200 and (await r.get_json())["completion_tokens"] == 4


async def test_lazy_load_by_name_and_lru_eviction(make_app, tiny_model_dir, tiny_gguf):
    shutil.copy(tiny_gguf, tiny_model_dir / "second.gguf")  # a copy: links to one file share one load
    app = await make_app(model="tiny", model_dir=tiny_model_dir, max_loaded_models=1)
    manager = app.extensions["blazr"].models
    first = manager.loaded()[0]
    a, b = await asyncio.gather(manager.get("second"), manager.get("second.gguf"))
    assert a is b and a.name == "second.gguf"  # concurrent gets share one load
    assert [m.name for m in manager.loaded()] == ["second.gguf"]  # the LRU model was unloaded
    assert first.engine._stopped
    assert await manager.unload("second.gguf") and manager.loaded() == []
    assert (await manager.get(None)).name == "tiny.gguf"  # the default loads again on demand


async def test_keep_alive_zero_unloads_after_the_request(make_app, tiny_model_dir):
    app = await make_app(model="tiny", model_dir=tiny_model_dir)
    manager = app.extensions["blazr"].models
    model = await manager.get(None, keep_alive=0)
    await generate_text(model, [1, 2, 3], SamplingParams(max_tokens=2), "test")
    assert manager.loaded() == []


async def test_503_while_the_default_model_loads(make_app, tiny_model_dir):
    gate = threading.Event()

    def slow_loader(path, settings):
        gate.wait(30)
        return load_for_serving(path, settings)

    app = await make_app(model="tiny", model_dir=tiny_model_dir, loader=slow_loader, wait=False)
    add_probe_route(app)
    client = app.test_client()
    r = await client.get("/health")
    assert r.status_code == 503 and r.headers["Retry-After"] and (await r.get_json())["status"] == "loading"
    r = await client.post("/v1/probe", json={})
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    assert (await r.get_json())["error"]["code"] == "model_loading"
    gate.set()
    await wait_ready(app)
    assert (await client.get("/health")).status_code == 200
    assert (await client.post("/v1/probe", json={})).status_code == 200


async def test_queue_full_is_429_with_retry_after(make_app, tiny_model_dir):
    app = await make_app(
        model="tiny", model_dir=tiny_model_dir, max_concurrent_requests=1, max_queued_requests=0
    )
    manager = app.extensions["blazr"].models
    model = await manager.get(None)
    stream = await open_stream(model, [1, 2, 3], SamplingParams(max_tokens=50), "test")
    with pytest.raises(ApiError) as caught:
        await open_stream(model, [1, 2, 3], SamplingParams(max_tokens=5), "test")
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "1"
    await stream.aclose()
    assert manager.admission.in_flight == 0
    assert (await generate_text(model, [1, 2], SamplingParams(max_tokens=2), "test")).completion_tokens == 2


# ---- generation helpers --------------------------------------------------------------------------------


def engine_blocks_free(model) -> bool:
    engine = model.llm.engine
    pool = getattr(engine, "pool", None) or engine.scheduler.pool
    return pool.num_free == pool.num_blocks and not engine.has_unfinished()


async def test_closing_a_stream_aborts_and_frees_its_blocks(tiny_app):
    model = await tiny_app.extensions["blazr"].models.get(None)
    stream = generate_stream(model, [1, 17, 99], SamplingParams(max_tokens=400), "test")
    first = await anext(stream)
    assert first.token_ids and not first.finished
    await stream.aclose()
    for _ in range(100):
        if engine_blocks_free(model):
            break
        await asyncio.sleep(0.01)
    assert engine_blocks_free(model) and model.active == 0


async def test_generate_n_seeds_each_choice(tiny_app):
    model = await tiny_app.extensions["blazr"].models.get(None)
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    first = await generate_n(model, [1, 2], params, 3, "t")
    assert len(first) == 3 and all(c.completion_tokens == 6 for c in first)
    again = await generate_text(model, [1, 2], SamplingParams(max_tokens=6, temperature=1.0, seed=8), "t")
    assert again.token_ids == first[1].token_ids


async def test_embed_is_normalised_and_deterministic(tiny_app):
    model = await tiny_app.extensions["blazr"].models.get(None)
    vectors = await embed(model, [[1, 17, 99], [1, 17, 99], [5, 6]])
    assert vectors.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors[0], vectors[1], rtol=1e-6)
    assert not np.allclose(vectors[0], vectors[2])
    with pytest.raises(ApiError) as caught:
        await embed(model, [[]])
    assert caught.value.param == "input"


async def test_stop_string_is_reported(tiny_app):
    model = await tiny_app.extensions["blazr"].models.get(None)
    free = await generate_text(model, [1, 17, 99], SamplingParams(max_tokens=8, temperature=0), "t")
    stop = free.text[1:3] or free.text[:1]
    out = await generate_text(
        model, [1, 17, 99], SamplingParams(max_tokens=8, temperature=0, stop=[stop]), "t"
    )
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == free.text[: free.text.index(stop)]


# ---- SLO ----------------------------------------------------------------------------------------------------


def test_slo_checker_counts_windows_over_target_once_it_has_enough_samples():
    from blazr.server.metrics import Metrics
    from blazr.server.slo import MIN_SAMPLES, SloChecker

    metrics = Metrics()
    slo = SloChecker({("ttft", "p95"): 0.1, ("itl", "p50"): 0.05}, metrics.slo_violations)
    for _ in range(MIN_SAMPLES - 1):
        slo.record("ttft", 0.2)  # over target, but too few samples for a verdict
    assert 'blazr_slo_violations_total{metric="ttft",percentile="p95"}' not in metrics.render().decode()
    slo.record("ttft", 0.2)
    for _ in range(MIN_SAMPLES):
        slo.record("itl", 0.01)  # within target
    text = metrics.render().decode()
    assert 'blazr_slo_violations_total{metric="ttft",percentile="p95"} 1.0' in text
    assert 'metric="itl"' not in text
    assert slo.check("ttft") == [("p95", pytest.approx(0.2), 0.1)]


def test_slo_targets_from_the_config_file(tmp_path):
    """server: {slo: {ttft_p95_ms: ...}} in YAML (as features.md's LatencySlo) or the flat server.slo_* keys."""
    from blazr.config import load_settings
    from blazr.server.slo import SloChecker

    path = tmp_path / "config.yaml"
    path.write_text("server:\n  slo:\n    ttft_p95_ms: 250\n    e2e_p99_ms: 3000\n  slo_itl_p50_ms: 40\n")
    settings = load_settings(path, env={})
    assert settings.server.slo_ttft_p95_ms == 250.0 and settings.server.slo_itl_p50_ms == 40.0
    targets = SloChecker.from_settings(settings.server).targets
    assert targets == {("ttft", "p95"): 0.25, ("itl", "p50"): 0.04, ("e2e", "p99"): 3.0}


async def test_the_server_feeds_its_latencies_to_the_slo_checker(make_app, tiny_model_dir):
    """An inter-token target no CPU meets (1 microsecond): one request of 120 tokens gives 119 ITL samples, and
    the check at the 100th counts a violation; the token budget gauge shows the budget in use."""
    add = {"slo_itl_p50_ms": 0.001, "max_inflight_tokens": 4096}
    app = await make_app(model="tiny", model_dir=tiny_model_dir, **add)
    add_probe_route(app)
    client = app.test_client()
    body = {"temperature": 0, "max_tokens": 120, "logit_bias": {"2": -100}}
    assert (await client.post("/v1/probe", json=body)).status_code == 200
    text = (await (await client.get("/metrics")).get_data()).decode()
    assert 'blazr_slo_violations_total{metric="itl",percentile="p50"} 1.0' in text
    assert "blazr_token_budget_utilization_ratio 0.0" in text
