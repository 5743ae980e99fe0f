"""`blazr serve` (the HTTP server on Hypercorn) and `blazr ps` (a running server's loaded models)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr import __version__
from blazr.commands import options as o
from blazr.config import Settings, apply_flags, config_path
from blazr.errors import BlazrError, ConfigError

SERVER = "Server"

# flag parameter name -> (settings key, flag as typed)
SERVER_FLAGS = {
    "host": ("server.host", "--host"),
    "port": ("server.port", "--port"),
    "api_key_file": ("server.api_key_file", "--api-key-file"),
    "tls_cert": ("server.tls_cert", "--tls-cert"),
    "tls_key": ("server.tls_key", "--tls-key"),
    "request_timeout": ("server.request_timeout_secs", "--request-timeout"),
    "max_body_size": ("server.max_body_size", "--max-body-size"),
    "max_concurrent": ("server.max_concurrent_requests", "--max-concurrent-requests"),
    "max_queued": ("server.max_queued_requests", "--max-queued-requests"),
    "max_loaded": ("server.max_loaded_models", "--max-loaded-models"),
    "shutdown_grace": ("server.shutdown_grace_secs", "--shutdown-grace"),
    "cors_origin": ("server.cors_origins", "--cors-origin"),
    "slot_save_path": ("server.slot_save_path", "--slot-save-path"),
    "speculative": ("inference.speculative_method", "--speculative"),
    "draft_model": ("inference.speculative_draft_model", "--draft-model"),
    "num_speculative_tokens": ("inference.speculative_num_speculative_tokens", "--num-speculative-tokens"),
}


def _opt(flag: str, help: str, kind: Any = str | None, *names: str):
    return Annotated[kind, typer.Option(flag, *names, help=help, rich_help_panel=SERVER)]


def serve(
    model: _opt(
        "--model", "Model served when a request names none (default: config default_model)", str | None, "-m"
    ) = None,
    host: _opt("--host", "Address to listen on (default: 127.0.0.1)") = None,
    port: _opt("--port", "Port (default: 8080)", int | None) = None,
    api_key: _opt("--api-key", "Required API key (repeatable; also BLAZR_API_KEY)", list[str] | None) = None,
    api_key_file: _opt("--api-key-file", "File of API keys, one per line (# comments)") = None,
    tls_cert: _opt("--tls-cert", "PEM certificate chain (HTTPS with --tls-key)") = None,
    tls_key: _opt("--tls-key", "PEM private key") = None,
    request_timeout: _opt("--request-timeout", "Seconds a request may run (default: 300)", int | None) = None,
    max_body_size: _opt(
        "--max-body-size", "Largest request body in bytes (default: 10 MiB)", int | None
    ) = None,
    max_concurrent: _opt(
        "--max-concurrent-requests", "Sequences decoded together per model (16)", int | None
    ) = None,
    max_queued: _opt(
        "--max-queued-requests", "Requests waiting beyond those; more get 429 (64)", int | None
    ) = None,
    max_loaded: _opt("--max-loaded-models", "Models kept in memory (default: 1)", int | None) = None,
    shutdown_grace: _opt(
        "--shutdown-grace", "Seconds in-flight requests get on SIGTERM (30)", float | None
    ) = None,
    cors_origin: _opt(
        "--cors-origin", "Allowed CORS origin (repeatable; default: any)", list[str] | None
    ) = None,
    slot_save_path: _opt(
        "--slot-save-path", "Folder where POST /slots/ID?action=save|restore writes and reads KV files"
    ) = None,
    asr_model: _opt(
        "--asr-model",
        "NAME=PATH: a Whisper model (HF, CTranslate2 or ggml) for /v1/audio/transcriptions (repeatable)",
        list[str] | None,
    ) = None,
    tts_model: _opt(
        "--tts-model",
        "NAME=PATH: a voice (Piper, VITS or Kokoro: its directory, .onnx or catalog name) for /v1/audio/speech "
        "(repeatable)",
        list[str] | None,
    ) = None,
    lora: _opt(
        "--lora",
        "NAME=PATH: a LoRA adapter of the default model (PEFT directory or GGUF); requests pick it with "
        "lora_adapter or model BASE:NAME (repeatable)",
        list[str] | None,
    ) = None,
    device: o.Device = None,
    dtype: o.DType = None,
    num_ctx: o.NumCtx = None,
    kv_cache_type: o.KvCacheType = None,
    chat_template: o.ChatTemplate = None,
    task: o.Task = None,
    speculative: o.Speculative = None,
    draft_model: o.DraftModel = None,
    num_speculative_tokens: o.NumSpeculativeTokens = None,
    model_dir: o.ModelDir = None,
    voice_dir: o.VoiceDir = None,
) -> None:
    """Serve OpenAI, Anthropic and Ollama compatible HTTP APIs (see docs/server.md)."""
    params = locals()
    asr_models = parse_asr_models(asr_model or [])
    tts_models = parse_tts_models(tts_model or [])
    loras = parse_loras(lora or [])
    flags = {
        key: (params[name] if params[name] != [] else None, flag)
        for name, (key, flag) in SERVER_FLAGS.items()
    }

    def build() -> Settings:  # the config file, the environment, then the flags: at startup and on each edit
        return apply_flags(o.settings_from_params(params), flags)

    settings = build()
    keys = collect_api_keys(api_key or [], settings)
    check_tls(settings)
    path = o.model_path(model, settings, model_dir)
    model_dir_path = o.resolve_model_dir(settings, model_dir)
    _resolve_draft_model(settings, model_dir_path)
    tts_models = {name: _catalog_voice(p, model_dir_path) for name, p in tts_models.items()}
    watch = (config_path(), build, lambda fresh: collect_api_keys(api_key or [], fresh))
    run_server(settings, str(path), model_dir_path, keys, asr_models, tts_models, watch, loras)


def _resolve_draft_model(settings: Settings, model_dir: Path) -> None:
    """The draft model (--draft-model or inference.speculative_draft_model) as a path, pulled from the catalog
    before serving starts; --speculative draft without one is a flag error."""
    from blazr.model_dir import resolve_model

    inference = settings.inference
    if inference.speculative_method == "draft" and inference.speculative_draft_model is None:
        raise ConfigError("--speculative draft needs --draft-model PATH (a smaller model, same vocabulary)")
    if inference.speculative_method == "ngram" and inference.speculative_draft_model is not None:
        raise ConfigError("--draft-model goes with --speculative draft, not ngram")
    if inference.speculative_draft_model is not None:
        path = resolve_model(inference.speculative_draft_model, pull=True, directory=model_dir)
        source = settings.source_of("inference.speculative_draft_model")
        settings.set("inference.speculative_draft_model", str(path), source)


def parse_asr_models(
    values: list[str], flag: str = "--asr-model", example: str = "whisper-1=~/models/whisper-tiny.en"
) -> dict[str, Path]:
    """--asr-model NAME=PATH values -> {NAME: PATH}; a malformed value, a repeated NAME or a missing PATH is
    a flag error before anything loads (the model itself loads on its first request)."""
    models: dict[str, Path] = {}
    for value in values:
        name, sep, raw = value.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise ConfigError(f"{flag} {value!r}: use NAME=PATH, e.g. {example}")
        if name in models:
            raise ConfigError(f"{flag}: the name {name!r} is given twice")
        path = Path(raw).expanduser()
        if not path.exists():
            if flag == "--tts-model" and _is_catalog_name(raw):
                models[name] = Path(raw)  # fetched by _catalog_voice once the model directory is known
                continue
            raise ConfigError(f"{flag} {name}={raw}: no such file or directory")
        models[name] = path.resolve()
    return models


def parse_loras(values: list[str]) -> dict[str, Path]:
    """--lora NAME=PATH values -> {NAME: PATH}: a PEFT adapter directory or a llama.cpp GGUF adapter."""
    from blazr.engine.lora_registry import check_adapter_name

    loras = parse_asr_models(values, "--lora", "sql=~/adapters/sql-lora")
    for name in loras:
        try:
            check_adapter_name(name)
        except ConfigError as error:
            raise ConfigError(f"--lora: {error}") from None
    return loras


def parse_tts_models(values: list[str]) -> dict[str, Path]:
    """--tts-model NAME=PATH values -> {NAME: PATH}: PATH a voice's directory or .onnx (Piper, VITS or Kokoro),
    or a catalog voice's name (e.g. piper-joe, kokoro-ja)."""
    return parse_asr_models(values, "--tts-model", "tts-1=~/models/piper-joe")


