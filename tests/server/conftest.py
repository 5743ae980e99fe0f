"""Server fixtures shared by every tests/server module.

- `tiny_model_dir`: a model directory with a tiny random-weight Llama GGUF ("tiny.gguf", byte-level vocab,
  a plain chat template) — loads in well under a second.
- `make_app(model=..., model_dir=..., api_keys=..., **server_settings)`: a started Quart app (before_serving
  ran, the default model loaded); `app.test_client()` talks to it. Closed at teardown.
- `tiny_client` / `smollm2_client`: a test client over an app serving the tiny model / the real SmolLM2.
- `live_server(...)`: a REAL hypercorn server on 127.0.0.1 and a free port in a background thread (for
  SDK tests that need a socket); yields a LiveServer with `.url` and `.app`; stopped at teardown.

Async tests use anyio's pytest plugin (installed with httpx): mark them `pytestmark = pytest.mark.anyio`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from blazr.config import Settings
from blazr.server.app import create_app
from tests.gguf_writer import write_gguf
from tests.tiny_models import tiny_config, tiny_weights

TINY_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def byte_level_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order (256 tokens, no merges)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tiny_gguf(path: Path, name: str = "llama") -> Path:
    """Tiny model `name` as F32 GGUF with an embedded 256-token byte-level vocab (ids 1, 2: BOS, EOS), so any
    ASCII text tokenizes; the chat template is TINY_TEMPLATE."""
    tokens = byte_level_alphabet()
    tokens[0] = "!!"  # byte 0 gives way to one merge: the GGUF reader wants a non-empty merge list
    types = [1] * 256
    types[1] = types[2] = 3  # control tokens: BOS and EOS
    tokenizer = {
        "model": "gpt2",
        "pre": "default",
        "tokens": tokens,
        "token_type": types,
        "merges": ["! !"],
        "add_bos_token": False,
        "chat_template": TINY_TEMPLATE,
    }
    return write_gguf(path, tiny_config(name), tiny_weights(name), "F32", tokenizer=tokenizer)


@pytest.fixture
def anyio_backend():
    """Async tests (marked `pytest.mark.anyio`) and async fixtures run on asyncio, as the server does."""
    return "asyncio"


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture
def tiny_model_dir(tmp_path, tiny_gguf) -> Path:
    """A model directory holding tiny.gguf (a link to the session's file)."""
    directory = tmp_path / "models"
    directory.mkdir()
    (directory / "tiny.gguf").symlink_to(tiny_gguf)
    return directory


def server_settings(**server) -> Settings:
    """Default settings (no config file or environment) with `server.<key>` overrides."""
    settings = Settings()
    for key, value in server.items():
        settings.set(f"server.{key}", value, "test")
    return settings


async def wait_ready(app, timeout: float = 60.0) -> None:
    state = app.extensions["blazr"]
    deadline = time.monotonic() + timeout
    while not state.models.ready and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


@pytest.fixture
async def make_app():
    """Factory for started apps; every app is shut down (engines stopped) at teardown."""
    started = []

    async def make(
        model=None,
        model_dir=None,
        api_keys=None,
        loader=None,
        wait=True,
        settings=None,
        loras=None,
        **server,
    ):
        settings = settings or server_settings(**server)
        kwargs = {"loader": loader} if loader is not None else {}
        kwargs |= {"loras": loras} if loras is not None else {}
        app = create_app(settings, model=model, model_dir=model_dir, api_keys=api_keys, **kwargs)
        await app.startup()
        started.append(app)
        if wait:
            await wait_ready(app)
        return app

    yield make
    for app in started:
        await app.shutdown()


@pytest.fixture
async def tiny_app(make_app, tiny_model_dir):
    return await make_app(model="tiny", model_dir=tiny_model_dir)


@pytest.fixture
async def tiny_client(tiny_app):
    return tiny_app.test_client()


@pytest.fixture
def smollm2_model_dir(tmp_path, smollm2_gguf) -> Path:
    directory = tmp_path / "smollm2-models"
    directory.mkdir()
    (directory / SMOLLM2_NAME).symlink_to(smollm2_gguf)
    return directory


@pytest.fixture
async def smollm2_app(make_app, smollm2_model_dir):
    return await make_app(model=SMOLLM2_NAME, model_dir=smollm2_model_dir)


@pytest.fixture
async def smollm2_client(smollm2_app):
    return smollm2_app.test_client()


# ---- a real server on a socket ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    url: str
    app: object
    port: int


@contextmanager
def run_live_server(app, *, certfile: str | None = None, keyfile: str | None = None, timeout: float = 180.0):
    """Serve `app` with hypercorn on 127.0.0.1:<free port> in a thread until the block exits. `timeout` bounds the
    start, which on an empty kernel cache compiles the model's kernels: SmolLM2's took 50-60 s in CI's host suite
    on a 2-core AMD EPYC of the Zen 1 class, beside the other half (a limit of 60 s failed there)."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.certfile, config.keyfile = certfile, keyfile
    config.graceful_timeout = 2.0
    config.accesslog = config.errorlog = None
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(app, config, shutdown_trigger=stop.wait))

    thread = threading.Thread(target=main, name="blazr-test-server", daemon=True)
    thread.start()
    scheme = "https" if certfile else "http"
    _wait_for_port(port, timeout)
    asyncio.run_coroutine_threadsafe(wait_ready(app, timeout), loop).result(timeout)
    try:
        yield LiveServer(f"{scheme}://127.0.0.1:{port}", app, port)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        if thread.is_alive():
            raise RuntimeError("the test server did not stop within 30 s")
        loop.close()


def _wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"the test server did not listen on port {port} within {timeout} s")


@pytest.fixture
def live_server(tiny_model_dir):
    """Factory: `with live_server(model=..., model_dir=..., api_keys=..., setup=fn(app), **server) as srv:`
    -> LiveServer (server keys are ServerSettings fields, e.g. max_queued_requests=0)."""

    @contextmanager
    def start(model="tiny", model_dir=None, api_keys=None, certfile=None, keyfile=None, setup=None, **server):
        app = create_app(
            server_settings(**server), model=model, model_dir=model_dir or tiny_model_dir, api_keys=api_keys
        )
        if setup is not None:
            setup(app)  # e.g. add_stream_route
        with run_live_server(app, certfile=certfile, keyfile=keyfile) as srv:
            yield srv

    return start


# ---- a test-only streaming route (the core tests run before any generation route exists) ---------------


def add_stream_route(app) -> None:
    """POST /v1/test-stream {prompt_ids, max_tokens, delay}: SSE of generated token ids, `delay` seconds
    between chunks (to keep a stream in flight), then [DONE]; an error mid-stream is one `{"error": ...}`
    event, as the OpenAI routes send it."""
    from blazr.engine.request import SamplingParams
    from blazr.server import protocol
    from blazr.server.errors import ApiError, error_body
    from blazr.server.generation import open_stream
    from blazr.server.sse import SSE_DONE, sse_event, sse_response
    from blazr.server.state import current_state

    async def stream():
        body = await protocol.read_json()
        model = await current_state().models.get(None)
        params = SamplingParams(max_tokens=protocol.get_int(body, "max_tokens", default=8), temperature=0.0)
        delay = protocol.get_float(body, "delay", default=0.0)
        deltas = await open_stream(
            model, protocol.get_list(body, "prompt_ids", default=[1, 17, 99]), params, "t"
        )

        async def chunks():
            try:
                async for delta in deltas:
                    yield sse_event({"ids": delta.token_ids, "finish_reason": delta.finish_reason})
                    await asyncio.sleep(delay)
                yield SSE_DONE
            except ApiError as error:
                yield sse_event(error_body(error, "openai"))
            finally:
                await deltas.aclose()

        return sse_response(chunks())

    app.add_url_rule("/v1/test-stream", "test_stream", stream, methods=["POST"])
