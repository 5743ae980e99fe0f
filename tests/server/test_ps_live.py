"""`blazr ps` against a real server: the loaded model, the API key, and the errors it names."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from blazr.cli import app
from tests.server.conftest import free_port


def run_ps(*args: str):
    return CliRunner().invoke(app, ["ps", *args])


def test_ps_lists_the_loaded_model(live_server):
    with live_server() as server:
        result = run_ps("--server", server.url)
        as_json = run_ps("--server", server.url, "--json")
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()[:2]
    assert header.split() == ["NAME", "SIZE", "EXPIRES"]
    assert row.split()[0] == "tiny.gguf" and row.split()[-1] == "never"
    assert as_json.exit_code == 0 and [m["name"] for m in json.loads(as_json.output)] == ["tiny.gguf"]


def test_ps_sends_the_api_key(live_server, monkeypatch):
    monkeypatch.delenv("BLAZR_API_KEY", raising=False)
    with live_server(api_keys=["sk-ps"]) as server:
        refused = run_ps("--server", server.url)
        accepted = run_ps("--server", server.url, "--api-key", "sk-ps")
        monkeypatch.setenv("BLAZR_API_KEY", "sk-ps")
        from_env = run_ps("--server", server.url)
    assert refused.exit_code != 0 and "401" in refused.output
    assert accepted.exit_code == 0 and "tiny.gguf" in accepted.output
    assert from_env.exit_code == 0 and "tiny.gguf" in from_env.output


def test_ps_names_an_unreachable_server():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_ps("--server", url)
    assert result.exit_code != 0
    assert f"cannot reach the server at {url}" in result.output