def _is_catalog_name(raw: str) -> bool:
    from blazr.loaders import registry

    return registry.lookup(raw) is not None


def _catalog_voice(path: Path, model_dir: Path) -> Path:
    """A --tts-model catalog name -> its directory in the model directory, fetched now (as `blazr pull`
    would), so no request waits on a download; a path is left as given."""
    if path.is_absolute():
        return path
    from blazr.model_dir import resolve_model

    return resolve_model(str(path), pull=True, directory=model_dir).resolve()


def collect_api_keys(flag_keys: list[str], settings: Settings) -> list[str]:
    """--api-key values, BLAZR_API_KEY / config api_key, and the lines of --api-key-file."""
    keys = [k.strip() for k in flag_keys if k.strip()]
    if settings.server.api_key:
        keys.append(settings.server.api_key.strip())
    file = settings.server.api_key_file
    if file:
        try:
            lines = Path(file).expanduser().read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ConfigError(f"--api-key-file {file}: cannot read it ({e.strerror})") from None
        file_keys = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
        if not file_keys:
            raise ConfigError(f"--api-key-file {file} holds no keys (one per line; # starts a comment)")
        keys += file_keys
    return list(dict.fromkeys(keys))


def check_tls(settings: Settings) -> None:
    """Both or neither of --tls-cert/--tls-key, and a pair that loads, so a bad file fails before listening."""
    cert, key = settings.server.tls_cert, settings.server.tls_key
    if not cert and not key:
        return
    if not cert or not key:
        raise ConfigError("--tls-cert and --tls-key go together: give both PEM files, or neither for HTTP")
    for flag, file in (("--tls-cert", cert), ("--tls-key", key)):
        if not Path(file).expanduser().is_file():
            raise ConfigError(f"{flag} {file}: no such file")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise ConfigError(
            f"--tls-cert {cert} / --tls-key {key}: not a matching PEM pair ({e.reason})"
        ) from None


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def run_server(
    settings: Settings,
    model: str,
    model_dir: Path,
    api_keys: list[str],
    asr_models: dict[str, Path] | None = None,
    tts_models: dict[str, Path] | None = None,
    watch: tuple | None = None,
    loras: dict[str, Path] | None = None,
) -> None:
    """Build the app and serve it until SIGTERM/SIGINT (see serve_app); `watch` is live_config's (config
    file, rebuild, api keys)."""
    from blazr.server.app import create_app

    _configure_logging()
    app = create_app(
        settings,
        model=model,
        model_dir=model_dir,
        api_keys=api_keys,
        asr_models=asr_models,
        tts_models=tts_models,
        loras=loras,
    )
    server = settings.server
    cors = (
        ("any origin" if not server.cors_origins else ", ".join(server.cors_origins))
        if server.cors_enabled
        else "off"
    )
    logging.getLogger("blazr.server").info(
        "blazr %s serving %s on %s://%s:%d (device %s, %d API key(s), CORS %s)",
        __version__,
        model,
        "https" if server.tls_cert else "http",
        server.host,
        server.port,
        settings.device,
        len(api_keys),
        cors,
    )
    serve_app(app, settings, watch)


