"""Fuzz every route in /openapi.json with schemathesis against a real server on a tiny random model.

Each operation gets schema-valid and schema-invalid requests (bounded, derandomized, so a CI run repeats);
no answer may be a 5xx, every error must have its route family's body shape, and every 200 JSON body must
match the documented response schema."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from blazr.server.app import create_app
from blazr.server.errors import family_for_path
from tests.server.conftest import run_live_server, server_settings

EXAMPLES_PER_OPERATION = 12
FUZZ_NUM_CTX = 64  # bounds how long a fuzzed max_tokens can keep the tiny model generating
API_KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, tiny_gguf):
    directory = tmp_path_factory.mktemp("fuzz-models")
    (directory / "tiny.gguf").symlink_to(tiny_gguf)
    config = server_settings(request_logging=False, max_queued_requests=4)
    config.set("num_ctx", FUZZ_NUM_CTX, "test")
    app = create_app(config, model="tiny", model_dir=directory, api_keys=[API_KEY])
    with run_live_server(app) as server:
        yield server


def documented_spec() -> dict:
    """/openapi.json as the app builds it (building needs no loaded model), read at collection time so
    each operation becomes its own test item."""
    from blazr.server.openapi import build_spec

    return build_spec(create_app(server_settings(), model="tiny"))


api = schemathesis.openapi.from_dict(documented_spec())


def assert_error_shape(path: str, status: int, body: object) -> None:
    """The family's error body: OpenAI {"error": {message, type, param, code}}, Anthropic
    {"type": "error", "error": {type, message}}, Ollama {"error": str}."""
    family = family_for_path(path)
    assert isinstance(body, dict), f"{status} body is not an object: {body!r}"
    if family == "ollama":
        assert set(body) == {"error"} and isinstance(body["error"], str), body
    elif family == "anthropic":
        assert body.get("type") == "error", body
        assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str), body
    else:
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, body
        assert isinstance(error["message"], str) and isinstance(error["type"], str), body
        assert error["param"] is None or isinstance(error["param"], str), body
        assert error["code"] is None or isinstance(error["code"], str), body


@api.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_route_never_answers_5xx_and_errors_have_family_shape(case, fuzz_server):
    response = case.call(base_url=fuzz_server.url, headers=AUTH, timeout=30)
    case.validate_response(
        response, checks=[not_a_server_error, content_type_conformance, response_schema_conformance]
    )
    if response.status_code >= 400:
        content_type = response.headers.get("content-type", [""])[0]
        assert content_type.startswith("application/json"), (response.status_code, content_type)
        assert_error_shape(case.path, response.status_code, json.loads(response.content))
