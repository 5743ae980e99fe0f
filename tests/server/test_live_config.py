"""Live configuration (blazr/server/live_config.py): the config file edited under a running server. Each
version that parses applies whole (generation defaults, API keys, CORS, limits, SLO targets at once; the
listening address and the engine's sizes only after a restart, logged), a broken file keeps the running
configuration, a deleted one means the defaults."""

from __future__ import annotations

import asyncio
import logging

import pytest

from blazr.config import load_settings
from blazr.server.live_config import watch_config

pytestmark = pytest.mark.anyio
POLL = 0.05


async def settle() -> None:
    await asyncio.sleep(POLL * 6)


async def test_edits_apply_live_and_bad_or_deleted_files_are_handled(
    make_app, tiny_model_dir, tmp_path, caplog
):
    path = tmp_path / "config.yaml"
    path.write_text("generation:\n  temperature: 0.3\n")
    app = await make_app(model="tiny", model_dir=tiny_model_dir)
    state = app.extensions["blazr"]
    client = app.test_client()

    def rebuild():
        return load_settings(path, env={})

    def keys(settings):
        return [settings.server.api_key] if settings.server.api_key else []

    watcher = asyncio.ensure_future(watch_config(state, path, rebuild, keys, poll=POLL))
    try:
        caplog.set_level(logging.INFO, logger="blazr.server")
        edit = "generation:\n  max_tokens: 7\n  temperature: 0.2\nserver:\n  api_key: k-new\n"
        path.write_text(edit + "  slo:\n    ttft_p95_ms: 250\n")
        await settle()
        assert state.settings.generation.max_tokens == 7 and state.api_keys == ["k-new"]
        assert state.metrics.slo.targets == {("ttft", "p95"): 0.25}
        assert state.settings.generation.temperature == 0.2
        assert (await client.get("/v1/models")).status_code == 401  # the new key is required at once
        assert (await client.get("/v1/models", headers={"Authorization": "Bearer k-new"})).status_code == 200

        path.write_text("generation: [this is: not a mapping\n")  # does not parse
        await settle()
        assert state.settings.generation.max_tokens == 7 and state.api_keys == ["k-new"]
        assert "keeping the running configuration" in caplog.text

        path.write_text("server:\n  api_key: k-new\n  port: 9999\n  max_concurrent_requests: 2\n")
        await settle()
        assert state.settings.server.port != 9999 and state.settings.server.max_concurrent_requests != 2
        assert "server.port" in caplog.text and "restart" in caplog.text
        defaults = load_settings(tmp_path / "none.yaml", env={})  # the whole file applies: dropped keys reset
        assert state.settings.generation.max_tokens == defaults.generation.max_tokens
        assert state.settings.generation.temperature == defaults.generation.temperature

        path.unlink()  # the defaults (no key any more: the server is open again)
        await settle()
        assert state.api_keys == [] and (await client.get("/v1/models")).status_code == 200
        assert "was deleted" in caplog.text
    finally:
        watcher.cancel()