def serve_app(app, settings: Settings, watch: tuple | None = None) -> None:
    """Serve `app` with Hypercorn until SIGTERM/SIGINT; then stop accepting, give in-flight requests
    shutdown_grace_secs to finish, and return (the process exits 0)."""
    from hypercorn.config import Config

    _configure_logging()
    server = settings.server
    config = Config()
    config.bind = [f"{server.host}:{server.port}"]
    if server.tls_cert:
        config.certfile, config.keyfile = server.tls_cert, server.tls_key
    config.graceful_timeout = server.shutdown_grace_secs
    config.accesslog = None  # the app logs each request with its id, route, status and latency
    config.errorlog = logging.getLogger("hypercorn.error")
    asyncio.run(_serve(app, config, watch))


async def _serve(app, config, watch: tuple | None = None) -> None:
    from hypercorn.asyncio import serve

    state = app.extensions["blazr"]
    stop = asyncio.Event()

    def on_signal() -> None:
        logging.getLogger("blazr.server").info("shutting down: finishing in-flight requests")
        state.shutting_down = True
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    failed: list[str] = []
    watchers = [asyncio.ensure_future(_stop_if_default_fails(state, stop, failed))]
    if watch is not None:  # live configuration (blazr/server/live_config.py)
        from blazr.server.live_config import watch_config

        watchers.append(asyncio.ensure_future(watch_config(state, *watch)))
    try:
        await serve(app, config, shutdown_trigger=stop.wait)
    except OSError as e:
        raise ConfigError(f"cannot listen on {config.bind[0]}: {e.strerror}") from None
    finally:
        for watcher in watchers:
            watcher.cancel()
    if failed:
        raise BlazrError(f"cannot serve: the model {state.models.default_model!r} did not load: {failed[0]}")
    logging.getLogger("blazr.server").info("server shut down gracefully")


async def _stop_if_default_fails(state, stop: asyncio.Event, failed: list[str]) -> None:
    """Shut the server down when the model `serve` was started with fails to load (a broken file, a format
    blazr does not run): answering /health 503 forever would hide the error from whatever supervises the
    process. Models named later in requests fail those requests only (state.ModelManager)."""
    models = state.models
    while not models.ready:
        await asyncio.sleep(0.05)
    if models.default_error is not None:
        failed.append(models.default_error.message)
        state.shutting_down = True
        stop.set()


def ps(
    server: Annotated[str, typer.Option("--server", help="Server URL")] = "http://localhost:8080",
    api_key: Annotated[str | None, typer.Option("--api-key", help="API key (also BLAZR_API_KEY)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the server's JSON (for scripts)")] = False,
) -> None:
    """List the models a running server has loaded (GET /api/ps)."""
    import os

    key = api_key or os.environ.get("BLAZR_API_KEY")
    request = urllib.request.Request(server.rstrip("/") + "/api/ps")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            models = json.loads(response.read()).get("models", [])
    except urllib.error.HTTPError as e:
        raise BlazrError(
            f"{server}/api/ps answered {e.code}: {e.read().decode(errors='replace')[:200]}"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        raise BlazrError(f"cannot reach the server at {server}: {getattr(e, 'reason', e)}") from None
    if as_json:
        typer.echo(json.dumps(models, indent=1))
        return
    if not models:
        typer.echo("No models currently loaded.")
        return
    typer.echo(f"{'NAME':40} {'SIZE':>9}  EXPIRES")
    for m in models:
        size = f"{m.get('size', 0) / 1e9:.2f} GB"
        typer.echo(f"{m.get('name', '?'):40} {size:>9}  {m.get('expires_at') or 'never'}")
