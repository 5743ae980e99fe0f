"""Live configuration for `blazr serve`: the config file (BLAZR_CONFIG, else ~/.blazr/config.yaml) is watched,
and each version of it that parses is applied whole, with the environment and the command's flags still on
top, as at startup.

What applies at once (live_keys): the generation defaults, request limits and timeouts, API keys, CORS,
request logging, the reasoning field and SLO targets; settings read for each request pick the new values up.
Everything else (where the server listens, TLS, the device, how models load, the engine's batch and queue
sizes) shapes objects built at startup: a change there is logged as needing a restart and not applied. A
file that does not parse keeps the running configuration and logs why; a deleted file means the defaults
(again under the environment and the flags).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from blazr.config import Settings
from blazr.errors import BlazrError

log = logging.getLogger("blazr.server")
POLL_SECS = 1.0

LIVE_SERVER_KEYS = (
    "api_key",
    "api_key_file",
    "request_timeout_secs",
    "cors_enabled",
    "cors_origins",
    "request_logging",
    "max_body_size",
    "max_audio_body_size",
    "max_speech_input_chars",
    "max_inflight_tokens",
    "max_embedding_inputs",
    "reasoning_field",
)


def live_keys(settings: Settings) -> list[str]:
    """Dotted keys applied without a restart: every generation default, the LIVE_SERVER_KEYS, the SLO targets."""
    server = [f.name for f in dataclasses.fields(settings.server)]
    slo = [f"server.{n}" for n in server if n.startswith("slo_")]
    generation = [f"generation.{f.name}" for f in dataclasses.fields(settings.generation)]
    return generation + [f"server.{n}" for n in LIVE_SERVER_KEYS] + slo


def all_keys(settings: Settings) -> list[str]:
    out = [
        f.name
        for f in dataclasses.fields(settings)
        if f.name not in ("sources", "inference", "generation", "server")
    ]
    for section in ("inference", "generation", "server"):
        out += [f"{section}.{f.name}" for f in dataclasses.fields(getattr(settings, section))]
    return out


def _get(settings: Settings, key: str) -> Any:
    section, _, name = key.rpartition(".")
    return getattr(getattr(settings, section) if section else settings, name)


def apply_live(state: Any, fresh: Settings, api_keys: Callable[[Settings], list[str]]) -> list[str]:
    """Copy the live keys of `fresh` into the running settings (in place: hooks hold the section objects) and
    refresh what is derived from them; log the other keys that changed. Returns the live keys applied."""
    running: Settings = state.settings
    keys = api_keys(fresh)  # an unreadable key file fails here, before anything changes
    applied = []
    for key in live_keys(running):
        if _get(running, key) != _get(fresh, key):
            section, _, name = key.rpartition(".")
            setattr(getattr(running, section), name, _get(fresh, key))
            running.sources[key] = fresh.source_of(key)
            applied.append(key)
    live = set(live_keys(running))
    restart = [k for k in all_keys(running) if k not in live and _get(running, k) != _get(fresh, k)]
    if restart:
        log.warning("config: %s changed; restart blazr serve to apply it", ", ".join(restart))
    if applied:
        _refresh_derived(state, running, keys)
        log.info("config: applied %s", ", ".join(applied))
    return applied


def _refresh_derived(state: Any, settings: Settings, api_keys: list[str]) -> None:
    from blazr.server.slo import SloChecker

    state.api_keys = api_keys
    state.models.admission.max_tokens = settings.server.max_inflight_tokens
    if state.app is not None:
        state.app.config["MAX_CONTENT_LENGTH"] = settings.server.max_body_size
        state.app.config["RESPONSE_TIMEOUT"] = settings.server.request_timeout_secs
    targets = SloChecker.from_settings(settings.server).targets
    if targets != state.metrics.slo.targets:
        state.metrics.slo = SloChecker(targets, state.metrics.slo_violations)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def watch_config(
    state: Any,
    path: Path,
    rebuild: Callable[[], Settings],
    api_keys: Callable[[Settings], list[str]],
    poll: float = POLL_SECS,
) -> Coroutine[Any, Any, None]:
    """A coroutine that polls `path` and applies each new version (see the module docstring) until cancelled.
    `rebuild` makes the settings as startup did (file, environment, flags); `api_keys` derives the accepted
    keys. The file as it is when this is called is the baseline (the settings were built from it)."""
    return _watch(state, path, rebuild, api_keys, poll, _stamp(path))


async def _watch(state, path, rebuild, api_keys, poll: float, last: tuple[int, int] | None) -> None:
    while True:
        await asyncio.sleep(poll)
        now = _stamp(path)
        if now == last:
            continue
        last = now
        try:
            fresh = await asyncio.to_thread(rebuild)
            applied = apply_live(state, fresh, api_keys)
        except BlazrError as error:
            log.error("config %s: %s; keeping the running configuration", path, error)
            continue
        if now is None:
            log.info("config %s was deleted: defaults apply%s", path, "" if applied else " (nothing changed)")
